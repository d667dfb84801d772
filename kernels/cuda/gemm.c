/* C = epilogue(alpha * op(A) @ op(B) + beta * C (+ bias[n] per row)) through cuBLASLt, with the
 * bias gradient of a weight-gradient GEMM fused into it (amp_gemm_desc in core/backend.h). The
 * ReLU is never cuBLASLt's (its max(v, 0) makes a NaN +0, where PyTorch's linear and relu keep
 * it, and a NaN must reach the loss): it is amp_relu_epilogue (kernels/math/relu.h), applied to
 * C after the GEMM in the pass below, which gives the same bits before or after the rounding.
 *
 * Layout: our matrices are row-major and cuBLASLt's column-major, and a row-major [r, c] matrix
 * with leading dimension ld is the column-major [c, r] matrix with the same ld, its transpose. So
 * C^T = op(B)^T op(A)^T is computed: cuBLASLt's "A" is our B, its "B" our A, its m is our n, and
 * the transpose flags carry over unchanged. The bias then runs along cuBLASLt's rows (length n),
 * which is what CUBLASLT_EPILOGUE_BIAS broadcasts. The bias gradient (sums over p of
 * op(A)[i, p], length m) runs along cuBLASLt's columns and sums its op(B) = op(A)^T over k: that
 * is CUBLASLT_EPILOGUE_BGRADB ("size of the columns of D, reduced over k"); BGRADA would sum
 * cuBLASLt's A, our B (X of dW = dY^T X), which is no gradient of ours.
 *
 * Numerics (core/backend.h): f32 accumulation (CUBLAS_COMPUTE_32F; f16/bf16 inputs run on tensor
 * cores; f32 inputs stay true fp32, as PyTorch's default allow_tf32=False for matmul, unless the
 * descriptor's allow_tf32 asks for CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to TF32, f32
 * accumulation), alpha and beta f32, one rounding to the output dtype. A half C's bias is
 * rounded to C's dtype first (n elements), on every route: C = round(v + round(bias)), as
 * core/backend.h states for both backends. cuBLASLt wants it so: bias vectors have D's type
 * (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE; IMMA and fp8 kernels excepted). Two routes:
 *  - direct: C is f32, or has the inputs' dtype. cuBLASLt writes C and its epilogue adds the bias
 *    (in D's dtype); the ReLU follows in place, in one pass over C;
 *  - scratch: C's half dtype differs from the inputs' (f16 x f16 -> bf16, or a mixed pair, which
 *    cuBLASLt does not take: its half operand is widened to f32 first, exactly). The product and
 *    bias (its rounded values in f32) go into an f32 scratch [m, n] (beta != 0 first widens C
 *    into it), which is rounded into C once, with the ReLU, in one pass.
 * A GELU epilogue (tanh form, not gelu_exact, direct route, one product, aux ld a multiple of 8) is
 * cuBLASLt's GELU_AUX_BIAS (GELU_AUX without a bias): aux gets the pre-activation, the same bits as
 * the bias epilogue writes, and C cuBLASLt's GELU of the unrounded value in one pass over the
 * output, within a few units of C's last place of amp_gelu(aux) (core/backend.h), which a GPU run
 * should confirm for the real library. The erf form, the other routes and a heuristic that offers
 * no algorithm run the GEMM into aux with the bias epilogue and then the unary GELU kernel from aux
 * into C (amp_gelu's bits): 2 m n s more bytes of traffic and a launch. The backward's GELU
 * derivative is the binary GELU_BWD kernel in nn/ on both routes, not cuBLASLt's DGELU: DGELU
 * belongs to the next layer's input-gradient GEMM, a fusion across two tape nodes that holds only
 * when the GELU output has that one consumer.
 * When no algorithm takes the bias epilogue, an f32 result gets the bias (and ReLU) from a
 * separate pass (for an f32 C in place, a second f32 rounding), and a half C takes the scratch
 * route, so it is still rounded once.
 * The bias gradient is fused (BGRADB, an unscaled sum, hence only with alpha = 1) for an f32 C
 * with true f32 inputs; else a separate sum_rows over A (the table's sum_rows, double sums):
 *  - cuBLASLt writes the bias gradient in D's type too, so an f16/bf16 dW would round it to half.
 *    An f32 scratch for dW instead would write and read again 4 m n bytes and add a rounding
 *    pass (m n = out x in: 16 MiB each way for a 2048 x 2048 layer), where sum_rows reads dY once
 *    (k m s = batch x out x 2 bytes: 256 KiB at batch 64): half outputs keep sum_rows;
 *  - with TF32 the epilogue may sum TF32-rounded inputs; PyTorch's bias gradient stays a true f32
 *    sum under allow_tf32, and so does ours.
 *
 * What the fused epilogues save, for an m x n output of s-byte elements (dY [k, m] for dW):
 *  - bias + ReLU as one op (nn's linear_relu) against a GEMM and then the relu op: the ReLU runs
 *    in place, so the step holds one m x n tensor instead of two, e.g. 256 KiB of step memory for
 *    the MLP's 2048-wide bf16 layers at batch 64 (the backward masks dY by y > 0 from the output
 *    it keeps, so no aux bit-mask is written); the pass itself (2 m n s bytes and a launch) is
 *    the relu op's, since cuBLASLt's ReLU epilogue loses NaN;
 *  - half C with a bias, direct instead of scratch: the scratch route writes 4 m n, reads 4 m n
 *    and writes s m n; direct writes s m n (the bias is rounded either way: 2 launches over n):
 *    8 m n bytes, an m x n f32 allocation and a launch saved (1 MiB of traffic per 2048-wide
 *    layer at batch 64);
 *  - the bias gradient in the dW GEMM: sum_rows reads dY again (k m s bytes) and writes and reads
 *    its double partials; the epilogue sums dY while the GEMM streams it in: k m s bytes and two
 *    launches per layer (512 KiB of f32 dY for a 2048-wide layer at batch 64).
 *
 * Plans (matmul descriptor, layouts, the heuristic's algorithm) are cached by problem: shapes,
 * leading dimensions, dtypes, compute type, epilogue and pointer alignments, since the
 * heuristic's choice depends on the alignments it was promised. One mutex guards the cache and
 * the descriptor whose bias pointer is set per call. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

/* cuBLASLt workspace: the cuBLAS documentation recommends 32 MiB on Hopper (4 MiB elsewhere);
 * it is taken once from the allocator and shared by every GEMM on the context's one stream. */
#define AMP_CUBLASLT_WORKSPACE ((size_t)32 << 20)
/* Cached plans: a model has a handful of GEMM shapes per layer (forward, grad of input, grad of
 * weight), so 64 covers the models this library trains; beyond that, round-robin replacement. */
#define AMP_GEMM_PLANS 64

typedef struct gemm_key {
    int32_t trans_a, trans_b;
    int32_t epilogue; /* the cublasLtEpilogue_t wanted */
    int32_t tf32;     /* CUBLAS_COMPUTE_32F_FAST_TF32 instead of CUBLAS_COMPUTE_32F */
    int64_t m, n, k, lda, ldb, ldd;
    int32_t ab_dt, d_dt;
    uint32_t align_a, align_b, align_d, align_vec; /* vec: the bias or bias-gradient vector */
    int64_t batch, stride_a, stride_b, stride_c;   /* batch 1: one product */
} gemm_key;

typedef struct gemm_plan {
    gemm_key key;
    bool used;
    /* What the algorithm runs: key.epilogue, or DEFAULT when no algorithm took it (the caller
     * then does the epilogue's work in other passes). */
    cublasLtEpilogue_t epilogue;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLASLt's A (our B), B (our A), C = D */
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

/* Scratch buffers of one call, from the caching allocator: the widened operands, the f32 result
 * of the scratch route, the bias rounded to a half C's dtype (in that dtype for cuBLASLt's
 * epilogue on a half D, and widened back to f32 for the other routes). */
enum { SCR_A, SCR_B, SCR_D, SCR_BIAS, SCR_BIAS32, SCR_N };

/* A device context's GEMM state: its cuBLASLt handle, workspace and plan cache. One mutex per
 * context guards the plans (amp contexts on several threads may share a device context). */
struct amp_cuda_gemm_state {
    pthread_mutex_t lock;
    cublasLtHandle_t lt;
    void *workspace; /* from the context's allocator, at the first GEMM */
    gemm_plan plans[AMP_GEMM_PLANS];
    int next_victim;
    amp_cuda_gemm_stats stats;
};

amp_status amp_cuda_gemm_state_create(amp_cuda_gemm_state **out) {
    amp_cuda_gemm_state *g = calloc(1, sizeof *g);
    if (!g) return amp_fail(AMP_ERR_OOM, "amp_cuda_gemm_state_create: out of host memory");
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return amp_fail(AMP_ERR_BACKEND, "amp_cuda_gemm_state_create: cublasLtCreate: %s (%s)",
                        cublasLtGetStatusString(st), cublasLtGetStatusName(st));
    }
    pthread_mutex_init(&g->lock, NULL);
    g->stats = (amp_cuda_gemm_stats){-1, false, -1};
    *out = g;
    return AMP_OK;
}

static cudaDataType_t cuda_type(amp_dtype dt) {
    return dt == AMP_F16 ? CUDA_R_16F : dt == AMP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The alignment a pointer guarantees, capped at the 256 bytes cuBLASLt assumes by default. */
static uint32_t align_of(const void *p) {
    uintptr_t x = (uintptr_t)p;
    uintptr_t low = x & (~x + 1);
    return x == 0 || low >= 256 ? 256u : (uint32_t)low;
}

static void plan_release(gemm_plan *p) {
    if (!p->used) return;
    if (p->la) cublasLtMatrixLayoutDestroy(p->la); /* a failed build leaves some unmade */
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

/* Asks the heuristic for the best algorithm with epilogue `epi` (its vector `vec`: the bias,
 * or where the bias gradient goes) under the key's alignments and our workspace; *found is false
 * when none exists (then the caller retries without the epilogue). */
static amp_status plan_pick_algo(amp_cuda_gemm_state *g, gemm_plan *p, cublasLtEpilogue_t epi,
                                 const void *vec, bool *found) {
    const gemm_key *k = &p->key;
    p->epilogue = epi;
    AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        /* Bias and bias-gradient vectors have D's type (the documented default, said aloud). */
        int32_t vec_type = cuda_type((amp_dtype)k->d_dt);
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                      &vec_type, sizeof vec_type));
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &vec, sizeof vec));
    }
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        /* The pre-activation has D's type (the default) and layout; its pointer is per call. */
        int64_t aux_ld = k->ldd;
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                      &aux_ld, sizeof aux_ld));
    }
    cublasLtMatmulPreference_t pref;
    AMP_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = AMP_CUBLASLT_WORKSPACE;
    /* cuBLASLt's A is our B and its B our A; C and D are one buffer. */
    uint32_t al_a = k->align_b, al_b = k->align_a, al_cd = k->align_d;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                  &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                  &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                  &al_cd, sizeof al_cd);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &al_cd, sizeof al_cd);
    cublasLtMatmulHeuristicResult_t result;
    int n_found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1,
                                            &result, &n_found);
    cublasLtMatmulPreferenceDestroy(pref);
    /* NOT_SUPPORTED is the heuristic's way of saying "no algorithm for this problem". */
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
        return amp_fail(AMP_ERR_BACKEND, "amp_cuda_gemm: cublasLtMatmulAlgoGetHeuristic: %s (%s)",
                        cublasLtGetStatusString(st), cublasLtGetStatusName(st));
    *found = st == CUBLAS_STATUS_SUCCESS && n_found > 0;
    if (*found) p->algo = result.algo;
    return AMP_OK;
}

static amp_status plan_build(amp_cuda_gemm_state *g, gemm_plan *p, const gemm_key *key,
                             const void *vec) {
    memset(p, 0, sizeof *p);
    p->key = *key;
    cublasComputeType_t compute = key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    AMP_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F));
    p->used = true; /* from here plan_release frees what was made */
    cublasOperation_t ta = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    /* Stored shapes, column-major: our B is [k, n] row-major = n x k (or k x n when trans_b). */
    cudaDataType_t ab = cuda_type((amp_dtype)key->ab_dt);
    uint64_t a_rows = key->trans_b ? (uint64_t)key->k : (uint64_t)key->n;
    uint64_t a_cols = key->trans_b ? (uint64_t)key->n : (uint64_t)key->k;
    uint64_t b_rows = key->trans_a ? (uint64_t)key->m : (uint64_t)key->k;
    uint64_t b_cols = key->trans_a ? (uint64_t)key->k : (uint64_t)key->m;
    AMP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->la, ab, a_rows, a_cols, key->ldb));
    AMP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lb, ab, b_rows, b_cols, key->lda));
    AMP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->ld, cuda_type((amp_dtype)key->d_dt),
                                              (uint64_t)key->n, (uint64_t)key->m, key->ldd));
    if (key->batch > 1) {
        /* cuBLASLt's A is our B and its B our A (column-major view of row-major data). */
        cublasLtMatrixLayout_t layouts[3] = {p->la, p->lb, p->ld};
        int64_t strides[3] = {key->stride_b, key->stride_a, key->stride_c};
        int32_t count = (int32_t)key->batch;
        for (int i = 0; i < 3; i++) {
            AMP_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(
                layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
            AMP_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(
                layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                sizeof strides[i]));
        }
    }
    bool found = false;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epilogue;
    AMP_TRY(plan_pick_algo(g, p, epi, vec, &found));
    if (!found && epi != CUBLASLT_EPILOGUE_DEFAULT)
        AMP_TRY(plan_pick_algo(g, p, CUBLASLT_EPILOGUE_DEFAULT, NULL, &found));
    if (!found)
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_cuda_gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld "
                        "(%s inputs, %s output, lda=%lld ldb=%lld ldc=%lld, alignments "
                        "%u/%u/%u B%s)",
                        (long long)key->m, (long long)key->n, (long long)key->k,
                        amp_dtype_name((amp_dtype)key->ab_dt), amp_dtype_name((amp_dtype)key->d_dt),
                        (long long)key->lda, (long long)key->ldb, (long long)key->ldd,
                        key->align_a, key->align_b, key->align_d, key->tf32 ? ", TF32" : "");
    return AMP_OK;
}

/* The cached plan for key, built on a miss; the caller holds g->lock. */
static amp_status plan_get(amp_cuda_gemm_state *g, const gemm_key *key, const void *vec,
                           gemm_plan **out) {
    for (int i = 0; i < AMP_GEMM_PLANS; i++) {
        if (g->plans[i].used && memcmp(&g->plans[i].key, key, sizeof *key) == 0) {
            *out = &g->plans[i];
            return AMP_OK;
        }
    }
    gemm_plan *p = &g->plans[g->next_victim];
    g->next_victim = (g->next_victim + 1) % AMP_GEMM_PLANS;
    plan_release(p);
    amp_status s = plan_build(g, p, key, vec);
    if (s != AMP_OK) {
        plan_release(p);
        return s;
    }
    *out = p;
    return AMP_OK;
}

static bool is_float(amp_dtype dt) { return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16; }

static amp_status gemm_validate(const amp_gemm_desc *d) {
    AMP_CHECK_ARG(d);
    if (d->m < 0 || d->n < 0 || d->k < 0)
        return amp_fail(AMP_ERR_SHAPE, "amp_cuda_gemm: negative size m=%lld n=%lld k=%lld",
                        (long long)d->m, (long long)d->n, (long long)d->k);
    if (!is_float(d->a_dtype) || !is_float(d->b_dtype) || !is_float(d->c_dtype))
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_cuda_gemm: A %s, B %s, C %s: each must be f32, f16 or bf16",
                        amp_dtype_name(d->a_dtype), amp_dtype_name(d->b_dtype),
                        amp_dtype_name(d->c_dtype));
    int64_t a_cols = d->trans_a ? d->m : d->k, b_cols = d->trans_b ? d->k : d->n;
    if (d->lda < (a_cols > 1 ? a_cols : 1))
        return amp_fail(AMP_ERR_SHAPE, "amp_cuda_gemm: lda = %lld < %lld columns of stored A",
                        (long long)d->lda, (long long)a_cols);
    if (d->ldb < (b_cols > 1 ? b_cols : 1))
        return amp_fail(AMP_ERR_SHAPE, "amp_cuda_gemm: ldb = %lld < %lld columns of stored B",
                        (long long)d->ldb, (long long)b_cols);
    if (d->ldc < (d->n > 1 ? d->n : 1))
        return amp_fail(AMP_ERR_SHAPE, "amp_cuda_gemm: ldc = %lld < n = %lld", (long long)d->ldc,
                        (long long)d->n);
    AMP_TRY(amp_backend_check_gemm_fused("amp_cuda_gemm", d));
    if (d->m > 0 && d->n > 0) {
        AMP_CHECK_ARG(d->c);
        if (d->k > 0) AMP_CHECK_ARG(d->b);
    }
    if (d->m > 0 && d->k > 0 && (d->n > 0 || d->bias_grad)) AMP_CHECK_ARG(d->a);
    return AMP_OK;
}

/* Copies a stored [rows, cols] operand (leading dimension *ld) into a dense f32 scratch, which
 * holds f16/bf16 values exactly, and points *p and *ld at it. */
static amp_status widen_operand(const void **p, amp_dtype dt, int64_t *ld, int64_t rows,
                                int64_t cols, void **scratch, amp_device_ctx *dev) {
    cudaStream_t stream = dev->stream;
    AMP_TRY(amp_cuda_alloc(dev, (size_t)rows * (size_t)cols * sizeof(float), scratch));
    AMP_TRY(amp_cuda_cast_rows_launch(*scratch, AMP_F32, cols, *p, dt, *ld, rows, cols, 1.0f, NULL,
                                      false, stream));
    *p = *scratch;
    *ld = cols;
    return AMP_OK;
}

/* The bias gradient in its own pass: column sums of the stored A [k, m] (trans_a) of dtype
 * a_dt, through sum_rows, on a dense f32 copy when A is padded (scratch[SCR_A] is then free: a
 * widened A is dense already). */
static amp_status bias_grad_pass(const amp_gemm_desc *d, const void *a, amp_dtype a_dt, int64_t lda,
                                 void *scratch[SCR_N], amp_device_ctx *dev) {
    if (lda != d->m && d->k > 0) {
        AMP_TRY(widen_operand(&a, a_dt, &lda, d->k, d->m, &scratch[SCR_A], dev));
        a_dt = AMP_F32;
    }
    return amp_cuda_sum_rows(dev, a_dt, d->k, d->m, a, d->bias_grad);
}

/* cuBLASLt's epilogue for d: the bias, or the bias gradient; never its ReLU (see the top). */
static cublasLtEpilogue_t epilogue_wanted(const amp_gemm_desc *d, bool fuse_bias_grad) {
    if (d->bias) return CUBLASLT_EPILOGUE_BIAS;
    return fuse_bias_grad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
}

/* d's GELU epilogue as cuBLASLt's GELU_AUX[_BIAS] (gemm_gelu_eligible's cases): *taken false,
 * and nothing run, when no algorithm takes it. Else d's epilogue is NONE or RELU. */
static amp_status gemm_run(const amp_gemm_desc *d, void *scratch[SCR_N], amp_device_ctx *dev,
                           bool *taken) {
    cudaStream_t stream = dev->stream;
    amp_cuda_gemm_state *g = dev->gemm;
    if (!g->workspace) AMP_TRY(amp_cuda_alloc(dev, AMP_CUBLASLT_WORKSPACE, &g->workspace));
    /* cuBLASLt takes A and B of one dtype: a mixed pair is widened to f32 (exactly). */
    amp_dtype ab_dt = d->a_dtype == d->b_dtype ? d->a_dtype : AMP_F32;
    const void *a = d->a, *b = d->b;
    int64_t lda = d->lda, ldb = d->ldb;
    if (d->a_dtype != ab_dt)
        AMP_TRY(widen_operand(&a, d->a_dtype, &lda, d->trans_a ? d->k : d->m,
                              d->trans_a ? d->m : d->k, &scratch[SCR_A], dev));
    if (d->b_dtype != ab_dt)
        AMP_TRY(widen_operand(&b, d->b_dtype, &ldb, d->trans_b ? d->n : d->k,
                              d->trans_b ? d->k : d->n, &scratch[SCR_B], dev));
    bool tf32 = d->allow_tf32 && ab_dt == AMP_F32;
    /* The fused bias gradient has D's type and is an unscaled sum: see the top. */
    bool fuse_bias_grad = d->bias_grad && d->c_dtype == AMP_F32 && !tf32 && d->alpha == 1.0f;
    bool lt_gelu = d->epilogue == AMP_GEMM_EPILOGUE_GELU_TANH;
    cublasLtEpilogue_t want = !lt_gelu ? epilogue_wanted(d, fuse_bias_grad)
                              : d->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                        : CUBLASLT_EPILOGUE_GELU_AUX;
    bool direct = d->c_dtype == AMP_F32 || d->c_dtype == ab_dt;
    *taken = true;

    /* At most two rounds: a direct half C whose epilogue no algorithm takes goes the scratch
     * way. */
    gemm_plan *p = NULL;
    void *dst = d->c;
    int64_t ldd = d->ldc;
    amp_dtype d_dt = d->c_dtype;
    const void *vec = NULL;
    for (;;) {
        dst = d->c, ldd = d->ldc, d_dt = d->c_dtype;
        if (!direct) {
            size_t nbytes = (size_t)d->m * (size_t)d->n * sizeof(float);
            if (!scratch[SCR_D]) AMP_TRY(amp_cuda_alloc(dev, nbytes, &scratch[SCR_D]));
            dst = scratch[SCR_D], ldd = d->n, d_dt = AMP_F32;
            if (d->beta != 0.0f)
                AMP_TRY(amp_cuda_cast_rows_launch(dst, AMP_F32, ldd, d->c, d->c_dtype, d->ldc, d->m,
                                                  d->n, 1.0f, NULL, false, stream));
        }
        vec = fuse_bias_grad ? (const void *)d->bias_grad : (const void *)d->bias;
        if (d->bias && d_dt != AMP_F32) vec = scratch[SCR_BIAS]; /* D's dtype: amp_cuda_gemm's */
        gemm_key key;
        memset(&key, 0, sizeof key); /* padding takes part in memcmp */
        key.trans_a = d->trans_a;
        key.trans_b = d->trans_b;
        key.epilogue = (int32_t)want;
        key.tf32 = tf32;
        key.m = d->m;
        key.n = d->n;
        key.k = d->k;
        key.lda = lda;
        key.ldb = ldb;
        key.ldd = ldd;
        key.ab_dt = ab_dt;
        key.d_dt = d_dt;
        key.align_a = align_of(a);
        key.align_b = align_of(b);
        key.align_d = align_of(dst);
        key.align_vec = vec ? align_of(vec) : 0;
        if (d->batch > 1) {
            /* every product's pointers: the base's alignment and the stride's */
            key.batch = d->batch, key.stride_a = d->stride_a, key.stride_b = d->stride_b;
            key.stride_c = d->stride_c;
            size_t es_ab = amp_dtype_size(ab_dt), es_d = amp_dtype_size(d_dt);
            uint32_t sa = align_of((const void *)(uintptr_t)(d->stride_a * es_ab));
            uint32_t sb = align_of((const void *)(uintptr_t)(d->stride_b * es_ab));
            uint32_t sd = align_of((const void *)(uintptr_t)(d->stride_c * es_d));
            key.align_a = key.align_a < sa ? key.align_a : sa;
            key.align_b = key.align_b < sb ? key.align_b : sb;
            key.align_d = key.align_d < sd ? key.align_d : sd;
        } else {
            key.batch = 1;
        }
        AMP_TRY(plan_get(dev->gemm, &key, vec, &p));
        if (lt_gelu && p->epilogue != want) {
            *taken = false;
            return AMP_OK;
        }
        /* A half C cannot take a missed bias in a later pass without a second rounding. */
        if (direct && d_dt != AMP_F32 && p->epilogue != want) {
            direct = false;
            continue;
        }
        break;
    }
    if (p->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &vec, sizeof vec));
    if (lt_gelu)
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
                p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &d->aux, sizeof d->aux));
    cublasStatus_t st =
            cublasLtMatmul(g->lt, p->op, &d->alpha, b, p->la, a, p->lb, &d->beta, dst, p->ld, dst,
                           p->ld, &p->algo, g->workspace, AMP_CUBLASLT_WORKSPACE, stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return amp_fail(AMP_ERR_BACKEND,
                        "amp_cuda_gemm: cublasLtMatmul (m=%lld n=%lld k=%lld): %s (%s)",
                        (long long)d->m, (long long)d->n, (long long)d->k,
                        cublasLtGetStatusString(st), cublasLtGetStatusName(st));
    /* The ReLU; the bias when the epilogue could not take it (D is f32 then); and the one
     * rounding out of the scratch. In place on a direct C. */
    bool late = p->epilogue != want && want != CUBLASLT_EPILOGUE_BGRADB;
    const float *late_bias = late ? d->bias : NULL;
    bool relu = d->epilogue == AMP_GEMM_EPILOGUE_RELU;
    if (!direct || late_bias || relu)
        AMP_TRY(amp_cuda_cast_rows_launch(d->c, d->c_dtype, d->ldc, dst, d_dt, ldd, d->m, d->n,
                                          1.0f, late_bias, relu, stream));
    if (d->bias_grad && p->epilogue != CUBLASLT_EPILOGUE_BGRADB)
        AMP_TRY(bias_grad_pass(d, a, ab_dt, lda, scratch, dev));
    g->stats = (amp_cuda_gemm_stats){(int)p->epilogue, direct,
                                     tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    return AMP_OK;
}

static amp_status gemm_empty(const amp_gemm_desc *d, void *scratch[SCR_N], amp_device_ctx *dev);

/* cuBLASLt's GELU_AUX[_BIAS] can run d: the tanh form, not gelu_exact, C written directly (f32
 * or the inputs' dtype), one product, an aux leading dimension that is a multiple of 8 and an
 * aux aligned to 16 bytes (cuBLASLt's requirements for the pre-activation). */
static bool gemm_gelu_eligible(const amp_gemm_desc *d) {
    bool direct = d->a_dtype == d->b_dtype && (d->c_dtype == AMP_F32 || d->c_dtype == d->a_dtype);
    return d->epilogue == AMP_GEMM_EPILOGUE_GELU_TANH && !d->gelu_exact && direct &&
           d->batch <= 1 && d->ldc % 8 == 0 && ((uintptr_t)d->aux & 15u) == 0 && d->n > 0 &&
           d->k > 0;
}

/* C = GELU(aux) with the unary entry's kernel (the same bits as amp_gelu), dense rows at once
 * or row by row. */
static amp_status gemm_gelu_pass(const amp_gemm_desc *d, cudaStream_t stream) {
    amp_unary_op op = d->epilogue == AMP_GEMM_EPILOGUE_GELU_TANH ? AMP_UNARY_GELU_TANH
                                                                  : AMP_UNARY_GELU_ERF;
    if (d->m == 0 || d->n == 0) return AMP_OK;
    if (d->ldc == d->n)
        return amp_cuda_unary_launch(op, d->c_dtype, d->m * d->n, d->aux, 1.0f, d->c, stream);
    size_t es = amp_dtype_size(d->c_dtype);
    for (int64_t i = 0; i < d->m; i++)
        AMP_TRY(amp_cuda_unary_launch(op, d->c_dtype, d->n, (const char *)d->aux + i * d->ldc * es,
                                      1.0f, (char *)d->c + i * d->ldc * es, stream));
    return AMP_OK;
}

/* One product (or a native batch) after the bias rounding: a GELU epilogue as cuBLASLt's where
 * it takes it, else the GEMM into aux and the GELU pass; the rest through gemm_run or, for an
 * empty product, gemm_empty. */
static amp_status gemm_product(const amp_gemm_desc *d, void *scratch[SCR_N], amp_device_ctx *dev) {
    bool gelu = amp_gemm_epilogue_is_gelu(d->epilogue);
    if (gelu && gemm_gelu_eligible(d)) {
        bool taken;
        pthread_mutex_lock(&dev->gemm->lock);
        amp_status s = gemm_run(d, scratch, dev, &taken);
        pthread_mutex_unlock(&dev->gemm->lock);
        if (s != AMP_OK || taken) return s;
    }
    amp_gemm_desc pre = *d;
    if (gelu) pre.c = d->aux, pre.aux = NULL, pre.epilogue = AMP_GEMM_EPILOGUE_NONE;
    if (pre.n == 0 || pre.k == 0) {
        AMP_TRY(gemm_empty(&pre, scratch, dev));
    } else {
        bool taken;
        pthread_mutex_lock(&dev->gemm->lock);
        amp_status s = gemm_run(&pre, scratch, dev, &taken);
        pthread_mutex_unlock(&dev->gemm->lock);
        AMP_TRY(s);
    }
    return gelu ? gemm_gelu_pass(d, dev->stream) : AMP_OK;
}

/* An empty product: C = epilogue(beta * C + bias) (C unread when beta = 0, as BLAS), and the
 * bias gradient, which does not depend on n, sums A alone; cuBLASLt does not take k = 0. */
static amp_status gemm_empty(const amp_gemm_desc *d, void *scratch[SCR_N], amp_device_ctx *dev) {
    cudaStream_t stream = dev->stream;
    if (d->n > 0)
        AMP_TRY(amp_cuda_cast_rows_launch(d->c, d->c_dtype, d->ldc, d->beta != 0.0f ? d->c : NULL,
                                          d->c_dtype, d->ldc, d->m, d->n, d->beta, d->bias,
                                          d->epilogue == AMP_GEMM_EPILOGUE_RELU, stream));
    if (d->bias_grad) AMP_TRY(bias_grad_pass(d, d->a, d->a_dtype, d->lda, scratch, dev));
    return AMP_OK;
}

/* A half C's bias rounded to C's dtype (core/backend.h), into scratch[SCR_BIAS], and widened
 * back to f32 (exactly) into scratch[SCR_BIAS32]; *d then points at the latter. */
static amp_status bias_round(amp_gemm_desc *d, void *scratch[SCR_N], amp_device_ctx *dev) {
    cudaStream_t stream = dev->stream;
    AMP_TRY(amp_cuda_alloc(dev, (size_t)d->n * amp_dtype_size(d->c_dtype), &scratch[SCR_BIAS]));
    AMP_TRY(amp_cuda_alloc(dev, (size_t)d->n * sizeof(float), &scratch[SCR_BIAS32]));
    AMP_TRY(amp_cuda_cast_rows_launch(scratch[SCR_BIAS], d->c_dtype, d->n, d->bias, AMP_F32, d->n,
                                      1, d->n, 1.0f, NULL, false, stream));
    AMP_TRY(amp_cuda_cast_rows_launch(scratch[SCR_BIAS32], AMP_F32, d->n, scratch[SCR_BIAS],
                                      d->c_dtype, d->n, 1, d->n, 1.0f, NULL, false, stream));
    d->bias = scratch[SCR_BIAS32];
    return AMP_OK;
}

/* A batch cuBLASLt runs in one call: operands of one dtype, a C cuBLASLt writes itself, nothing
 * fused. The rest goes product by product. */
static bool batch_native(const amp_gemm_desc *d) {
    amp_dtype ab = d->a_dtype;
    return d->a_dtype == d->b_dtype && (d->c_dtype == AMP_F32 || d->c_dtype == ab) && !d->bias &&
           d->epilogue == AMP_GEMM_EPILOGUE_NONE && d->n > 0 && d->k > 0;
}

amp_status amp_cuda_gemm(amp_device_ctx *dev, const amp_gemm_desc *desc) {
    AMP_TRY(gemm_validate(desc));
    void *scratch[SCR_N] = {NULL};
    amp_status s = AMP_OK;
    if (desc->m == 0) return AMP_OK;
    if (desc->batch > 1 && !batch_native(desc)) {
        for (int64_t i = 0; i < desc->batch; i++) {
            amp_gemm_desc one = *desc;
            one.batch = 0;
            one.a = (const char *)desc->a + i * desc->stride_a * (int64_t)amp_dtype_size(desc->a_dtype);
            one.b = (const char *)desc->b + i * desc->stride_b * (int64_t)amp_dtype_size(desc->b_dtype);
            one.c = (char *)desc->c + i * desc->stride_c * (int64_t)amp_dtype_size(desc->c_dtype);
            if (desc->aux)
                one.aux = (char *)desc->aux +
                          i * desc->stride_c * (int64_t)amp_dtype_size(desc->c_dtype);
            AMP_TRY(amp_cuda_gemm(dev, &one));
        }
        return AMP_OK;
    }
    amp_gemm_desc d = *desc;
    if (d.bias && d.c_dtype != AMP_F32 && d.n > 0) s = bias_round(&d, scratch, dev);
    if (s == AMP_OK) s = gemm_product(&d, scratch, dev);
    /* Safe before the queued work ran: the allocator hands these only to work queued later on the
     * same stream. */
    for (int i = 0; i < SCR_N; i++) amp_cuda_free(dev, scratch[i]);
    return s;
}

void amp_cuda_gemm_stats_get(amp_device_ctx *dev, amp_cuda_gemm_stats *out) {
    if (!out) return;
    pthread_mutex_lock(&dev->gemm->lock);
    *out = dev->gemm->stats;
    pthread_mutex_unlock(&dev->gemm->lock);
}

void amp_cuda_gemm_state_free(amp_device_ctx *dev, amp_cuda_gemm_state *g) {
    if (!g) return;
    for (int i = 0; i < AMP_GEMM_PLANS; i++) plan_release(&g->plans[i]);
    amp_cuda_free(dev, g->workspace);
    cublasLtDestroy(g->lt);
    pthread_mutex_destroy(&g->lock);
    free(g);
}
