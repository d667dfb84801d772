/* Every entry of core/backend.h on every device backend against the CPU backend, from one table
 * (after ggml's test-backend-ops; STYLE.md rule 6).
 *
 * Each row of `rows` names an entry, its shape, dtype(s), scalars, tolerance and input range. The
 * row's inputs come from a generator seeded by the row's index (plus NaN/Inf and edge values in
 * rows marked `specials`); both backends receive the same bytes, run the entry, and hand back
 * every buffer with the GUARD_NBYTES that followed it. A row passes when the guard zones and the
 * inputs come back untouched on both backends and every output agrees with the CPU's within the
 * row's tolerance (backend_ops_harness.h). A row whose entry the backend leaves NULL counts as
 * "not implemented on <backend>" on a real device, never as passed; in the cudacpu build (AMP_CUDACPU=ON), where the CUDA backend runs on every machine
 * and fills every entry, it counts as a failure.
 *
 * The GEMM entry and the rows of its fused parts (epilogue, bias gradient, TF32, the bias of half
 * outputs) and of the convolution's switches are in backend_ops_gemm.h; the rows of the
 * per-tensor unscale are in backend_ops_optim.h, those of the optimizers and the
 * multi-tensor scaler passes (a list of tensors carved out of one buffer per list) in
 * backend_ops_multi.h, those of the loss scaler's device state in backend_ops_scaler.h, those
 * of synchronised batch norm in backend_ops_syncbn.h and those of the transformer ops (over
 * dims, strided, norms, softmax, embedding) in backend_ops_transformer.h. The entry ids come
 * from the kernel list (core/backend_kernels.def); every kernel has rows, which the program
 * checks before it runs; the memory, copy and stream entries (not_op_entries) are not op rows.
 *
 * Tolerances follow the numerics each entry promises: casts, fills, copies, ReLU and max pooling
 * move or select values, so their bits must agree; one-rounding ops (add, sub, mul, scale,
 * dropout) must give the same value; rtol 2^-7 (bf16) and 2^-10 (f16) let a result rounded to a
 * half type land one unit in the last place away when the f32 value before rounding differs in
 * its last bits (fused multiply-adds, another summation order); reductions, GEMM, convolution and
 * batch norm allow for their accumulation order in f32 (not for TF32, which the backend contract
 * excludes unless a descriptor's allow_tf32 asks for it: those rows are backend_ops_gemm.h's).
 *
 * Usage: test_backend_ops [--self] [--seed N] [--row SUBSTRING]
 *   (default) every device backend present against the CPU; none present: prints why and
 *             returns 77 (ctest SKIPPED). The cudacpu build always has the CUDA backend.
 *   --self    the CPU backend against itself, bit for bit: a check of the harness (guard zones,
 *             prefilled outputs, NaN logic) that runs without a device. */
#include <stddef.h>

#include "backend_ops_harness.h"
#include "kernels/math/attention.h"

/* The entry ids, one per line of core/backend_kernels.def: E_<entry>. */
typedef enum entry {
#define AMP_KERNEL(name, category, flops, check, params, args) E_##name,
#include "core/backend_kernels.def"
#undef AMP_KERNEL
    E_N
} entry;

/* Row variants (the multi-tensor and scaler entries' are in their headers, from 1 << 10). */
enum {
    TRANS_A = 1, TRANS_B = 2, /* GEMM */
    BIAS = 4,                 /* GEMM and conv2d_fwd: bias; conv2d_bwd_weight: dbias */
    NO_AFFINE = 8,            /* batch norm: gamma and beta NULL */
    NO_STATS = 16,            /* bn_fwd_train: running stats and save_* NULL */
    NESTEROV = 32, FIRST_STEP = 64, /* SGD */
    DECOUPLED = 128,                /* AdamW */
    ALLOW_TF32 = 256,               /* GEMM and conv2d descriptors: allow_tf32 */
    NONDETERMINISTIC = 512,         /* conv2d descriptors: allow_nondeterministic */
    BN_RELU = 1 << 10, /* batch norm: amp_bn_desc.relu (bn_bwd: slot 8 is the forward's y) */
};

typedef struct op_row {
    const char *name;
    entry e;
    int64_t s[11]; /* shape: its meaning per entry is given at the entry's setup below */
    amp_dtype dt, dt2;
    int flags;
    int op;     /* amp_unary_op / amp_binary_op */
    float f[8]; /* scalars: their meaning per entry is given at the entry's setup below */
    tol tol;
    float lo, hi;  /* range of the main inputs */
    bool specials; /* NaN, Inf, signed zeros and edge values in the main inputs */
} op_row;

/* Main inputs: uniform in the row's range, with specials where the row asks. */
static void gen_main(const op_row *r, tcase *c, int i) {
    gen_uniform(c, i, r->lo, r->hi);
    if (r->specials) gen_specials(c, i);
}

static void *in_main(const op_row *r, tcase *c, int i, const char *name, ek k, int64_t n) {
    void *p = slot_decl(c, i, name, ROLE_IN, k, n);
    gen_main(r, c, i);
    return p;
}

static void *in_range(tcase *c, int i, const char *name, role ro, ek k, int64_t n, double lo,
                      double hi) {
    void *p = slot_decl(c, i, name, ro, k, n);
    gen_uniform(c, i, lo, hi);
    return p;
}

/* ---- Entries: setup declares the slots (argument order) and fills the inputs; run calls the
 * backend with the slots' device pointers. ---------------------------------------------------- */

/* cast: s = {n}; dt -> dt2. */
static void setup_cast(const op_row *r, tcase *c) {
    in_main(r, c, 0, "src", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "dst", ROLE_OUT, ek_of(r->dt2), r->s[0]);
}
static amp_status run_cast(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.cast(be->dev, p[1], r->dt2, p[0], r->dt, r->s[0]);
}

/* fill: s = {n}, f = {value}. */
static void setup_fill(const op_row *r, tcase *c) {
    slot_decl(c, 0, "dst", ROLE_OUT, ek_of(r->dt), r->s[0]);
}
static amp_status run_fill(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.fill(be->dev, p[0], r->dt, r->s[0], r->f[0]);
}

/* fill_scalar: s = {n}, f = {*scalar, scale}. */
static void setup_fill_scalar(const op_row *r, tcase *c) {
    float *scalar = slot_decl(c, 0, "scalar", ROLE_IN, EK_F32, 1);
    scalar[0] = r->f[0];
    slot_decl(c, 1, "dst", ROLE_OUT, ek_of(r->dt), r->s[0]);
}
static amp_status run_fill_scalar(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.fill_scalar(be->dev, p[1], r->dt, r->s[0], p[0], r->f[1]);
}

/* conv2d: s = {n, c_in, h, w, c_out, kh, kw, stride_h, stride_w, pad_h, pad_w}; dtype dt. */
static amp_conv2d_desc conv_desc(const op_row *r) {
    const int64_t *s = r->s;
    amp_conv2d_desc d = {.n = s[0], .c_in = s[1], .h_in = s[2], .w_in = s[3], .c_out = s[4],
                         .kh = s[5], .kw = s[6], .stride_h = s[7], .stride_w = s[8],
                         .pad_h = s[9], .pad_w = s[10], .dtype = r->dt,
                         .allow_tf32 = r->flags & ALLOW_TF32,
                         .allow_nondeterministic = r->flags & NONDETERMINISTIC};
    d.h_out = (d.h_in + 2 * d.pad_h - d.kh) / d.stride_h + 1;
    d.w_out = (d.w_in + 2 * d.pad_w - d.kw) / d.stride_w + 1;
    return d;
}
static int64_t conv_x_numel(const amp_conv2d_desc *d) { return d->n * d->c_in * d->h_in * d->w_in; }
static int64_t conv_w_numel(const amp_conv2d_desc *d) { return d->c_out * d->c_in * d->kh * d->kw; }
static int64_t conv_y_numel(const amp_conv2d_desc *d) {
    return d->n * d->c_out * d->h_out * d->w_out;
}

static void setup_conv_fwd(const op_row *r, tcase *c) {
    amp_conv2d_desc d = conv_desc(r);
    in_main(r, c, 0, "x", ek_of(r->dt), conv_x_numel(&d));
    in_main(r, c, 1, "w", ek_of(r->dt), conv_w_numel(&d));
    if (r->flags & BIAS) in_range(c, 2, "bias", ROLE_IN, EK_F32, d.c_out, -1, 1);
    slot_decl(c, 3, "y", ROLE_OUT, ek_of(r->dt), conv_y_numel(&d));
}
static amp_status run_conv_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_conv2d_desc d = conv_desc(r);
    return be->k.conv2d_fwd(be->dev, &d, p[0], p[1], p[2], p[3]);
}

static void setup_conv_bwd_data(const op_row *r, tcase *c) {
    amp_conv2d_desc d = conv_desc(r);
    in_main(r, c, 0, "dy", ek_of(r->dt), conv_y_numel(&d));
    in_main(r, c, 1, "w", ek_of(r->dt), conv_w_numel(&d));
    slot_decl(c, 2, "dx", ROLE_OUT, ek_of(r->dt), conv_x_numel(&d));
}
static amp_status run_conv_bwd_data(const op_row *r, const amp_backend *be, void *const *p) {
    amp_conv2d_desc d = conv_desc(r);
    return be->k.conv2d_bwd_data(be->dev, &d, p[0], p[1], p[2]);
}

static void setup_conv_bwd_weight(const op_row *r, tcase *c) {
    amp_conv2d_desc d = conv_desc(r);
    in_main(r, c, 0, "x", ek_of(r->dt), conv_x_numel(&d));
    in_main(r, c, 1, "dy", ek_of(r->dt), conv_y_numel(&d));
    slot_decl(c, 2, "dw", ROLE_OUT, ek_of(r->dt), conv_w_numel(&d));
    if (r->flags & BIAS) slot_decl(c, 3, "dbias", ROLE_OUT, EK_F32, d.c_out);
}
static amp_status run_conv_bwd_weight(const op_row *r, const amp_backend *be, void *const *p) {
    amp_conv2d_desc d = conv_desc(r);
    return be->k.conv2d_bwd_weight(be->dev, &d, p[0], p[1], p[2], p[3]);
}

/* Batch norm: s = {n, c, hw}, f = {eps, momentum}; x in the row's range, gamma in [0.5, 1.5),
 * beta, running_mean in [-0.5, 0.5), running_var in [0.5, 2). */
static amp_bn_desc bn_desc(const op_row *r) {
    return (amp_bn_desc){.n = r->s[0], .c = r->s[1], .hw = r->s[2], .eps = r->f[0],
                         .momentum = r->f[1], .dtype = r->dt, .relu = (r->flags & BN_RELU) != 0};
}
static int64_t bn_numel(const op_row *r) { return r->s[0] * r->s[1] * r->s[2]; }

static void bn_affine(const op_row *r, tcase *c, int i) {
    if (r->flags & NO_AFFINE) return;
    in_range(c, i, "gamma", ROLE_IN, EK_F32, r->s[1], 0.5, 1.5);
    in_range(c, i + 1, "beta", ROLE_IN, EK_F32, r->s[1], -0.5, 0.5);
}

static void setup_bn_train(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), bn_numel(r));
    bn_affine(r, c, 1);
    slot_decl(c, 3, "y", ROLE_OUT, ek_of(r->dt), bn_numel(r));
    if (r->flags & NO_STATS) return;
    slot_decl(c, 4, "save_mean", ROLE_OUT, EK_F32, r->s[1]);
    slot_decl(c, 5, "save_invstd", ROLE_OUT, EK_F32, r->s[1]);
    in_range(c, 6, "running_mean", ROLE_INOUT, EK_F32, r->s[1], -0.5, 0.5);
    in_range(c, 7, "running_var", ROLE_INOUT, EK_F32, r->s[1], 0.5, 2);
}
static amp_status run_bn_train(const op_row *r, const amp_backend *be, void *const *p) {
    amp_bn_desc d = bn_desc(r);
    return be->k.bn_fwd_train(be->dev, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}

static void setup_bn_eval(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), bn_numel(r));
    bn_affine(r, c, 1);
    in_range(c, 3, "running_mean", ROLE_IN, EK_F32, r->s[1], -0.5, 0.5);
    in_range(c, 4, "running_var", ROLE_IN, EK_F32, r->s[1], 0.5, 2);
    slot_decl(c, 5, "y", ROLE_OUT, ek_of(r->dt), bn_numel(r));
}
static amp_status run_bn_eval(const op_row *r, const amp_backend *be, void *const *p) {
    amp_bn_desc d = bn_desc(r);
    return be->k.bn_fwd_eval(be->dev, &d, p[0], p[1], p[2], p[3], p[4], p[5]);
}

/* bn_bwd: x and dy in the row's range; save_mean and save_invstd are x's batch statistics,
 * computed here in double, as the forward would have saved them. */
static void setup_bn_bwd(const op_row *r, tcase *c) {
    int64_t n = r->s[0], ch = r->s[1], hw = r->s[2];
    ek k = ek_of(r->dt);
    const void *x = in_main(r, c, 0, "x", k, bn_numel(r));
    in_main(r, c, 1, "dy", k, bn_numel(r));
    if (!(r->flags & NO_AFFINE)) in_range(c, 2, "gamma", ROLE_IN, EK_F32, ch, 0.5, 1.5);
    float *mean = slot_decl(c, 3, "save_mean", ROLE_IN, EK_F32, ch);
    float *invstd = slot_decl(c, 4, "save_invstd", ROLE_IN, EK_F32, ch);
    for (int64_t j = 0; j < ch; j++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t e = 0; e < hw; e++) s += ek_load(x, k, (i * ch + j) * hw + e);
        double mu = s / (double)(n * hw);
        for (int64_t i = 0; i < n; i++)
            for (int64_t e = 0; e < hw; e++) {
                double dev = ek_load(x, k, (i * ch + j) * hw + e) - mu;
                ss += dev * dev;
            }
        mean[j] = (float)mu;
        invstd[j] = (float)(1.0 / sqrt(ss / (double)(n * hw) + r->f[0]));
    }
    slot_decl(c, 5, "dx", ROLE_OUT, k, bn_numel(r));
    slot_decl(c, 6, "dgamma", ROLE_OUT, EK_F32, ch);
    slot_decl(c, 7, "dbeta", ROLE_OUT, EK_F32, ch);
    /* The fused ReLU's output: in the row's range, two fifths of it <= 0 (dy masked there). */
    if (r->flags & BN_RELU) in_main(r, c, 8, "y", k, bn_numel(r));
}
static amp_status run_bn_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_bn_desc d = bn_desc(r);
    return be->k.bn_bwd(be->dev, &d, p[0], p[1], p[8], p[2], p[3], p[4], p[5], p[6], p[7]);
}

/* Max pooling: s = {n, c, h, w, k, stride, pad}. */
static amp_pool_desc pool_desc(const op_row *r) {
    const int64_t *s = r->s;
    amp_pool_desc d = {.n = s[0], .c = s[1], .h_in = s[2], .w_in = s[3], .k = s[4],
                       .stride = s[5], .pad = s[6], .dtype = r->dt};
    d.h_out = (d.h_in + 2 * d.pad - d.k) / d.stride + 1;
    d.w_out = (d.w_in + 2 * d.pad - d.k) / d.stride + 1;
    return d;
}

static void setup_pool_fwd(const op_row *r, tcase *c) {
    amp_pool_desc d = pool_desc(r);
    in_main(r, c, 0, "x", ek_of(r->dt), d.n * d.c * d.h_in * d.w_in);
    slot_decl(c, 1, "y", ROLE_OUT, ek_of(r->dt), d.n * d.c * d.h_out * d.w_out);
}
static amp_status run_pool_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_pool_desc d = pool_desc(r);
    return be->k.maxpool_fwd(be->dev, &d, p[0], p[1]);
}

/* maxpool_bwd: dy and the forward's input x, whose windows' maxima the backward finds again;
 * overlapping windows (stride < k) add several dy into one dx. */
static void setup_pool_bwd(const op_row *r, tcase *c) {
    amp_pool_desc d = pool_desc(r);
    in_main(r, c, 0, "dy", ek_of(r->dt), d.n * d.c * d.h_out * d.w_out);
    in_main(r, c, 1, "x", ek_of(r->dt), d.n * d.c * d.h_in * d.w_in);
    slot_decl(c, 2, "dx", ROLE_OUT, ek_of(r->dt), d.n * d.c * d.h_in * d.w_in);
}
static amp_status run_pool_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_pool_desc d = pool_desc(r);
    return be->k.maxpool_bwd(be->dev, &d, p[0], p[1], p[2]);
}

/* unary: s = {n}, op, f = {alpha}. */
static void setup_unary(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "y", ROLE_OUT, ek_of(r->dt), r->s[0]);
}
static amp_status run_unary(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.unary(be->dev, (amp_unary_op)r->op, r->dt, r->s[0], p[0], r->f[0], p[1]);
}

/* binary: s = {n}, op. */
static void setup_binary(const op_row *r, tcase *c) {
    in_main(r, c, 0, "a", ek_of(r->dt), r->s[0]);
    in_main(r, c, 1, "b", ek_of(r->dt), r->s[0]);
    slot_decl(c, 2, "y", ROLE_OUT, ek_of(r->dt), r->s[0]);
}
static amp_status run_binary(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.binary(be->dev, (amp_binary_op)r->op, r->dt, r->s[0], p[0], p[1], p[2]);
}

/* axpy: s = {n}, f = {alpha}; y is read and written. */
static void setup_axpy(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "y", ROLE_INOUT, ek_of(r->dt), r->s[0]);
    gen_main(r, c, 1);
}
static amp_status run_axpy(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.axpy(be->dev, r->dt, r->s[0], r->f[0], p[0], p[1]);
}

/* sum: s = {n}, f = {alpha}. */
static void setup_sum(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "out", ROLE_OUT, EK_F32, 1);
}
static amp_status run_sum(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.sum(be->dev, r->dt, r->s[0], p[0], r->f[0], p[1]);
}

/* sum_rows: s = {rows, cols}. */
static void setup_sum_rows(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0] * r->s[1]);
    slot_decl(c, 1, "out", ROLE_OUT, EK_F32, r->s[1]);
}
static amp_status run_sum_rows(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.sum_rows(be->dev, r->dt, r->s[0], r->s[1], p[0], p[1]);
}

/* MSE: s = {n}; bwd f = {dloss}. */
static void setup_mse_fwd(const op_row *r, tcase *c) {
    in_main(r, c, 0, "a", ek_of(r->dt), r->s[0]);
    in_main(r, c, 1, "b", ek_of(r->dt), r->s[0]);
    slot_decl(c, 2, "loss", ROLE_OUT, EK_F32, 1);
}
static amp_status run_mse_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.mse_fwd(be->dev, r->dt, r->s[0], p[0], p[1], p[2]);
}

static void setup_mse_bwd(const op_row *r, tcase *c) {
    in_main(r, c, 0, "a", ek_of(r->dt), r->s[0]);
    in_main(r, c, 1, "b", ek_of(r->dt), r->s[0]);
    float *dloss = slot_decl(c, 2, "dloss", ROLE_IN, EK_F32, 1);
    dloss[0] = r->f[0];
    slot_decl(c, 3, "da", ROLE_OUT, ek_of(r->dt), r->s[0]);
}
static amp_status run_mse_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.mse_bwd(be->dev, r->dt, r->s[0], p[0], p[1], p[2], p[3]);
}

/* Dropout: s = {n, seed, offset}, f = {p}; the backward's mask keeps with probability 1 - p. */
static void setup_dropout_fwd(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0]);
    slot_decl(c, 1, "y", ROLE_OUT, ek_of(r->dt), r->s[0]);
    slot_decl(c, 2, "mask", ROLE_OUT, EK_U8, r->s[0]);
}
static amp_status run_dropout_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.dropout_fwd(be->dev, r->dt, r->s[0], p[0], r->f[0], (uint64_t)r->s[1],
                             (uint64_t)r->s[2], p[1], p[2]);
}

static void setup_dropout_bwd(const op_row *r, tcase *c) {
    in_main(r, c, 0, "dy", ek_of(r->dt), r->s[0]);
    uint8_t *mask = slot_decl(c, 1, "mask", ROLE_IN, EK_U8, r->s[0]);
    for (int64_t i = 0; i < r->s[0]; i++) mask[i] = rng_unit(&c->rng) >= r->f[0];
    slot_decl(c, 2, "dx", ROLE_OUT, ek_of(r->dt), r->s[0]);
}
static amp_status run_dropout_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.dropout_bwd(be->dev, r->dt, r->s[0], p[0], p[1], r->f[0], p[2]);
}

/* ---- The rows' dtypes and tolerances -------------------------------------------------------- */

#define F32 AMP_F32
#define F16 AMP_F16
#define BF16 AMP_BF16
#define I32 AMP_I32
#define EXACT {true, 0, 0, 0}
#define TOL(atol, rtol) {false, atol, rtol, 0}
/* The same with at least `ulps` units in the last place of each output's kind (ek_ulp). */
#define TOL_ULPS(atol, rtol, ulps) {false, atol, rtol, ulps}
/* One unit in the last place of a result rounded to bf16 / f16, relative to the value. */
#define ULP_BF16 0x1p-7
#define ULP_F16 0x1p-10
#define ACT_L1 (8 * 16 * 28 * 28) /* the ConvNet's layer1 activations: 100352 elements */

/* The ConvNet of models/mnist.c at batch 8, and an odd shape (stride 2 x 1, pad 1 x 0, 3 x 2
 * kernel) whose sizes divide nothing. */
#define CONV_L1 {8, 1, 28, 28, 16, 5, 5, 1, 1, 2, 2}
#define CONV_L2 {8, 16, 14, 14, 32, 5, 5, 1, 1, 2, 2}
#define CONV_ODD {3, 3, 17, 13, 8, 3, 2, 2, 1, 1, 0}

#include "backend_ops_gemm.h"
#include "backend_ops_optim.h"
#include "backend_ops_multi.h"
#include "backend_ops_scaler.h"
#include "backend_ops_syncbn.h"
#include "backend_ops_transformer.h"

/* ---- The entry table ------------------------------------------------------------------------ */

typedef struct entry_info {
    const char *member; /* the kernel's name: NULL there means "no row for it yet" */
    size_t offset;      /* of the kernel's slot in amp_backend */
    void (*setup)(const op_row *r, tcase *c);
    amp_status (*run)(const op_row *r, const amp_backend *be, void *const *p);
} entry_info;

#define ENTRY(name, fn)                                                                            \
    [E_##name] = {#name, offsetof(amp_backend, k) + offsetof(amp_kernels, name), setup_##fn,       \
                  run_##fn}

static const entry_info entries[E_N] = {
    ENTRY(cast, cast), ENTRY(fill, fill), ENTRY(fill_scalar, fill_scalar), ENTRY(gemm, gemm),
    ENTRY(conv2d_fwd, conv_fwd), ENTRY(conv2d_bwd_data, conv_bwd_data),
    ENTRY(conv2d_bwd_weight, conv_bwd_weight), ENTRY(bn_fwd_train, bn_train),
    ENTRY(bn_fwd_eval, bn_eval), ENTRY(bn_bwd, bn_bwd), ENTRY(maxpool_fwd, pool_fwd),
    ENTRY(maxpool_bwd, pool_bwd), ENTRY(unary, unary), ENTRY(binary, binary), ENTRY(axpy, axpy),
    ENTRY(sum, sum), ENTRY(sum_rows, sum_rows), ENTRY(mse_fwd, mse_fwd), ENTRY(mse_bwd, mse_bwd),
    ENTRY(dropout_fwd, dropout_fwd), ENTRY(dropout_bwd, dropout_bwd), ENTRY(unscale, unscale),
    ENTRY(sgd_multi, sgd_multi), ENTRY(adam_multi, adam_multi), ENTRY(lamb_multi, lamb_multi),
    ENTRY(unscale_multi, unscale_multi), ENTRY(nonfinite_multi, nonfinite_multi),
    ENTRY(sum_squares_multi, sum_squares_multi), ENTRY(scaler_seed, scaler_seed),
    ENTRY(scaler_clip, scaler_clip), ENTRY(scaler_update, scaler_update),
    ENTRY(bn_channel_sums, bn_channel_sums), ENTRY(bn_sync_stats, bn_sync_stats),
    ENTRY(bn_bwd_elemt, bn_bwd_elemt), ENTRY(reduce_dim, reduce_dim),
    ENTRY(scatter_dim, scatter_dim), ENTRY(binary_bcast, binary_bcast), ENTRY(where, where),
    ENTRY(copy_strided, copy_strided), ENTRY(layernorm_fwd, layernorm_fwd),
    ENTRY(layernorm_bwd, layernorm_bwd), ENTRY(softmax_fwd, softmax_fwd),
    ENTRY(softmax_bwd, softmax_bwd), ENTRY(embedding_fwd, embedding_fwd),
    ENTRY(embedding_bwd, embedding_bwd), ENTRY(rope, rope), ENTRY(swiglu_fwd, swiglu_fwd),
    ENTRY(swiglu_bwd, swiglu_bwd), ENTRY(xent_fwd, xent_fwd),
    ENTRY(xent_bwd, xent_bwd),
    ENTRY(attn_fwd, attn_fwd), ENTRY(attn_bwd, attn_bwd),
};

/* The backend table's entries that are not ops: memory, copies and streams. The harness runs
 * alloc, free, the host copies and sync for every row; the others are the backend tests'
 * (tests/unit/test_cuda_backend.c, test_cuda_backend_host.cpp, test_cuda_streams.c). */
static const char *const not_op_entries[] = {
    "alloc", "free", "memset_zero", "copy", "copy_to_host", "copy_from_host", "sync",
    "upload_async", "mark", "event_free", "memory_stats", "memory_reset_peak", "system_allocs",
};

/* ---- The rows ------------------------------------------------------------------------------- */

static const op_row rows[] = {
    /* Casts: every dtype pair the contract names, bits exact, specials in. */
    {"cast_f32_f16", E_cast, {10007}, F32, F16, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"cast_f32_f16_overflow", E_cast, {10007}, F32, F16, .tol = EXACT, .lo = -7e4, .hi = 7e4, .specials = true},
    {"cast_f32_bf16", E_cast, {ACT_L1}, F32, BF16, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"cast_f16_f32", E_cast, {10007}, F16, F32, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"cast_bf16_f32", E_cast, {10007}, BF16, F32, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"cast_f16_bf16", E_cast, {10007}, F16, BF16, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"cast_bf16_f16", E_cast, {10007}, BF16, F16, .tol = EXACT, .lo = -1e5, .hi = 1e5, .specials = true},
    {"cast_f32_f32", E_cast, {10007}, F32, F32, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"cast_f32_i32", E_cast, {10007}, F32, I32, .tol = EXACT, .lo = -1e6, .hi = 1e6, .specials = true},
    {"cast_i32_f32", E_cast, {10007}, I32, F32, .tol = EXACT, .lo = -3e7, .hi = 3e7, .specials = true},
    /* Fills: the value rounds like a cast (70000 -> f16 inf, NaN -> 0x7fff, -7.9 -> i32 -7). */
    {"fill_f32", E_fill, {ACT_L1}, F32, .f = {0.1f}, .tol = EXACT},
    {"fill_f16_overflow", E_fill, {10007}, F16, .f = {70000.0f}, .tol = EXACT},
    {"fill_bf16_third", E_fill, {10007}, BF16, .f = {1.0f / 3.0f}, .tol = EXACT},
    {"fill_f16_nan", E_fill, {1025}, F16, .f = {NAN}, .tol = EXACT},
    {"fill_i32", E_fill, {1025}, I32, .f = {-7.9f}, .tol = EXACT},
    {"fill_scalar_f32_mean_grad", E_fill_scalar, {ACT_L1}, F32, .f = {1.0f, 1.0f / ACT_L1}, .tol = EXACT},
    {"fill_scalar_f16_scaled", E_fill_scalar, {10007}, F16, .f = {65536.0f, 1.0f / 3.0f}, .tol = EXACT},
    {"fill_scalar_bf16", E_fill_scalar, {10007}, BF16, .f = {-3.0f, 0.25f}, .tol = EXACT},
    /* GEMM: s = {m, n, k, pad}; the ConvNet's fc forward (NT + bias), dx (NN) and dW (TN). */
    {"gemm_f32_nn", E_gemm, {64, 96, 80}, F32, F32, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f32_nt_bias_fc", E_gemm, {8, 10, 1568}, F32, F32, .flags = TRANS_B | BIAS, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f32_nn_fc_dx", E_gemm, {8, 1568, 10}, F32, F32, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f32_tn_fc_dw", E_gemm, {10, 1568, 8}, F32, F32, .flags = TRANS_A, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f32_tt_alpha_beta_ld", E_gemm, {33, 17, 65, 3}, F32, F32, .flags = TRANS_A | TRANS_B, .f = {0.5f, 0.75f}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f32_nt_alpha_bias_ld", E_gemm, {31, 40, 50, 2}, F32, F32, .flags = TRANS_B | BIAS, .f = {-2, 1}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_bf16_nt_bias", E_gemm, {64, 256, 784}, BF16, BF16, .flags = TRANS_B | BIAS, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"gemm_bf16_tn_f32c_accum", E_gemm, {96, 64, 128}, BF16, F32, .flags = TRANS_A, .f = {1, 1}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_bf16_nn_ld", E_gemm, {40, 72, 56, 8}, BF16, BF16, .f = {0.25f, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"gemm_f16_nn", E_gemm, {64, 128, 96}, F16, F16, .f = {1, 0}, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    {"gemm_f16_tt_f32c_bias_ld", E_gemm, {48, 40, 72, 5}, F16, F32, .flags = TRANS_A | TRANS_B | BIAS, .f = {2, 0.5f}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f16_nt_beta", E_gemm, {32, 48, 64}, F16, F16, .flags = TRANS_B, .f = {1, -1}, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    /* Convolution: s = {n, c_in, h, w, c_out, kh, kw, stride_h, stride_w, pad_h, pad_w}. */
    {"conv2d_fwd_f32_l1_bias", E_conv2d_fwd, CONV_L1, F32, .flags = BIAS, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_fwd_f32_l2_bias", E_conv2d_fwd, CONV_L2, F32, .flags = BIAS, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_fwd_f32_odd", E_conv2d_fwd, CONV_ODD, F32, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    /* A half output's bias may be rounded to its dtype before the sum (core/backend.h, cuDNN):
     * half a bf16 ulp of |bias| < 1, up to 2^-9, where the sum cancels. */
    {"conv2d_fwd_bf16_l2_bias", E_conv2d_fwd, CONV_L2, BF16, .flags = BIAS, .tol = TOL(3e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"conv2d_fwd_f16_l1_bias", E_conv2d_fwd, CONV_L1, F16, .flags = BIAS, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    {"conv2d_bwd_data_f32_l2", E_conv2d_bwd_data, CONV_L2, F32, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_bwd_data_f32_odd", E_conv2d_bwd_data, CONV_ODD, F32, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_bwd_data_bf16_l2", E_conv2d_bwd_data, CONV_L2, BF16, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"conv2d_bwd_data_f16_l1", E_conv2d_bwd_data, CONV_L1, F16, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    {"conv2d_bwd_weight_f32_l1_dbias", E_conv2d_bwd_weight, CONV_L1, F32, .flags = BIAS, .tol = TOL(1e-3, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_bwd_weight_f32_l2_dbias", E_conv2d_bwd_weight, CONV_L2, F32, .flags = BIAS, .tol = TOL(1e-3, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_bwd_weight_f32_odd", E_conv2d_bwd_weight, CONV_ODD, F32, .tol = TOL(1e-3, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_bwd_weight_bf16_l2_dbias", E_conv2d_bwd_weight, CONV_L2, BF16, .flags = BIAS, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"conv2d_bwd_weight_f16_l1", E_conv2d_bwd_weight, CONV_L1, F16, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    /* Batch norm: s = {n, c, hw}, f = {eps, momentum}; the ConvNet's two layers, an odd shape. */
    {"bn_fwd_train_f32_l1", E_bn_fwd_train, {8, 16, 784}, F32, .f = {1e-5f, 0.1f}, .tol = TOL(1e-4, 1e-4), .lo = -2, .hi = 3},
    {"bn_fwd_train_f32_l2_bare", E_bn_fwd_train, {8, 32, 196}, F32, .flags = NO_AFFINE | NO_STATS, .f = {1e-5f, 0.1f}, .tol = TOL(1e-4, 1e-4), .lo = -2, .hi = 3},
    {"bn_fwd_train_bf16_l2", E_bn_fwd_train, {8, 32, 196}, BF16, .f = {1e-5f, 0.1f}, .tol = TOL(1e-3, ULP_BF16), .lo = -2, .hi = 3},
    {"bn_fwd_train_f16_odd", E_bn_fwd_train, {3, 5, 7}, F16, .f = {1e-3f, 0.3f}, .tol = TOL(1e-3, ULP_F16), .lo = -2, .hi = 3},
    {"bn_fwd_eval_f32_l1", E_bn_fwd_eval, {8, 16, 784}, F32, .f = {1e-5f}, .tol = TOL(1e-5, 1e-5), .lo = -2, .hi = 3},
    {"bn_fwd_eval_bf16_l2_bare", E_bn_fwd_eval, {8, 32, 196}, BF16, .flags = NO_AFFINE, .f = {1e-5f}, .tol = TOL(1e-3, ULP_BF16), .lo = -2, .hi = 3},
    {"bn_bwd_f32_l1", E_bn_bwd, {8, 16, 784}, F32, .f = {1e-5f}, .tol = TOL(1e-3, 1e-4), .lo = -2, .hi = 3},
    {"bn_bwd_f32_l2_bare", E_bn_bwd, {8, 32, 196}, F32, .flags = NO_AFFINE, .f = {1e-5f}, .tol = TOL(1e-3, 1e-4), .lo = -2, .hi = 3},
    {"bn_bwd_bf16_l2", E_bn_bwd, {8, 32, 196}, BF16, .f = {1e-5f}, .tol = TOL(1e-3, ULP_BF16), .lo = -2, .hi = 3},
    {"bn_bwd_f16_odd", E_bn_bwd, {3, 5, 7}, F16, .f = {1e-3f}, .tol = TOL(1e-3, ULP_F16), .lo = -2, .hi = 3},
    {"bn_fwd_train_relu_bf16_l2", E_bn_fwd_train, {8, 32, 196}, BF16, .flags = BN_RELU, .f = {1e-5f, 0.1f}, .tol = TOL(1e-3, ULP_BF16), .lo = -2, .hi = 3},
    {"bn_fwd_eval_relu_f32_l1", E_bn_fwd_eval, {8, 16, 784}, F32, .flags = BN_RELU, .f = {1e-5f}, .tol = TOL(1e-5, 1e-5), .lo = -2, .hi = 3},
    {"bn_bwd_relu_f32_l1", E_bn_bwd, {8, 16, 784}, F32, .flags = BN_RELU, .f = {1e-5f}, .tol = TOL(1e-3, 1e-4), .lo = -2, .hi = 3},
    {"bn_bwd_relu_bf16_l2", E_bn_bwd, {8, 32, 196}, BF16, .flags = BN_RELU, .f = {1e-5f}, .tol = TOL(1e-3, ULP_BF16), .lo = -2, .hi = 3},
    {"bn_bwd_relu_f16_odd", E_bn_bwd, {3, 5, 7}, F16, .flags = BN_RELU, .f = {1e-3f}, .tol = TOL(1e-3, ULP_F16), .lo = -2, .hi = 3},
    /* Max pooling: s = {n, c, h, w, k, stride, pad}; the ConvNet's 2 x 2, overlapping 3 x 3. */
    {"maxpool_fwd_f32_l1", E_maxpool_fwd, {8, 16, 28, 28, 2, 2, 0}, F32, .tol = EXACT, .lo = -4, .hi = 4},
    {"maxpool_fwd_bf16_l2", E_maxpool_fwd, {8, 32, 14, 14, 2, 2, 0}, BF16, .tol = EXACT, .lo = -4, .hi = 4},
    {"maxpool_fwd_f16_l1", E_maxpool_fwd, {8, 16, 28, 28, 2, 2, 0}, F16, .tol = EXACT, .lo = -4, .hi = 4},
    {"maxpool_fwd_f32_k3s2p1_specials", E_maxpool_fwd, {2, 3, 15, 15, 3, 2, 1}, F32, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"maxpool_fwd_bf16_k3s2p1_specials", E_maxpool_fwd, {2, 3, 15, 15, 3, 2, 1}, BF16, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"maxpool_bwd_f32_l1", E_maxpool_bwd, {8, 16, 28, 28, 2, 2, 0}, F32, .tol = EXACT, .lo = -4, .hi = 4},
    {"maxpool_bwd_bf16_l2", E_maxpool_bwd, {8, 32, 14, 14, 2, 2, 0}, BF16, .tol = EXACT, .lo = -4, .hi = 4},
    {"maxpool_bwd_f32_k3s2p1", E_maxpool_bwd, {2, 3, 15, 15, 3, 2, 1}, F32, .tol = TOL(1e-6, 1e-6), .lo = -4, .hi = 4},
    {"maxpool_bwd_f16_k3s2p1", E_maxpool_bwd, {2, 3, 15, 15, 3, 2, 1}, F16, .tol = TOL(1e-6, ULP_F16), .lo = -4, .hi = 4},
    {"maxpool_bwd_bf16_k3s2p1_specials", E_maxpool_bwd, {2, 3, 15, 15, 3, 2, 1}, BF16, .tol = TOL(1e-6, ULP_BF16), .lo = -4, .hi = 4, .specials = true},
    /* Unary: ReLU and copy select bits; scale is one rounding. */
    {"unary_relu_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_RELU, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unary_relu_f16", E_unary, {10007}, F16, .op = AMP_UNARY_RELU, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unary_relu_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_RELU, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unary_scale_f32", E_unary, {10007}, F32, .op = AMP_UNARY_SCALE, .f = {-0.37f}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"unary_scale_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_SCALE, .f = {1.0f / 65536}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"unary_add_scalar_f32", E_unary, {10007}, F32, .op = AMP_UNARY_ADD_SCALAR, .f = {-0.37f}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"unary_add_scalar_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_ADD_SCALAR, .f = {3.0f}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"unary_div_scalar_f32", E_unary, {10007}, F32, .op = AMP_UNARY_DIV_SCALAR, .f = {3.0f}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"unary_div_scalar_f16", E_unary, {10007}, F16, .op = AMP_UNARY_DIV_SCALAR, .f = {-7.0f}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"unary_copy_f32", E_unary, {10007}, F32, .op = AMP_UNARY_COPY, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unary_copy_f16", E_unary, {10007}, F16, .op = AMP_UNARY_COPY, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    /* kernels/math/transcendental.h on both backends: the same value (a NaN made by an operation
     * may differ in payload); ranges that reach overflow, underflow and negative logarithms. */
    {"unary_exp_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_EXP, .tol = TOL(0, 0), .lo = -90, .hi = 90, .specials = true},
    {"unary_exp_f16", E_unary, {10007}, F16, .op = AMP_UNARY_EXP, .tol = TOL(0, 0), .lo = -90, .hi = 90, .specials = true},
    {"unary_exp_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_EXP, .tol = TOL(0, 0), .lo = -90, .hi = 90, .specials = true},
    {"unary_log_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_LOG, .tol = TOL(0, 0), .lo = -1, .hi = 10000.0, .specials = true},
    {"unary_log_f16", E_unary, {10007}, F16, .op = AMP_UNARY_LOG, .tol = TOL(0, 0), .lo = -1, .hi = 10000.0, .specials = true},
    {"unary_log_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_LOG, .tol = TOL(0, 0), .lo = -1, .hi = 10000.0, .specials = true},
    {"unary_tanh_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_TANH, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_tanh_f16", E_unary, {10007}, F16, .op = AMP_UNARY_TANH, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_tanh_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_TANH, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_sigmoid_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_SIGMOID, .tol = TOL(0, 0), .lo = -110, .hi = 110, .specials = true},
    {"unary_sigmoid_f16", E_unary, {10007}, F16, .op = AMP_UNARY_SIGMOID, .tol = TOL(0, 0), .lo = -110, .hi = 110, .specials = true},
    {"unary_sigmoid_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_SIGMOID, .tol = TOL(0, 0), .lo = -110, .hi = 110, .specials = true},
    {"unary_silu_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_SILU, .tol = TOL(0, 0), .lo = -160, .hi = 40, .specials = true},
    {"unary_silu_f16", E_unary, {10007}, F16, .op = AMP_UNARY_SILU, .tol = TOL(0, 0), .lo = -160, .hi = 40, .specials = true},
    {"unary_silu_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_SILU, .tol = TOL(0, 0), .lo = -160, .hi = 40, .specials = true},
    /* Binary: add/sub/mul are one rounding each; relu_bwd selects. */
    {"binary_add_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_ADD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_add_f16", E_binary, {10007}, F16, .op = AMP_BINARY_ADD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_add_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_ADD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_sub_f32", E_binary, {10007}, F32, .op = AMP_BINARY_SUB, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_sub_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_SUB, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_mul_f32", E_binary, {10007}, F32, .op = AMP_BINARY_MUL, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_mul_f16", E_binary, {10007}, F16, .op = AMP_BINARY_MUL, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_relu_bwd_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_RELU_BWD, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"binary_relu_bwd_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_RELU_BWD, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"unary_gelu_tanh_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_GELU_TANH, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_gelu_tanh_f16", E_unary, {10007}, F16, .op = AMP_UNARY_GELU_TANH, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_gelu_tanh_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_GELU_TANH, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_gelu_erf_f32", E_unary, {ACT_L1}, F32, .op = AMP_UNARY_GELU_ERF, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_gelu_erf_f16", E_unary, {10007}, F16, .op = AMP_UNARY_GELU_ERF, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"unary_gelu_erf_bf16", E_unary, {10007}, BF16, .op = AMP_UNARY_GELU_ERF, .tol = TOL(0, 0), .lo = -12, .hi = 12, .specials = true},
    {"binary_gelu_tanh_bwd_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_GELU_TANH_BWD, .tol = TOL(0, 0), .lo = -6, .hi = 6, .specials = true},
    {"binary_gelu_tanh_bwd_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_GELU_TANH_BWD, .tol = TOL(0, 0), .lo = -6, .hi = 6, .specials = true},
    {"binary_gelu_erf_bwd_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_GELU_ERF_BWD, .tol = TOL(0, 0), .lo = -6, .hi = 6, .specials = true},
    {"binary_gelu_erf_bwd_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_GELU_ERF_BWD, .tol = TOL(0, 0), .lo = -6, .hi = 6, .specials = true},
    {"binary_div_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_DIV, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_div_f16", E_binary, {10007}, F16, .op = AMP_BINARY_DIV, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_div_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_DIV, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_tanh_bwd_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_TANH_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_tanh_bwd_f16", E_binary, {10007}, F16, .op = AMP_BINARY_TANH_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_tanh_bwd_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_TANH_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_sigmoid_bwd_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_SIGMOID_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_sigmoid_bwd_f16", E_binary, {10007}, F16, .op = AMP_BINARY_SIGMOID_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_sigmoid_bwd_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_SIGMOID_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_silu_bwd_f32", E_binary, {ACT_L1}, F32, .op = AMP_BINARY_SILU_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_silu_bwd_f16", E_binary, {10007}, F16, .op = AMP_BINARY_SILU_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"binary_silu_bwd_bf16", E_binary, {10007}, BF16, .op = AMP_BINARY_SILU_BWD, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    /* axpy: y + alpha * x may be fused into one fma on a device, so one rounding apart. */
    {"axpy_f32", E_axpy, {ACT_L1}, F32, .f = {0.5f}, .tol = TOL(1e-6, 1e-6), .lo = -2, .hi = 2, .specials = true},
    {"axpy_bf16", E_axpy, {10007}, BF16, .f = {-2.0f}, .tol = TOL(1e-6, ULP_BF16), .lo = -2, .hi = 2},
    {"axpy_f16", E_axpy, {10007}, F16, .f = {1.0f}, .tol = TOL(1e-6, ULP_F16), .lo = -2, .hi = 2},
    /* Reductions to f32. */
    {"sum_f32_mean", E_sum, {ACT_L1}, F32, .f = {1.0f / ACT_L1}, .tol = TOL(1e-6, 1e-5), .lo = -0.5f, .hi = 1},
    {"sum_bf16", E_sum, {10007}, BF16, .f = {1}, .tol = TOL(1e-3, 1e-5), .lo = -0.5f, .hi = 1},
    {"sum_f16_half", E_sum, {10007}, F16, .f = {0.5f}, .tol = TOL(1e-3, 1e-5), .lo = -0.5f, .hi = 1},
    {"sum_f32_specials", E_sum, {4099}, F32, .f = {1}, .tol = TOL(1e-3, 1e-5), .lo = -1, .hi = 1, .specials = true},
    {"sum_rows_f32_fc_in", E_sum_rows, {64, 1568}, F32, .tol = TOL(1e-5, 1e-5), .lo = -1, .hi = 1},
    {"sum_rows_f32_fc_out", E_sum_rows, {8, 10}, F32, .tol = TOL(1e-5, 1e-5), .lo = -1, .hi = 1},
    {"sum_rows_bf16", E_sum_rows, {256, 300}, BF16, .tol = TOL(1e-5, 1e-5), .lo = -1, .hi = 1},
    {"sum_rows_f16_odd", E_sum_rows, {33, 257}, F16, .tol = TOL(1e-5, 1e-5), .lo = -1, .hi = 1},
    /* Losses: s = {rows, classes} or {n}; f = {dloss} (65536: a loss scale). */
    {"mse_fwd_f32", E_mse_fwd, {ACT_L1}, F32, .tol = TOL(1e-6, 1e-5), .lo = -1, .hi = 1},
    {"mse_fwd_bf16", E_mse_fwd, {10007}, BF16, .tol = TOL(1e-6, 1e-5), .lo = -1, .hi = 1},
    {"mse_bwd_f32", E_mse_bwd, {10007}, F32, .f = {1}, .tol = TOL(1e-9, 1e-6), .lo = -1, .hi = 1},
    {"mse_bwd_bf16_scaled", E_mse_bwd, {10007}, BF16, .f = {65536}, .tol = TOL(1e-6, ULP_BF16), .lo = -1, .hi = 1},
    {"mse_bwd_f16", E_mse_bwd, {10007}, F16, .f = {1}, .tol = TOL(1e-7, ULP_F16), .lo = -1, .hi = 1},
    /* Dropout: s = {n, seed, offset}, f = {p}; masks bit exact, values one rounding. */
    {"dropout_fwd_f32", E_dropout_fwd, {ACT_L1, 42, 0}, F32, .f = {0.5f}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"dropout_fwd_bf16_offset", E_dropout_fwd, {10007, 7, 12345}, BF16, .f = {0.1f}, .tol = TOL(0, 0), .lo = -4, .hi = 4},
    {"dropout_fwd_f16_p0", E_dropout_fwd, {10007, 3, 5}, F16, .f = {0}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"dropout_fwd_f32_p09", E_dropout_fwd, {10007, 1ll << 40, 3}, F32, .f = {0.9f}, .tol = TOL(0, 0), .lo = -4, .hi = 4},
    {"dropout_bwd_f32", E_dropout_bwd, {ACT_L1}, F32, .f = {0.5f}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"dropout_bwd_bf16", E_dropout_bwd, {10007}, BF16, .f = {0.2f}, .tol = TOL(0, 0), .lo = -4, .hi = 4},
    {"dropout_bwd_f16", E_dropout_bwd, {10007}, F16, .f = {0.1f}, .tol = TOL(0, 0), .lo = -4, .hi = 4},
};

/* ---- Running a row -------------------------------------------------------------------------- */

typedef enum outcome { PASSED, FAILED, NOT_IMPLEMENTED } outcome;

/* The row tables, run in this order; a row's inputs are seeded by its place in the sequence. */
typedef struct row_table {
    const op_row *rows;
    int64_t n;
} row_table;

static const row_table tables[] = {
    {rows, N_OF(rows)},
    {gemm_rows, N_OF(gemm_rows)},
    {optim_rows, N_OF(optim_rows)},
    {multi_rows, N_OF(multi_rows)},
    {scaler_rows, N_OF(scaler_rows)},
    {syncbn_rows, N_OF(syncbn_rows)},
    {transformer_rows, N_OF(transformer_rows)},
};

static bool implements(const amp_backend *be, const op_row *r) {
    const entry_info *e = &entries[r->e];
    void (*fn)(void);
    memcpy(&fn, (const char *)be + e->offset, sizeof fn);
    return fn != NULL; /* every kernel of both backends takes f32, f16 and bf16 */
}

static outcome run_row(const op_row *r, int index, const amp_backend *ref,
                       const amp_backend *dev, bool self, uint64_t seed) {
    if (!implements(dev, r)) {
#ifdef AMP_CUDACPU
        /* The CUDA backend runs on every machine here and fills every entry. */
        printf("FAIL %-38s not implemented on %s (in the cudacpu build every row must run)\n",
               r->name, dev->name);
        return FAILED;
#else
        printf("-    %-38s not implemented on %s\n", r->name, dev->name);
        return NOT_IMPLEMENTED;
#endif
    }
    if (!implements(ref, r)) {
        printf("FAIL %-38s the reference backend %s lacks it\n", r->name, ref->name);
        return FAILED;
    }
    const entry_info *e = &entries[r->e];
    const amp_backend *const be[2] = {ref, dev};
    tcase c = {.rng = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(index + 1)};
    cmp_stats st = {0, 0};
    e->setup(r, &c);
    bool ok = tcase_execute(&c, r, r->name, e->member, e->run, ref, 0) &&
              tcase_execute(&c, r, r->name, e->member, e->run, dev, 1) &&
              tcase_check(&c, r->name, self ? (tol)EXACT : r->tol, be, &st);
    if (ok && (self || r->tol.exact))
        printf("ok   %-38s bit-exact\n", r->name);
    else if (ok)
        printf("ok   %-38s max abs err %.3g, max rel err %.3g\n", r->name, st.max_abs, st.max_rel);
    if (!ok) printf("FAIL %s\n", r->name);
    tcase_free(&c);
    return ok ? PASSED : FAILED;
}

/* Every row on one backend against the reference; returns the number of failed rows. */
static int run_table(const amp_backend *ref, const amp_backend *dev, bool self, uint64_t seed,
                     const char *filter, int *n_passed) {
    int count[3] = {0, 0, 0}, index = 0;
    printf("test_backend_ops: %s against %s%s, seed %" PRIu64 "\n", dev->name, ref->name,
           self ? " (harness self-check, bit for bit)" : "", seed);
    for (int64_t t = 0; t < N_OF(tables); t++)
        for (int64_t i = 0; i < tables[t].n; i++, index++) {
            const op_row *r = &tables[t].rows[i];
            if (filter && !strstr(r->name, filter)) continue;
            count[run_row(r, index, ref, dev, self, seed)]++;
        }
    printf("test_backend_ops: %s: %d rows passed, %d failed, %d not implemented on %s\n",
           dev->name, count[PASSED], count[FAILED], count[NOT_IMPLEMENTED], dev->name);
    *n_passed += count[PASSED];
    return count[FAILED];
}

/* An entry without a row is not done (STYLE.md rule 6): count the entries of entries[] that have
 * no row, and those of the backend table (core/backend_entries.c) that are neither in entries[]
 * nor memory or streams. */
static int entries_without_rows(void) {
    int missing = 0;
    for (int e = 0; e < E_N; e++) {
        bool seen = false;
        for (int64_t t = 0; t < N_OF(tables); t++)
            for (int64_t i = 0; i < tables[t].n; i++) seen |= tables[t].rows[i].e == (entry)e;
        if (!seen || !entries[e].run) {
            const char *member = entries[e].member ? entries[e].member : "?";
            printf("FAIL entry %d (%s) has no row\n", e, member);
            missing++;
        }
    }
    for (int i = 0; i < amp_backend_n_entries(); i++) {
        const char *name = amp_backend_entry_name(i);
        bool known = false;
        for (int e = 0; e < E_N && !known; e++)
            known = entries[e].member && !strcmp(entries[e].member, name);
        for (int64_t k = 0; k < N_OF(not_op_entries) && !known; k++)
            known = !strcmp(not_op_entries[k], name);
        if (!known) {
            printf("FAIL backend entry %s has no row (add it to entries[] and rows)\n", name);
            missing++;
        }
    }
    return missing;
}

/* The device backends, each NULL (with amp_last_error saying why) when absent. */
static const amp_backend *(*const device_backends[])(void) = {amp_backend_cuda};

int main(int argc, char **argv) {
    bool self = false;
    uint64_t seed = 20240611;
    const char *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--self")) self = true;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--row") && i + 1 < argc) filter = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--self] [--seed N] [--row SUBSTRING]\n", argv[0]);
            return 2;
        }
    }
    if (entries_without_rows()) return 1;
    const amp_backend *cpu = amp_backend_cpu();
    int failed = 0, passed = 0, n_devices = 0;
    if (self) return run_table(cpu, cpu, true, seed, filter, &passed) ? 1 : 0;
    char why[512] = "";
    for (size_t i = 0; i < sizeof device_backends / sizeof device_backends[0]; i++) {
        const amp_backend *dev = device_backends[i]();
        if (!dev) {
            snprintf(why, sizeof why, "%s", amp_last_error());
            continue;
        }
        n_devices++;
        failed += run_table(cpu, dev, false, seed, filter, &passed);
    }
    if (n_devices == 0) {
        printf("test_backend_ops: SKIPPED: no device backend: %s\n", why);
        return 77;
    }
    if (failed) return 1;
    if (passed == 0) {
        printf("test_backend_ops: SKIPPED: no row is implemented on any device backend\n");
        return 77;
    }
    return 0;
}
