/* CPU GEMM backends side by side: libamp's oneDNN GEMM (amp_cpu_gemm) against OpenBLAS
 * cblas_sgemm, f32, on the GEMMs of the MNIST MLP 784-2048-2048-10 and of the ConvNet's fc layer
 * at batch 128, and of one block of amp-bench's default GPT (2048 tokens, 256 wide: c_attn,
 * attn.c_proj, mlp.c_fc, mlp.c_proj), each as y = x W^T, dX = dY W and dW = dY^T X (nn.Linear).
 * A bf16 column shows oneDNN's bf16 GEMM (Debian's OpenBLAS 0.3.21 declares cblas_sbgemm but is
 * built without it). A second table times the ConvNet's convolutions in oneDNN's plain NCHW
 * layout, in its blocked layout with reorders to and from NCHW, and through amp_cpu_conv2d_*.
 * Results: bench/RESULTS.md.
 *
 * Built by CMake as build/bench/gemm_backends when OpenBLAS is found; by hand:
 *   gcc -O2 -std=gnu11 -fopenmp -I. -Iinclude bench/gemm_backends.c build-DIR/libamp.a \
 *       -ldnnl -lopenblas -lm -lpthread -o /tmp/gemm_backends
 *   /tmp/gemm_backends [threads]       (default 2)
 * Each figure is the best of ROUNDS rounds of about ROUND_S seconds: the best round is the one
 * least disturbed by other work on the machine. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"

#define ROUNDS 9
#define ROUND_S 0.05

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef void (*bench_fn)(void *arg);

/* Best seconds per call of fn over ROUNDS rounds. */
static double best_time(bench_fn fn, void *arg) {
    fn(arg);
    double t0 = now_s();
    fn(arg);
    double one = now_s() - t0;
    int reps = one > 0 ? (int)(ROUND_S / one) + 1 : 1000;
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        t0 = now_s();
        for (int i = 0; i < reps; i++) fn(arg);
        double t = (now_s() - t0) / reps;
        if (t < best) best = t;
    }
    return best;
}

static void fill(float *p, int64_t n) {
    uint32_t s = 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
    }
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

typedef struct gemm_shape {
    const char *name;
    int m, n, k;
    bool ta, tb;
} gemm_shape;

typedef struct gemm_arg {
    const gemm_shape *s;
    const void *a, *b;
    float *c;
    amp_dtype dt;
} gemm_arg;

static void run_amp(void *p) {
    gemm_arg *g = p;
    const gemm_shape *s = g->s;
    amp_gemm_desc d = {.trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k,
                       .alpha = 1, .a = g->a, .a_dtype = g->dt, .lda = s->ta ? s->m : s->k,
                       .b = g->b, .b_dtype = g->dt, .ldb = s->tb ? s->k : s->n, .c = g->c,
                       .c_dtype = AMP_F32, .ldc = s->n};
    if (amp_cpu_gemm(amp_cpu_device(), &d) != AMP_OK) {
        fprintf(stderr, "amp_cpu_gemm failed: %s\n", amp_last_error());
        exit(1);
    }
}

static void run_openblas(void *p) {
    gemm_arg *g = p;
    const gemm_shape *s = g->s;
    enum CBLAS_TRANSPOSE ta = s->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = s->tb ? CblasTrans : CblasNoTrans;
    cblas_sgemm(CblasRowMajor, ta, tb, s->m, s->n, s->k, 1.0f, g->a, s->ta ? s->m : s->k,
                    g->b, s->tb ? s->k : s->n, 0.0f, g->c, s->n);
}

static void bench_gemm(void) {
    static const gemm_shape shapes[] = {
        {"MLP fc1 fwd   x W^T", 128, 2048, 784, false, true},
        {"MLP fc1 dX    dY W (unused)", 128, 784, 2048, false, false},
        {"MLP fc1 dW    dY^T X", 2048, 784, 128, true, false},
        {"MLP fc2 fwd", 128, 2048, 2048, false, true},
        {"MLP fc2 dX", 128, 2048, 2048, false, false},
        {"MLP fc2 dW", 2048, 2048, 128, true, false},
        {"MLP fc3 fwd", 128, 10, 2048, false, true},
        {"MLP fc3 dX", 128, 2048, 10, false, false},
        {"MLP fc3 dW", 10, 2048, 128, true, false},
        {"ConvNet fc fwd", 128, 10, 1568, false, true},
        {"ConvNet fc dX", 128, 1568, 10, false, false},
        {"ConvNet fc dW", 10, 1568, 128, true, false},
        {"GPT c_attn fwd", 2048, 768, 256, false, true},
        {"GPT c_attn dX", 2048, 256, 768, false, false},
        {"GPT c_attn dW", 768, 256, 2048, true, false},
        {"GPT attn.c_proj fwd", 2048, 256, 256, false, true},
        {"GPT attn.c_proj dX", 2048, 256, 256, false, false},
        {"GPT attn.c_proj dW", 256, 256, 2048, true, false},
        {"GPT c_fc fwd", 2048, 1024, 256, false, true},
        {"GPT c_fc dX", 2048, 256, 1024, false, false},
        {"GPT c_fc dW", 1024, 256, 2048, true, false},
        {"GPT mlp.c_proj fwd", 2048, 256, 1024, false, true},
        {"GPT mlp.c_proj dX", 2048, 1024, 256, false, false},
        {"GPT mlp.c_proj dW", 256, 1024, 2048, true, false},
    };
    printf("| GEMM | m x n x k | oneDNN f32 | OpenBLAS f32 | oneDNN time / OpenBLAS time "
           "| oneDNN bf16 |\n|---|---|---|---|---|---|\n");
    double tot_dnnl = 0, tot_blas = 0, tot_bf16 = 0, gpt_dnnl = 0, gpt_blas = 0, gpt_bf16 = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const gemm_shape *s = &shapes[i];
        int64_t na = (int64_t)s->m * s->k, nb = (int64_t)s->k * s->n;
        float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4);
        float *c = malloc((size_t)s->m * s->n * 4);
        uint16_t *a16 = malloc((size_t)na * 2), *b16 = malloc((size_t)nb * 2);
        fill(a, na);
        fill(b, nb);
        for (int64_t j = 0; j < na; j++) a16[j] = amp_f32_to_bf16_bits(a[j]);
        for (int64_t j = 0; j < nb; j++) b16[j] = amp_f32_to_bf16_bits(b[j]);
        gemm_arg f32 = {s, a, b, c, AMP_F32}, bf16 = {s, a16, b16, c, AMP_BF16};
        double t_dnnl = best_time(run_amp, &f32), t_blas = best_time(run_openblas, &f32);
        double t_bf16 = best_time(run_amp, &bf16);
        double flop = 2.0 * s->m * s->n * s->k;
        printf("| %s | %dx%dx%d | %.1f | %.1f | %.2f | %.1f |\n", s->name, s->m, s->n, s->k,
               flop / t_dnnl * 1e-9, flop / t_blas * 1e-9, t_dnnl / t_blas, flop / t_bf16 * 1e-9);
        if (strstr(s->name, "unused") == NULL && strncmp(s->name, "MLP", 3) == 0) {
            tot_dnnl += t_dnnl, tot_blas += t_blas, tot_bf16 += t_bf16;
        }
        if (strncmp(s->name, "GPT", 3) == 0)
            gpt_dnnl += t_dnnl, gpt_blas += t_blas, gpt_bf16 += t_bf16;
        free(a), free(b), free(c), free(a16), free(b16);
    }
    printf("\nMLP training step, the 8 GEMMs it runs: oneDNN f32 %.2f ms, OpenBLAS f32 %.2f ms, "
           "oneDNN bf16 %.2f ms\n\n",
           tot_dnnl * 1e3, tot_blas * 1e3, tot_bf16 * 1e3);
    printf("GPT block, its 12 GEMMs: oneDNN f32 %.2f ms, OpenBLAS f32 %.2f ms, oneDNN bf16 %.2f ms "
           "(bf16 %.2fx f32)\n\n",
           gpt_dnnl * 1e3, gpt_blas * 1e3, gpt_bf16 * 1e3, gpt_dnnl / gpt_bf16);
}

/* ---- convolution layouts --------------------------------------------------------------------- */

#define DNNL_OK(x)                                                                                 \
    do {                                                                                           \
        dnnl_status_t s_ = (x);                                                                    \
        if (s_ != dnnl_success) {                                                                  \
            fprintf(stderr, "%s failed (%d)\n", #x, (int)s_);                                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { FWD, BWD_DATA, BWD_WEIGHT };

typedef struct step {
    dnnl_primitive_t p;
    int n_args;
    dnnl_exec_arg_t args[6];
} step;

/* One convolution op as raw oneDNN steps: reorders in, the convolution, reorder out. */
typedef struct conv_steps {
    step s[4];
    int n;
    dnnl_stream_t stream;
} conv_steps;

static void run_steps(void *p) {
    conv_steps *c = p;
    for (int i = 0; i < c->n; i++)
        DNNL_OK(dnnl_primitive_execute(c->s[i].p, c->stream, c->s[i].n_args, c->s[i].args));
    DNNL_OK(dnnl_stream_wait(c->stream));
}

/* Every buffer holds bytes 0x3c: 0.0115 in f32 and in bf16, a normal number (uninitialised
 * memory may hold denormals or NaNs, which run at a different speed). */
#define FILL_BYTE 0x3c

static dnnl_memory_t mem(dnnl_engine_t e, const dnnl_memory_desc_t *md) {
    dnnl_memory_t m;
    void *p;
    DNNL_OK(dnnl_memory_create(&m, md, e, DNNL_MEMORY_ALLOCATE));
    DNNL_OK(dnnl_memory_get_data_handle(m, &p));
    if (p) memset(p, FILL_BYTE, dnnl_memory_desc_get_size(md));
    return m;
}

static step reorder_step(dnnl_engine_t e, const dnnl_memory_desc_t *from, dnnl_memory_t mf,
                         const dnnl_memory_desc_t *to, dnnl_memory_t mt) {
    dnnl_primitive_desc_t pd;
    step st = {.n_args = 2};
    DNNL_OK(dnnl_reorder_primitive_desc_create(&pd, from, e, to, e, NULL));
    DNNL_OK(dnnl_primitive_create(&st.p, pd));
    dnnl_primitive_desc_destroy(pd);
    st.args[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, mf};
    st.args[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, mt};
    return st;
}

/* Builds op `op` of the convolution, in plain layouts (blocked = 0) or oneDNN's choice plus the
 * reorders from and to plain NCHW/OIHW. */
static conv_steps conv_build(dnnl_engine_t e, dnnl_stream_t stream, const amp_conv2d_desc *d,
                             int op, int blocked) {
    dnnl_dims_t xd = {d->n, d->c_in, d->h_in, d->w_in}, wd = {d->c_out, d->c_in, d->kh, d->kw};
    dnnl_dims_t yd = {d->n, d->c_out, d->h_out, d->w_out}, bd = {d->c_out};
    dnnl_dims_t strides = {d->stride_h, d->stride_w}, pad = {d->pad_h, d->pad_w};
    dnnl_memory_desc_t plain[3], want[3], bias;
    dnnl_data_type_t dt = d->dtype == AMP_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_format_tag_t act = blocked ? dnnl_format_tag_any : dnnl_nchw;
    dnnl_format_tag_t wei = blocked ? dnnl_format_tag_any : dnnl_oihw;
    DNNL_OK(dnnl_memory_desc_init_by_tag(&plain[0], 4, xd, dt, dnnl_nchw));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&plain[1], 4, wd, dt, dnnl_oihw));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&plain[2], 4, yd, dt, dnnl_nchw));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&want[0], 4, xd, dt, act));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&want[1], 4, wd, dt, wei));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&want[2], 4, yd, dt, act));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_a));
    dnnl_convolution_desc_t fd, cd;
    dnnl_primitive_desc_t fpd, pd;
    DNNL_OK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                               dnnl_convolution_direct, &want[0], &want[1], &bias,
                                               &want[2], strides, pad, pad));
    DNNL_OK(dnnl_primitive_desc_create(&fpd, &fd, NULL, e, NULL));
    pd = fpd;
    if (op == BWD_DATA) {
        DNNL_OK(dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &want[0],
                                                         &want[1], &want[2], strides, pad, pad));
        DNNL_OK(dnnl_primitive_desc_create(&pd, &cd, NULL, e, fpd));
    } else if (op == BWD_WEIGHT) {
        DNNL_OK(dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct,
                                                            &want[0], &want[1], &bias, &want[2],
                                                            strides, pad, pad));
        DNNL_OK(dnnl_primitive_desc_create(&pd, &cd, NULL, e, fpd));
    }
    /* x, w, y in the op's argument names; which of them the op writes. */
    static const int args[3][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                   {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST},
                                   {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST}};
    static const int out_of[3] = {2, 0, 1};
    conv_steps c = {.stream = stream};
    step conv = {0};
    step out = {0};
    for (int i = 0; i < 3; i++) {
        const dnnl_memory_desc_t *md =
            dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, args[op][i]);
        dnnl_memory_t m = mem(e, md);
        conv.args[conv.n_args++] = (dnnl_exec_arg_t){args[op][i], m};
        if (dnnl_memory_desc_equal(md, &plain[i])) continue;
        if (i == out_of[op]) out = reorder_step(e, md, m, &plain[i], mem(e, &plain[i]));
        else c.s[c.n++] = reorder_step(e, &plain[i], mem(e, &plain[i]), md, m);
    }
    if (op != BWD_DATA)
        conv.args[conv.n_args++] =
            (dnnl_exec_arg_t){op == FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, mem(e, &bias)};
    conv.args[conv.n_args++] = (dnnl_exec_arg_t){
        DNNL_ARG_SCRATCHPAD, mem(e, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0))};
    DNNL_OK(dnnl_primitive_create(&conv.p, pd));
    c.s[c.n++] = conv;
    if (out.p) c.s[c.n++] = out;
    if (pd != fpd) dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(fpd);
    return c;
}

typedef struct amp_conv_arg {
    const amp_conv2d_desc *d;
    int op;
    float *x, *w, *y, *b;
} amp_conv_arg;

static void run_amp_conv(void *p) {
    amp_conv_arg *a = p;
    amp_status s =
            a->op == FWD ? amp_cpu_conv2d_fwd(amp_cpu_device(), a->d, a->x, a->w, a->b, a->y)
            : a->op == BWD_DATA
                    ? amp_cpu_conv2d_bwd_data(amp_cpu_device(), a->d, a->y, a->w, a->x)
                    : amp_cpu_conv2d_bwd_weight(amp_cpu_device(), a->d, a->x, a->y, a->w, a->b);
    if (s != AMP_OK) {
        fprintf(stderr, "amp_cpu_conv2d failed: %s\n", amp_last_error());
        exit(1);
    }
}

static void bench_conv(void) {
    dnnl_engine_t e;
    dnnl_stream_t stream;
    DNNL_OK(dnnl_engine_create(&e, dnnl_cpu, 0));
    DNNL_OK(dnnl_stream_create(&stream, e, dnnl_stream_default_flags));
    static const char *layer[2] = {"conv1 1->16 k5 p2 28x28", "conv2 16->32 k5 p2 14x14"};
    static const char *op_name[3] = {"fwd", "bwd data", "bwd weight"};
    amp_conv2d_desc ds[2] = {
        {128, 1, 28, 28, 16, 5, 5, 1, 1, 2, 2, 28, 28, AMP_F32, false, false},
        {128, 16, 14, 14, 32, 5, 5, 1, 1, 2, 2, 14, 14, AMP_F32, false, false},
    };
    printf("| ConvNet layer, N=128 | dtype | op | plain NCHW ms | blocked + reorders ms | "
           "amp_cpu_conv2d ms |\n|---|---|---|---|---|---|\n");
    for (int dt = 0; dt < 2; dt++)
        for (int l = 0; l < 2; l++) {
            amp_conv2d_desc d = ds[l];
            d.dtype = dt ? AMP_BF16 : AMP_F32;
            size_t es = dt ? 2 : 4;
            int64_t nx = d.n * d.c_in * d.h_in * d.w_in, nw = d.c_out * d.c_in * d.kh * d.kw;
            int64_t ny = d.n * d.c_out * d.h_out * d.w_out;
            float *x = malloc((size_t)nx * es), *w = malloc((size_t)nw * es);
            float *y = malloc((size_t)ny * es), b[32] = {0};
            memset(x, FILL_BYTE, (size_t)nx * es);
            memset(w, FILL_BYTE, (size_t)nw * es);
            memset(y, FILL_BYTE, (size_t)ny * es);
            for (int op = 0; op < 3; op++) {
                conv_steps plain = conv_build(e, stream, &d, op, 0);
                conv_steps blocked = conv_build(e, stream, &d, op, 1);
                amp_conv_arg a = {&d, op, x, w, y, b};
                printf("| %s | %s | %s | %.3f | %.3f | %.3f |\n", layer[l], dt ? "bf16" : "f32",
                       op_name[op], best_time(run_steps, &plain) * 1e3,
                       best_time(run_steps, &blocked) * 1e3, best_time(run_amp_conv, &a) * 1e3);
            }
            free(x), free(w), free(y);
        }
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2 || threads < 1) {
        fprintf(stderr, "usage: gemm_backends [threads]: at least 1 (default 2)\n");
        return 2;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    printf("threads: %d (oneDNN via OpenMP, OpenBLAS pthreads); OpenBLAS: %s; oneDNN %d.%d.%d\n\n",
           threads, openblas_get_config(), dnnl_version()->major, dnnl_version()->minor,
           dnnl_version()->patch);
    bench_gemm();
    bench_conv();
    /* Asked after libamp's first GEMM: asking first would fix oneDNN's ISA before AMP_CPU_ISA
     * could cap it. */
    const char *cap = getenv("AMP_CPU_ISA");
    printf("\noneDNN's ISA: 0x%x%s%s\n", (unsigned)dnnl_get_effective_cpu_isa(),
           cap ? ", AMP_CPU_ISA=" : "", cap ? cap : "");
    return 0;
}
