/* C = alpha * op(A) @ op(B) + beta * C (+ bias[n] per row) through cuBLASLt.
 *
 * Layout: our matrices are row-major and cuBLASLt's column-major, and a row-major [r, c] matrix
 * with leading dimension ld is the column-major [c, r] matrix with the same ld, its transpose. So
 * C^T = op(B)^T op(A)^T is computed: cuBLASLt's "A" is our B, its "B" our A, its m is our n, and
 * the transpose flags carry over unchanged. The bias then runs along cuBLASLt's rows (length n),
 * which is what CUBLASLT_EPILOGUE_BIAS broadcasts.
 *
 * Numerics (core/backend.h): f32 accumulation (CUBLAS_COMPUTE_32F; f16/bf16 inputs run on tensor
 * cores; f32 inputs stay true fp32, as PyTorch's default allow_tf32=False for matmul), alpha and
 * beta f32, one rounding to the output dtype. The epilogue's bias must have the output's dtype
 * (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) and ours is f32, so an f16/bf16 output with a
 * bias is computed into an f32 scratch matrix with the bias epilogue, then rounded into C once
 * (beta != 0 first widens C into the scratch); so is an output whose half dtype differs from the
 * inputs'. When no algorithm takes the epilogue, the bias is added by a separate pass before that
 * single rounding (for an f32 C, in place). cuBLASLt wants A and B of one dtype: a mixed pair
 * (which the CPU backend accepts) has its half operand widened to f32 first, which is exact.
 * Scratch buffers come from the caching allocator.
 *
 * Plans (matmul descriptor, layouts, the heuristic's algorithm) are cached by problem: shapes,
 * leading dimensions, dtypes, bias and pointer alignments, since the heuristic's choice depends
 * on the alignments it was promised. One mutex guards the cache and the descriptor whose bias
 * pointer is set per call. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

/* cuBLASLt workspace: the cuBLAS documentation recommends 32 MiB on Hopper (4 MiB elsewhere);
 * it is taken once from the allocator and shared by every GEMM on the backend's one stream. */
#define AMP_CUBLASLT_WORKSPACE ((size_t)32 << 20)
/* Cached plans: a model has a handful of GEMM shapes per layer (forward, grad of input, grad of
 * weight), so 64 covers the models this library trains; beyond that, round-robin replacement. */
#define AMP_GEMM_PLANS 64

typedef struct gemm_key {
    int32_t trans_a, trans_b, bias, pad;
    int64_t m, n, k, lda, ldb, ldd;
    int32_t ab_dt, d_dt;
    uint32_t align_a, align_b, align_d, align_bias;
} gemm_key;

typedef struct gemm_plan {
    gemm_key key;
    bool used;
    bool epilogue; /* bias fused by cuBLASLt; else a separate pass adds it */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLASLt's A (our B), B (our A), C = D */
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cublasLtHandle_t g_lt;
static void *g_workspace;
static gemm_plan g_plans[AMP_GEMM_PLANS];
static int g_next_victim;

amp_status amp_cuda_gemm_init(void) {
    AMP_CUBLAS_TRY(cublasLtCreate(&g_lt));
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

/* Asks the heuristic for the best algorithm under the key's alignments and our workspace;
 * *found is false when none exists (then the caller retries without the epilogue). */
static amp_status plan_pick_algo(gemm_plan *p, const float *bias, bool *found) {
    const gemm_key *k = &p->key;
    cublasLtEpilogue_t epi = p->epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi));
    if (p->epilogue) {
        int32_t bias_type = CUDA_R_32F;
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                      &bias_type, sizeof bias_type));
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias));
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
        st = cublasLtMatmulAlgoGetHeuristic(g_lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1,
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

static amp_status plan_build(gemm_plan *p, const gemm_key *key, const float *bias) {
    memset(p, 0, sizeof *p);
    p->key = *key;
    AMP_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
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
    bool found = false;
    p->epilogue = key->bias != 0;
    AMP_TRY(plan_pick_algo(p, bias, &found));
    if (!found && p->epilogue) {
        p->epilogue = false;
        AMP_TRY(plan_pick_algo(p, NULL, &found));
    }
    if (!found)
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "amp_cuda_gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld "
                        "(%s inputs, %s output, lda=%lld ldb=%lld ldc=%lld, alignments %u/%u/%u B)",
                        (long long)key->m, (long long)key->n, (long long)key->k,
                        amp_dtype_name((amp_dtype)key->ab_dt), amp_dtype_name((amp_dtype)key->d_dt),
                        (long long)key->lda, (long long)key->ldb, (long long)key->ldd,
                        key->align_a, key->align_b, key->align_d);
    return AMP_OK;
}

/* The cached plan for key, built on a miss; the caller holds g_lock. */
static amp_status plan_get(const gemm_key *key, const float *bias, gemm_plan **out) {
    for (int i = 0; i < AMP_GEMM_PLANS; i++) {
        if (g_plans[i].used && memcmp(&g_plans[i].key, key, sizeof *key) == 0) {
            *out = &g_plans[i];
            return AMP_OK;
        }
    }
    gemm_plan *p = &g_plans[g_next_victim];
    g_next_victim = (g_next_victim + 1) % AMP_GEMM_PLANS;
    plan_release(p);
    amp_status s = plan_build(p, key, bias);
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
    if (d->m > 0 && d->n > 0) {
        AMP_CHECK_ARG(d->c);
        if (d->k > 0) {
            AMP_CHECK_ARG(d->a);
            AMP_CHECK_ARG(d->b);
        }
    }
    return AMP_OK;
}

/* Copies a stored [rows, cols] operand (leading dimension *ld) into a dense f32 scratch, which
 * holds f16/bf16 values exactly, and points *p and *ld at it. */
static amp_status widen_operand(const void **p, amp_dtype dt, int64_t *ld, int64_t rows,
                                int64_t cols, void **scratch, cudaStream_t stream) {
    AMP_TRY(amp_cuda_alloc((size_t)rows * (size_t)cols * sizeof(float), scratch));
    AMP_TRY(amp_cuda_cast_rows_launch(*scratch, AMP_F32, cols, *p, dt, *ld, rows, cols, 1.0f, NULL,
                                      stream));
    *p = *scratch;
    *ld = cols;
    return AMP_OK;
}

static amp_status gemm_run(const amp_gemm_desc *d, void *scratch[3], cudaStream_t stream) {
    if (!g_workspace) AMP_TRY(amp_cuda_alloc(AMP_CUBLASLT_WORKSPACE, &g_workspace));
    /* cuBLASLt takes A and B of one dtype: a mixed pair is widened to f32 (exactly). Its output
     * is C itself when C is f32, or has the inputs' dtype and no bias (see the top); otherwise an
     * f32 scratch [m, n] that is rounded into C once at the end. */
    amp_dtype ab_dt = d->a_dtype == d->b_dtype ? d->a_dtype : AMP_F32;
    bool direct = d->c_dtype == AMP_F32 || (d->c_dtype == ab_dt && !d->bias);
    const void *a = d->a, *b = d->b;
    int64_t lda = d->lda, ldb = d->ldb, ldd = d->ldc;
    void *dst = d->c;
    amp_dtype d_dt = direct ? d->c_dtype : AMP_F32;
    if (d->a_dtype != ab_dt)
        AMP_TRY(widen_operand(&a, d->a_dtype, &lda, d->trans_a ? d->k : d->m,
                              d->trans_a ? d->m : d->k, &scratch[0], stream));
    if (d->b_dtype != ab_dt)
        AMP_TRY(widen_operand(&b, d->b_dtype, &ldb, d->trans_b ? d->n : d->k,
                              d->trans_b ? d->k : d->n, &scratch[1], stream));
    if (!direct) {
        AMP_TRY(amp_cuda_alloc((size_t)d->m * (size_t)d->n * sizeof(float), &scratch[2]));
        dst = scratch[2];
        ldd = d->n;
        if (d->beta != 0.0f)
            AMP_TRY(amp_cuda_cast_rows_launch(dst, AMP_F32, ldd, d->c, d->c_dtype, d->ldc, d->m,
                                              d->n, 1.0f, NULL, stream));
    }

    gemm_key key;
    memset(&key, 0, sizeof key); /* padding takes part in memcmp */
    key.trans_a = d->trans_a;
    key.trans_b = d->trans_b;
    key.bias = d->bias != NULL;
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
    key.align_bias = d->bias ? align_of(d->bias) : 0;
    gemm_plan *p = NULL;
    AMP_TRY(plan_get(&key, d->bias, &p));
    if (p->epilogue) {
        const float *bias = d->bias;
        AMP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias));
    }
    cublasStatus_t st = cublasLtMatmul(g_lt, p->op, &d->alpha, b, p->la, a, p->lb, &d->beta, dst,
                                       p->ld, dst, p->ld, &p->algo, g_workspace,
                                       AMP_CUBLASLT_WORKSPACE, stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return amp_fail(AMP_ERR_BACKEND,
                        "amp_cuda_gemm: cublasLtMatmul (m=%lld n=%lld k=%lld): %s (%s)",
                        (long long)d->m, (long long)d->n, (long long)d->k,
                        cublasLtGetStatusString(st), cublasLtGetStatusName(st));
    /* The bias when the epilogue could not take it, and the one rounding out of the scratch. */
    const float *late_bias = p->epilogue ? NULL : d->bias;
    if (!direct || late_bias)
        AMP_TRY(amp_cuda_cast_rows_launch(d->c, d->c_dtype, d->ldc, dst, d_dt, ldd, d->m, d->n,
                                          1.0f, late_bias, stream));
    return AMP_OK;
}

amp_status amp_cuda_gemm(const amp_gemm_desc *d) {
    AMP_TRY(gemm_validate(d));
    if (d->m == 0 || d->n == 0) return AMP_OK;
    cudaStream_t stream = amp_cuda_stream();
    /* An empty inner dimension: the product is zero, C = beta * C + bias (C unread when beta = 0,
     * as BLAS); cuBLASLt does not take k = 0. */
    if (d->k == 0)
        return amp_cuda_cast_rows_launch(d->c, d->c_dtype, d->ldc, d->beta != 0.0f ? d->c : NULL,
                                         d->c_dtype, d->ldc, d->m, d->n, d->beta, d->bias, stream);
    void *scratch[3] = {NULL, NULL, NULL};
    pthread_mutex_lock(&g_lock);
    amp_status s = gemm_run(d, scratch, stream);
    pthread_mutex_unlock(&g_lock);
    /* Safe before the queued work ran: the allocator hands these only to work queued later on the
     * same stream. */
    for (int i = 0; i < 3; i++) amp_cuda_free(scratch[i]);
    return s;
}
