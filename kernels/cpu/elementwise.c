/* CPU backend: unary, binary and axpy elementwise ops (the transcendental ones through
 * kernels/math/transcendental.h, which the CUDA backend shares: the same bits on both).
 *
 * Outputs are overwritten (axpy updates y in place by contract). Every op computes in f32: f32
 * tensors are read and written in place; f16/bf16 tensors are processed in tiles widened into f32
 * stack buffers by the backend's own cast and narrowed back with round to nearest even, so the
 * inner loops see plain float arrays and vectorise for every dtype. x and y may be the same
 * array (in-place ops); other overlaps are not supported. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/math/binary.h"
#include "kernels/math/relu.h"
#include "kernels/math/transcendental.h"

/* Elements per tile: three f32 tiles (a, b, y) take 12 KiB, which stays in L1 with the data. */
#define EW_TILE 1024

/* sigmoid(z) from e = e^-|z|: (z < 0 ? e : 1) / (1 + e), amp_sigmoidf's two formulas as one
 * division with a select on its numerator (the same bits; no branch, so it vectorises). */
AMP_CPU_CLONE_INLINE float sigmoid_from(float z, float e) {
    return (z < 0.0f ? e : 1.0f) / (1.0f + e);
}

/* y = sigmoid(x) (gelu false) or x sigmoid(2u), GELU tanh's amp_gelu_tanh (gelu true), the
 * scalar functions' bits in vector loops over the tile: the arguments, their exps
 * (vector_exp.h), the results. */
AMP_CPU_CLONE_INLINE void sigmoid_tile(bool gelu, int64_t n, const float *x, float *y) {
    float z[EW_TILE], e[EW_TILE];
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        float inner = amp_gelu_tanh_arg(x[i]);
        z[i] = gelu ? inner + inner : x[i];
        e[i] = -fabsf(z[i]);
        nan |= z[i] != z[i];
    }
    if (nan) { /* the scalar functions, NaN and all */
        for (int64_t i = 0; i < n; i++) y[i] = gelu ? amp_gelu_tanh(x[i]) : amp_sigmoidf(x[i]);
        return;
    }
    amp_cpu_exp_shifted(e, n, 0.0f, e);
    for (int64_t i = 0; i < n; i++) {
        float s = sigmoid_from(z[i], e[i]);
        y[i] = gelu ? amp_mul_rn(x[i], s) : s;
    }
}

/* The list's element in a plain loop (core/pointwise_ops.def), but for the ops with a tile of
 * their own: a copy, and sigmoid and GELU (tanh), whose exps run as one vector pass. */
AMP_CPU_CLONE_INLINE void unary_tile(amp_unary_op op, int64_t n, const float *xs, float alpha,
                                     float *y) {
    if (op == AMP_UNARY_COPY) {
        memmove(y, xs, (size_t)n * sizeof *y);
        return;
    }
    if (op == AMP_UNARY_SIGMOID || op == AMP_UNARY_GELU_TANH) {
        sigmoid_tile(op == AMP_UNARY_GELU_TANH, n, xs, y);
        return;
    }
    switch (op) {
#define AMP_UNARY_OP(name, element)                                                                \
    case AMP_UNARY_##name:                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float x = xs[i];                                                                       \
            y[i] = element;                                                                        \
        }                                                                                          \
        break;
#include "core/pointwise_ops.def"
    }
}

/* dx = amp_gelu_tanh_bwd(x, dy), its bits in vector loops: the tanh argument u, e^(2|u|) for
 * amp_tanhf's middle range (2|u| is exact, clamped to 2 * 9.01 where tanh is 1 anyway), both of
 * amp_tanhf's formulas for every element, then its three ranges as selects between the stored
 * values and the derivative. A formula written inside a select is computed in its branch only,
 * where it might raise a floating-point exception that the plain loop does not: GCC's AVX2
 * clone then kept the loop scalar (only AVX-512's masked operations if-convert it), so each
 * formula is computed whole, in a loop of its own. A tile with a NaN takes the scalar
 * function. */
AMP_CPU_CLONE_INLINE void gelu_tanh_bwd_tile(int64_t n, const float *x, const float *dy, float *y) {
    float u[EW_TILE], e[EW_TILE], poly[EW_TILE];
    const float e_arg_max = 9.01f + 9.01f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        u[i] = amp_gelu_tanh_arg(x[i]);
        float z2 = fabsf(u[i]) + fabsf(u[i]);
        e[i] = z2 < e_arg_max ? z2 : e_arg_max;
        nan |= u[i] != u[i];
    }
    if (nan) {
        for (int64_t i = 0; i < n; i++) y[i] = amp_gelu_tanh_bwd(x[i], dy[i]);
        return;
    }
    amp_cpu_exp_shifted(e, n, 0.0f, e);
    for (int64_t i = 0; i < n; i++) {
        e[i] = amp_tanh_from_exp2z(e[i]);
        poly[i] = amp_tanh_poly(fabsf(u[i]));
    }
    for (int64_t i = 0; i < n; i++) {
        float z = fabsf(u[i]);
        float t = z > 9.01f ? 1.0f : z >= 0.625f ? e[i] : poly[i];
        t = u[i] < 0.0f ? -t : t; /* tanh(-0) = -0 becomes +0 here: 1 + t and t^2 are the same */
        y[i] = amp_gelu_tanh_bwd_from(x[i], dy[i], t);
    }
}

/* The list's element in a plain loop, but for GELU (tanh) backward's tile. */
AMP_CPU_CLONE_INLINE void binary_tile(amp_binary_op op, int64_t n, const float *as, const float *bs,
                                      float *y) {
    if (op == AMP_BINARY_GELU_TANH_BWD) {
        gelu_tanh_bwd_tile(n, as, bs, y);
        return;
    }
    switch (op) {
#define AMP_BINARY_OP(name, element)                                                               \
    case AMP_BINARY_##name:                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float a = as[i], b = bs[i];                                                            \
            y[i] = element;                                                                        \
        }                                                                                          \
        break;
#include "core/pointwise_ops.def"
    }
}

/* The loop one call runs on every tile. */
typedef struct ew_op {
    enum { EW_UNARY, EW_BINARY, EW_AXPY } kind;
    int op; /* amp_unary_op or amp_binary_op */
    float alpha;
} ew_op;

/* y = f(a) (unary), f(a, b) (binary), or b + alpha * a (axpy: a is x, b is y's old value). */
AMP_CPU_CLONED(static, void, ew_tile, (const ew_op *f, int64_t n, const float *a, const float *b,
               float *y),
               (f, n, a, b, y)) {
    switch (f->kind) {
    case EW_UNARY:
        unary_tile((amp_unary_op)f->op, n, a, f->alpha, y);
        break;
    case EW_BINARY:
        binary_tile((amp_binary_op)f->op, n, a, b, y);
        break;
    case EW_AXPY:
        for (int64_t i = 0; i < n; i++) y[i] = amp_axpy(b[i], f->alpha, a[i]);
        break;
    }
}

/* Runs f over [0, n) (n > 0) in tiles of EW_TILE; b is NULL for a unary op. y may be a or b
 * itself: each tile is read before its results are stored. */
static void ew_run(const ew_op *f, amp_dtype dt, int64_t n, const void *a, const void *b, void *y) {
    int64_t n_tiles = (n + EW_TILE - 1) / EW_TILE;
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < n_tiles; t++) {
        float ba[EW_TILE], bb[EW_TILE], by[EW_TILE];
        int64_t i0 = t * EW_TILE, len = n - i0 < EW_TILE ? n - i0 : EW_TILE;
        const float *at = tile_in(a, dt, i0, len, ba);
        const float *bt = b ? tile_in(b, dt, i0, len, bb) : NULL;
        float *yt = tile_out(y, dt, i0, by);
        ew_tile(f, len, at, bt, yt);
        tile_out_store(y, dt, i0, len, yt);
    }
}

/* ReLU and its backward on f16/bf16 storage work on the bits (kernels/math/relu.h: the bits of
 * widening, the f32 function and rounding), with no widening and narrowing tiles, which cost
 * a ReLU a pass each way (bench/RESULTS.md, "Figures behind decisions in the code", elementwise.c). */
AMP_CPU_CLONED(static, void, relu_half_range, (int64_t n, const uint16_t *x, uint16_t *y,
               uint16_t inf_bits),
               (n, x, y, inf_bits)) {
    for (int64_t i = 0; i < n; i++) y[i] = amp_relu_half_bits(x[i], inf_bits);
}

AMP_CPU_CLONED(static, void, relu_bwd_half_range, (int64_t n, const uint16_t *yv,
               const uint16_t *dy, uint16_t *dx, uint16_t inf_bits),
               (n, yv, dy, dx, inf_bits)) {
    for (int64_t i = 0; i < n; i++) dx[i] = amp_relu_bwd_half_bits(yv[i], dy[i], inf_bits);
}

/* The bits paths over [0, n) in tiles of EW_TILE; b is NULL for the forward. */
static void relu_half_run(amp_dtype dt, int64_t n, const void *a, const void *b, void *y) {
    uint16_t inf_bits = dt == AMP_F16 ? 0x7c00 : 0x7f80;
    int64_t n_tiles = (n + EW_TILE - 1) / EW_TILE;
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t i0 = t * EW_TILE, len = n - i0 < EW_TILE ? n - i0 : EW_TILE;
        if (b)
            relu_bwd_half_range(len, (const uint16_t *)a + i0, (const uint16_t *)b + i0,
                                (uint16_t *)y + i0, inf_bits);
        else
            relu_half_range(len, (const uint16_t *)a + i0, (uint16_t *)y + i0, inf_bits);
    }
}

amp_status amp_cpu_unary(amp_device_ctx *dev, amp_unary_op op, amp_dtype dt, int64_t n,
                         const void *x, float alpha, void *y) {
    if ((int)op < 0 || (int)op > (int)AMP_UNARY_LAST)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_cpu_unary: unknown op %d", (int)op);
    if (op == AMP_UNARY_COPY) {
        /* A copy keeps every bit (NaN payloads too), in any dtype, as torch.Tensor.copy_. */
        if (dt != AMP_I32) AMP_TRY(amp_backend_check_float(__func__, dt));
        AMP_TRY(amp_backend_check_n(__func__, n));
        return amp_cpu_copy(y, x, (size_t)n * amp_dtype_size(dt));
    }
    AMP_TRY(amp_backend_check_float(__func__, dt));
    AMP_TRY(amp_backend_check_n(__func__, n));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    if (op == AMP_UNARY_RELU && dt != AMP_F32) {
        relu_half_run(dt, n, x, NULL, y);
        return AMP_OK;
    }
    ew_run(&(ew_op){EW_UNARY, (int)op, alpha}, dt, n, x, NULL, y);
    return AMP_OK;
}

amp_status amp_cpu_binary(amp_device_ctx *dev, amp_binary_op op, amp_dtype dt, int64_t n,
                          const void *a, const void *b, void *y) {
    if ((int)op < 0 || (int)op > (int)AMP_BINARY_LAST)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_cpu_binary: unknown op %d", (int)op);
    AMP_TRY(amp_backend_check_float(__func__, dt));
    AMP_TRY(amp_backend_check_n(__func__, n));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(a);
    AMP_CHECK_ARG(b);
    AMP_CHECK_ARG(y);
    if (op == AMP_BINARY_RELU_BWD && dt != AMP_F32) {
        relu_half_run(dt, n, a, b, y);
        return AMP_OK;
    }
    ew_run(&(ew_op){EW_BINARY, (int)op, 0.0f}, dt, n, a, b, y);
    return AMP_OK;
}

amp_status amp_cpu_axpy(amp_device_ctx *dev, amp_dtype dt, int64_t n, float alpha, const void *x,
                        void *y) {
    AMP_TRY(amp_backend_check_float(__func__, dt));
    AMP_TRY(amp_backend_check_n(__func__, n));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    ew_run(&(ew_op){EW_AXPY, 0, alpha}, dt, n, x, y, y);
    return AMP_OK;
}
