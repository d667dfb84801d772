/* The CUDA backend's kernels against the device's limits (scripts/gpu.sh runs it on a GPU):
 *   - the fused multi-tensor optimizer steps (SGD, Adam, LAMB at O2: f32 master, f16 gradient
 *     and copy) as achieved bandwidth: bytes moved per parameter (written beside each kernel in
 *     kernels/cuda/optim.cu) times parameters / time, against the device's peak (85 % is the
 *     target);
 *   - GEMM through cuBLASLt at the MLP's shapes (batch x 784 -> 2048 -> 2048 -> 10, forward and
 *     both backward products) in bf16 and f16 with f32 accumulation, in TFLOP/s against the
 *     tensor-core peak (60 % is the target);
 *   - the transformer ops at GPT-2 small's shapes: LayerNorm, GELU and softmax rows as bandwidth
 *     against 85 % of the HBM, the fused attention in TFLOP/s against the f32 and tensor-core
 *     peaks;
 *   - the peaks those are held against, measured: a device-to-device copy (bytes read and
 *     written), and a square GEMM in each compute mode of the backend (f32, f32 with TF32
 *     allowed, bf16, f16), each beside the data sheet's dense figure.
 * Timings are CUDA events around repeated launches after warm-up. Prints a Markdown table and,
 * with --json, one JSON object per row. Under the cudacpu build it runs too (small sizes,
 * --smoke), which only shows that it works: its times are the CPU's.
 *   cuda_kernels [--smoke] [--json] [--params N] [--batch B] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "kernels/cuda/cuda_backend.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda_kernels: %s: %s\n", #call, cudaGetErrorString(e_));              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define AK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != AMP_OK) {                                                                    \
            fprintf(stderr, "cuda_kernels: %s: %s\n", #call, amp_last_error());                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Peaks by device name, from NVIDIA's data sheets (dense, no sparsity): HBM TB/s, bf16/f16
 * tensor-core TFLOP/s, f32 (CUDA cores) and TF32 tensor-core TFLOP/s. */
typedef struct peak {
    const char *name_part;
    double hbm_tbs, tc_tflops, f32_tflops, tf32_tflops;
} peak;
static const peak g_peaks[] = {
    {"H200", 4.8, 989.4, 67.0, 494.7},      {"H100 SXM", 3.35, 989.4, 67.0, 494.7},
    {"H100 80GB HBM3", 3.35, 989.4, 67.0, 494.7}, {"H100 NVL", 3.9, 835.0, 60.0, 417.5},
    {"H100 PCIe", 2.0, 756.0, 51.0, 378.0}, {"H100", 3.35, 989.4, 67.0, 494.7},
    {"A100-SXM4-80GB", 2.04, 312.0, 19.5, 156.0}, {"A100", 1.56, 312.0, 19.5, 156.0},
};

static peak device_peak(const char *name) {
    for (size_t i = 0; i < sizeof g_peaks / sizeof g_peaks[0]; i++)
        if (strstr(name, g_peaks[i].name_part)) return g_peaks[i];
    return (peak){"unknown", 0, 0, 0, 0};
}

static float time_ms(void (*run)(void *), void *arg, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    run(arg); /* warm-up: plans, algorithm searches, workspace */
    CK(cudaEventRecord(a, amp_cuda_device()->stream));
    for (int i = 0; i < reps; i++) run(arg);
    CK(cudaEventRecord(b, amp_cuda_device()->stream));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms / (float)reps;
}

/* ---- fused optimizers ---- */

typedef struct optim_run {
    const amp_backend *be;
    int kind; /* 0 SGD, 1 Adam, 2 LAMB */
    amp_opt_tensors t;
} optim_run;

static void optim_once(void *p) {
    optim_run *r = p;
    if (r->kind == 0) {
        amp_sgd_desc d = {.lr = 1e-3f, .momentum = 0.9f, .half_dtype = AMP_F16};
        AK(r->be->k.sgd_multi(r->be->dev, &d, &r->t, NULL));
    } else if (r->kind == 1) {
        amp_adam_desc d = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                           .decoupled = true, .weight_decay = 0.01f, .half_dtype = AMP_F16};
        AK(r->be->k.adam_multi(r->be->dev, &d, &r->t, NULL));
    } else {
        amp_lamb_desc d = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f,
                           .weight_decay = 0.01f, .decoupled = true, .bias_correction = true,
                           .grad_averaging = true, .max_grad_norm = 1.0f};
        AK(r->be->k.lamb_multi(r->be->dev, &d, &r->t, NULL));
    }
}

static void *dev_zeros(const amp_backend *be, size_t bytes) {
    void *p;
    AK(be->alloc(be->dev, bytes, &p));
    AK(be->memset_zero(be->dev, p, bytes));
    return p;
}

/* Bytes per parameter at O2 with f16 gradients: read grad 2 + master 4 (+ state), write master
 * 4 + copy 2 (+ state). LAMB reads and writes its moments in stage 1 and reads master, moments
 * again in stage 2 (it recomputes the update instead of storing it), plus its gradient-norm pass. */
static const double g_optim_bytes[3] = {2 + 4 + 4 + 4 + 4 + 2, 2 + 4 + 8 + 8 + 4 + 2,
                                        2 + 2 + 4 + 8 + 8 + 4 + 8 + 4 + 2};
static const char *g_optim_name[3] = {"SGD momentum", "Adam (AdamW)", "LAMB"};

static void bench_optim(const amp_backend *be, int64_t n_params, peak pk, bool json, int reps) {
    /* A model-like list: 64 tensors of n_params / 64 elements. */
    enum { T = 64 };
    int64_t each = n_params / T;
    int64_t numel[T];
    void *grad[T], *half[T];
    float *param[T], *m[T], *v[T];
    int64_t *steps = dev_zeros(be, sizeof(int64_t) * T);
    for (int i = 0; i < T; i++) {
        numel[i] = each;
        grad[i] = dev_zeros(be, (size_t)each * 2);
        half[i] = dev_zeros(be, (size_t)each * 2);
        param[i] = dev_zeros(be, (size_t)each * 4);
        m[i] = dev_zeros(be, (size_t)each * 4);
        v[i] = dev_zeros(be, (size_t)each * 4);
    }
    for (int kind = 0; kind < 3; kind++) {
        optim_run r = {.be = be, .kind = kind,
                       .t = {.n = T, .numel = numel, .grad = grad, .grad_dtype = AMP_F16,
                             .param = param, .half = half, .half_dtype = AMP_F16, .state1 = m,
                             .state2 = kind ? v : NULL, .steps = steps}};
        float ms = time_ms(optim_once, &r, reps);
        double bytes = g_optim_bytes[kind] * (double)(each * T);
        double tbs = bytes / (ms * 1e-3) / 1e12;
        double target_ms = pk.hbm_tbs > 0 ? bytes / (0.85 * pk.hbm_tbs * 1e12) * 1e3 : 0;
        if (json)
            printf("{\"bench\": \"optim\", \"kernel\": \"%s\", \"params\": %lld, \"ms\": %.4f, "
                   "\"tb_per_s\": %.3f, \"peak_fraction\": %.3f}\n", g_optim_name[kind],
                   (long long)(each * T), ms, tbs, pk.hbm_tbs > 0 ? tbs / pk.hbm_tbs : 0);
        else
            printf("| %s | %.0f B | %.3f ms | %.2f TB/s | %.0f %% | %.3f ms |\n",
                   g_optim_name[kind], g_optim_bytes[kind], ms, tbs,
                   pk.hbm_tbs > 0 ? 100 * tbs / pk.hbm_tbs : 0, target_ms);
    }
    for (int i = 0; i < T; i++) {
        be->free(be->dev, grad[i]);
        be->free(be->dev, half[i]);
        be->free(be->dev, param[i]);
        be->free(be->dev, m[i]);
        be->free(be->dev, v[i]);
    }
    be->free(be->dev, steps);
}

/* ---- GEMM ---- */

typedef struct gemm_run {
    const amp_backend *be;
    amp_gemm_desc d;
} gemm_run;

static void gemm_once(void *p) {
    gemm_run *r = p;
    AK(r->be->k.gemm(r->be->dev, &r->d));
}

static void bench_gemm(const amp_backend *be, int64_t batch, peak pk, bool json, int reps) {
    /* The MLP's products: forward x[b,k] @ W^T[k,n]; grad input dy[b,n] @ W[n,k]; grad weight
     * dy^T[n,b] @ x[b,k]. */
    static const int64_t layers[3][2] = {{784, 2048}, {2048, 2048}, {2048, 10}};
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int di = 0; di < 2; di++) {
        for (int l = 0; l < 3; l++) {
            int64_t k = layers[l][0], n = layers[l][1];
            const char *what[3] = {"fwd", "bwd data", "bwd weight"};
            int64_t shapes[3][3] = {{batch, n, k}, {batch, k, n}, {n, k, batch}};
            for (int w = 0; w < 3; w++) {
                int64_t M = shapes[w][0], N = shapes[w][1], K = shapes[w][2];
                size_t es = 2;
                void *a = dev_zeros(be, (size_t)(M * K) * es), *b = dev_zeros(be, (size_t)(K * N) * es);
                void *c = dev_zeros(be, (size_t)(M * N) * es);
                gemm_run r = {.be = be,
                              .d = {.m = M, .n = N, .k = K, .alpha = 1, .beta = 0,
                                    .a = a, .a_dtype = dts[di], .lda = K,
                                    .b = b, .b_dtype = dts[di], .ldb = N,
                                    .c = c, .c_dtype = dts[di], .ldc = N}};
                float ms = time_ms(gemm_once, &r, reps);
                double tflops = 2.0 * (double)M * (double)N * (double)K / (ms * 1e-3) / 1e12;
                const char *dn = dts[di] == AMP_BF16 ? "bf16" : "f16";
                if (json)
                    printf("{\"bench\": \"gemm\", \"dtype\": \"%s\", \"m\": %lld, \"n\": %lld, "
                           "\"k\": %lld, \"what\": \"fc%d %s\", \"ms\": %.4f, \"tflops\": %.1f, "
                           "\"peak_fraction\": %.3f}\n", dn, (long long)M, (long long)N,
                           (long long)K, l + 1, what[w], ms, tflops,
                           pk.tc_tflops > 0 ? tflops / pk.tc_tflops : 0);
                else
                    printf("| %s | fc%d %s | %lld x %lld x %lld | %.4f ms | %.1f | %.0f %% |\n", dn,
                           l + 1, what[w], (long long)M, (long long)N, (long long)K, ms, tflops,
                           pk.tc_tflops > 0 ? 100 * tflops / pk.tc_tflops : 0);
                be->free(be->dev, a);
                be->free(be->dev, b);
                be->free(be->dev, c);
            }
        }
    }
}

/* ---- the peaks themselves ---- */

typedef struct copy_run {
    void *dst;
    const void *src;
    size_t bytes;
} copy_run;

/* ---- transformer ops (GPT-2 small's shapes) ---- */

typedef struct tf_run {
    const amp_backend *be;
    int what;
    int64_t rows, cols;
    amp_attn_desc ad;
    void *x, *y, *dy, *dx, *q, *k, *v, *o, *dq, *dk, *dv;
    float *gamma, *beta, *mean, *rstd, *dgamma, *dbeta, *lse, *delta;
} tf_run;

enum { TF_LN_FWD, TF_LN_BWD, TF_GELU_FWD, TF_GELU_BWD, TF_SOFTMAX_FWD, TF_ATTN_FWD, TF_ATTN_BWD,
       TF_N };
/* Bytes per element of the row ops in bf16 (2 a value; the f32 statistics and parameters are
 * per row or per column, noise at 768 wide): LayerNorm forward reads x, writes y (4); backward
 * reads x and dy, writes dx (6; dgamma and dbeta are per column); GELU 4 and backward 6 (reads
 * the input and dy); softmax 4. The bandwidth they should reach is 85 % of the HBM's. FLOPs per
 * element (core/backend_kernels.def's counts): 8, 12, 1, 1, 5. */
static const double g_tf_bytes[TF_N] = {4, 6, 4, 6, 4, 0, 0};
static const char *g_tf_name[TF_N] = {"LayerNorm forward", "LayerNorm backward", "GELU (tanh)",
                                      "GELU backward", "softmax", "attention forward (causal)",
                                      "attention backward (causal)"};

static void tf_once(void *p) {
    tf_run *r = p;
    amp_ln_desc ln = {.rows = r->rows, .cols = r->cols, .eps = 1e-5f, .dt = AMP_BF16,
                      .r_dt = AMP_BF16, .y_dt = AMP_BF16};
    amp_softmax_desc sm = {.rows = r->rows, .cols = r->cols, .dt = AMP_BF16};
    int64_t n = r->rows * r->cols;
    switch (r->what) {
    case TF_LN_FWD:
        AK(r->be->k.layernorm_fwd(r->be->dev, &ln, r->x, NULL, NULL, r->gamma, r->beta, r->y,
                                  r->mean, r->rstd));
        break;
    case TF_LN_BWD:
        AK(r->be->k.layernorm_bwd(r->be->dev, &ln, r->x, r->dy, r->gamma, r->mean, r->rstd, r->dx,
                                  r->dgamma, r->dbeta));
        break;
    case TF_GELU_FWD:
        AK(r->be->k.unary(r->be->dev, AMP_UNARY_GELU_TANH, AMP_BF16, n, r->x, 1.0f, r->y));
        break;
    case TF_GELU_BWD:
        AK(r->be->k.binary(r->be->dev, AMP_BINARY_GELU_TANH_BWD, AMP_BF16, n, r->x, r->dy, r->dx));
        break;
    case TF_SOFTMAX_FWD: AK(r->be->k.softmax_fwd(r->be->dev, &sm, r->x, r->y)); break;
    case TF_ATTN_FWD:
        AK(r->be->k.attn_fwd(r->be->dev, &r->ad, r->q, r->k, r->v, NULL, r->o, r->lse));
        break;
    default:
        AK(r->be->k.attn_bwd(r->be->dev, &r->ad, r->q, r->k, r->v, NULL, r->o, r->dy, r->lse,
                             r->delta, r->dq, r->dk, r->dv));
        break;
    }
}

/* The row ops over [B T, C] = [8 * 1024, 768] in bf16 against 85 % of the HBM, and the fused
 * attention at B 8, H 12, T 1024, D 64 (bf16, causal) against the f32 CUDA-core peak its warps
 * are bound by and the tensor-core peak FlashAttention's kernels approach (kernels/cuda/
 * attention.cu). Inputs are zeros but for the attention's (exps of equal scores: the same work). */
static void bench_transformer(const amp_backend *be, peak pk, bool json, int reps, bool smoke) {
    tf_run r = {.be = be, .rows = smoke ? 64 : 8 * 1024, .cols = smoke ? 96 : 768};
    int64_t n = r.rows * r.cols, heads = smoke ? 2 : 12, seq = smoke ? 64 : 1024;
    r.ad = (amp_attn_desc){.batch = smoke ? 1 : 8, .heads = heads, .seq = seq, .head_dim = 64,
                           .dt = AMP_BF16, .scale = 0.125f, .causal = true};
    int64_t bht = r.ad.batch * heads * seq, qkv = bht * 64;
    size_t b2 = (size_t)(n > qkv ? n : qkv) * 2;
    r.x = dev_zeros(be, b2), r.y = dev_zeros(be, b2), r.dy = dev_zeros(be, b2);
    r.dx = dev_zeros(be, b2);
    r.q = dev_zeros(be, b2), r.k = dev_zeros(be, b2), r.v = dev_zeros(be, b2);
    r.o = dev_zeros(be, b2), r.dq = dev_zeros(be, b2), r.dk = dev_zeros(be, b2);
    r.dv = dev_zeros(be, b2);
    r.gamma = dev_zeros(be, (size_t)r.cols * 4), r.beta = dev_zeros(be, (size_t)r.cols * 4);
    r.dgamma = dev_zeros(be, (size_t)r.cols * 4), r.dbeta = dev_zeros(be, (size_t)r.cols * 4);
    r.mean = dev_zeros(be, (size_t)(r.rows > bht ? r.rows : bht) * 4);
    r.rstd = dev_zeros(be, (size_t)(r.rows > bht ? r.rows : bht) * 4);
    r.lse = dev_zeros(be, (size_t)bht * 4), r.delta = dev_zeros(be, (size_t)bht * 4);
    r.what = TF_LN_FWD; /* the backward's statistics: rstd from a forward */
    tf_once(&r);
    for (int w = 0; w < TF_N; w++) {
        r.what = w;
        float ms = time_ms(tf_once, &r, reps);
        bool attn = w >= TF_ATTN_FWD;
        double pairs = (double)r.ad.batch * heads * (double)seq * (double)(seq + 1) / 2;
        double flops = attn ? (w == TF_ATTN_FWD ? 4.0 : 10.0) * pairs * 64 : 0;
        double tbs = attn ? 0 : g_tf_bytes[w] * (double)n / (ms * 1e-3) / 1e12;
        double tflops = attn ? flops / (ms * 1e-3) / 1e12 : 0;
        double target_ms = attn ? (pk.tc_tflops > 0 ? flops / (pk.tc_tflops * 1e12) * 1e3 : 0)
                                : (pk.hbm_tbs > 0 ? g_tf_bytes[w] * (double)n /
                                                            (0.85 * pk.hbm_tbs * 1e12) * 1e3
                                                  : 0);
        if (json)
            printf("{\"bench\": \"transformer\", \"kernel\": \"%s\", \"ms\": %.4f, "
                   "\"tb_per_s\": %.3f, \"tflops\": %.2f}\n", g_tf_name[w], ms, tbs, tflops);
        else if (attn)
            printf("| %s | %.1f GFLOP | %.3f ms | %.1f TFLOP/s | %.0f %% of f32, %.1f %% of "
                   "tensor cores | %.3f ms |\n", g_tf_name[w], flops / 1e9, ms, tflops,
                   pk.f32_tflops > 0 ? 100 * tflops / pk.f32_tflops : 0,
                   pk.tc_tflops > 0 ? 100 * tflops / pk.tc_tflops : 0, target_ms);
        else
            printf("| %s | %.0f B | %.3f ms | %.2f TB/s | %.0f %% of HBM | %.3f ms |\n",
                   g_tf_name[w], g_tf_bytes[w], ms, tbs,
                   pk.hbm_tbs > 0 ? 100 * tbs / pk.hbm_tbs : 0, target_ms);
    }
    void *all[] = {r.x, r.y, r.dy, r.dx, r.q, r.k, r.v, r.o, r.dq, r.dk, r.dv, r.gamma, r.beta,
                   r.dgamma, r.dbeta, r.mean, r.rstd, r.lse, r.delta};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->free(be->dev, all[i]);
}

static void copy_once(void *p) {
    copy_run *r = p;
    CK(cudaMemcpyAsync(r->dst, r->src, r->bytes, cudaMemcpyDeviceToDevice,
                       amp_cuda_device()->stream));
}

/* Square GEMMs big enough to fill the device (8192^3, 1.1 TFLOP a product) in each of the
 * backend's compute modes, and a device-to-device copy of 1 GiB; each beside the data sheet. */
static void bench_peaks(const amp_backend *be, peak pk, bool json, int reps, bool smoke) {
    size_t copy_bytes = smoke ? (size_t)1 << 20 : (size_t)1 << 30;
    copy_run cr = {.dst = dev_zeros(be, copy_bytes), .src = dev_zeros(be, copy_bytes),
                   .bytes = copy_bytes};
    float ms = time_ms(copy_once, &cr, reps);
    double tbs = 2.0 * (double)copy_bytes / (ms * 1e-3) / 1e12;
    if (json)
        printf("{\"bench\": \"peak\", \"what\": \"copy\", \"bytes\": %zu, \"ms\": %.4f, "
               "\"tb_per_s\": %.3f, \"sheet\": %.2f}\n", copy_bytes, ms, tbs, pk.hbm_tbs);
    else
        printf("| device-to-device copy, %zu MiB (read + write) | %.3f ms | %.2f TB/s | %.2f TB/s "
               "| %.0f %% |\n", copy_bytes >> 20, ms, tbs, pk.hbm_tbs,
               pk.hbm_tbs > 0 ? 100 * tbs / pk.hbm_tbs : 0);
    be->free(be->dev, cr.dst);
    be->free(be->dev, (void *)cr.src);

    int64_t n = smoke ? 64 : 8192;
    struct { const char *name; amp_dtype dt; bool tf32; double sheet; } modes[4] = {
        {"f32", AMP_F32, false, pk.f32_tflops}, {"f32, TF32 allowed", AMP_F32, true, pk.tf32_tflops},
        {"bf16 (f32 accumulation)", AMP_BF16, false, pk.tc_tflops},
        {"f16 (f32 accumulation)", AMP_F16, false, pk.tc_tflops}};
    for (int i = 0; i < 4; i++) {
        size_t es = modes[i].dt == AMP_F32 ? 4 : 2, bytes = (size_t)(n * n) * es;
        void *a = dev_zeros(be, bytes), *b = dev_zeros(be, bytes), *c = dev_zeros(be, bytes);
        gemm_run r = {.be = be, .d = {.m = n, .n = n, .k = n, .alpha = 1, .beta = 0,
                                      .a = a, .a_dtype = modes[i].dt, .lda = n,
                                      .b = b, .b_dtype = modes[i].dt, .ldb = n,
                                      .c = c, .c_dtype = modes[i].dt, .ldc = n,
                                      .allow_tf32 = modes[i].tf32}};
        float gms = time_ms(gemm_once, &r, smoke ? 1 : 10);
        double tflops = 2.0 * (double)n * (double)n * (double)n / (gms * 1e-3) / 1e12;
        if (json)
            printf("{\"bench\": \"peak\", \"what\": \"gemm %s\", \"n\": %lld, \"ms\": %.4f, "
                   "\"tflops\": %.1f, \"sheet\": %.1f}\n", modes[i].name, (long long)n, gms,
                   tflops, modes[i].sheet);
        else
            printf("| GEMM %s, %lld^3 | %.3f ms | %.1f TFLOP/s | %.1f TFLOP/s | %.0f %% |\n",
                   modes[i].name, (long long)n, gms, tflops, modes[i].sheet,
                   modes[i].sheet > 0 ? 100 * tflops / modes[i].sheet : 0);
        be->free(be->dev, a);
        be->free(be->dev, b);
        be->free(be->dev, c);
    }
}

int main(int argc, char **argv) {
    bool smoke = false, json = false;
    int64_t n_params = (int64_t)1 << 28, batch = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke")) smoke = true;
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--params") && i + 1 < argc) n_params = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: cuda_kernels [--smoke] [--json] [--params N] [--batch B]\n");
            return 2;
        }
    }
    if (n_params < 1 || batch < 1) {
        fprintf(stderr, "cuda_kernels: --params and --batch take a count of at least 1\n");
        return 2;
    }
    if (smoke) {
        n_params = 64 * 1024;
        batch = 16;
    }
    const amp_backend *be = amp_backend_cuda();
    if (!be) {
        printf("cuda_kernels: no device: %s\n", amp_last_error());
        return 0;
    }
    struct cudaDeviceProp prop;
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    peak pk = device_peak(prop.name);
    int reps = smoke ? 1 : 20;
    if (!json) {
        printf("Device: %s (sm_%d%d, %d SMs); peaks used: %.2f TB/s HBM, %.0f TFLOP/s bf16/f16 "
               "dense%s\n\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
               pk.hbm_tbs, pk.tc_tflops, pk.hbm_tbs > 0 ? "" : " (unknown device: no peak)");
    }
    if (!json)
        printf("Peaks, measured against the data sheet's dense figures:\n\n| what | time | "
               "measured | data sheet | of it |\n|---|---:|---:|---:|---:|\n");
    bench_peaks(be, pk, json, reps, smoke);
    if (!json)
        printf("\nFused optimizer step, O2 (f32 master, f16 grad and copy), %lld parameters in 64 "
               "tensors:\n\n| kernel | bytes/param | time | achieved | of peak | 85 %% target |\n"
               "|---|---:|---:|---:|---:|---:|\n", (long long)(n_params / 64 * 64));
    bench_optim(be, n_params, pk, json, reps);
    if (!json)
        printf("\nGEMM (cuBLASLt, f32 accumulation), MLP shapes at batch %lld:\n\n| dtype | product "
               "| m x n x k | time | TFLOP/s | of peak |\n|---|---|---|---:|---:|---:|\n",
               (long long)batch);
    bench_gemm(be, batch, pk, json, reps);
    if (!json)
        printf("\nTransformer ops, bf16: rows [8192, 768] against 85 %% of the HBM; attention at "
               "B 8, H 12, T 1024, D 64 against the tensor-core peak (target: the time at that "
               "peak):\n\n| kernel | bytes/elem or FLOPs | time | achieved | of peak | target |\n"
               "|---|---:|---:|---:|---:|---:|\n");
    bench_transformer(be, pk, json, reps, smoke);
    return 0;
}
