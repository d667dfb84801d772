/* CPU GEMM through oneDNN's matmul primitive.
 *
 * C[m,n] = alpha * op(A) @ op(B) + beta * C (+ bias[n]), the contract of amp_gemm_desc. Transposes
 * and leading dimensions become memory-descriptor strides, so nothing is copied. beta is a sum
 * post-op (C is not read when beta == 0, as in BLAS: a NaN left in C does not leak into the
 * result). oneDNN adds a matmul bias BEFORE the output scale (dst = alpha * (A@B + bias)); for
 * alpha != 1 the bias is therefore a binary-add post-op placed after the sum instead.
 *
 * dtypes: f32 x f32 and bf16 x bf16 (into f32 or bf16 C) run natively, bf16 on AVX512-BF16/AMX
 * where present, accumulating in f32. Any other mix of f32/f16/bf16 that oneDNN has no kernel for
 * on this CPU is widened to f32, computed, and rounded back (DESIGN.md: fp16 on the CPU is
 * storage).
 *
 * A half C's bias is rounded to C's dtype before it is added (core/backend.h), as the CUDA
 * backend's cuBLASLt epilogue takes it: an n-element rounded copy.
 *
 * Fused parts (amp_gemm_desc after bias): the ReLU epilogue is a pass over C after the GEMM, in
 * C's dtype (kernels/math/relu.h: NaN kept, -0 made +0, the same bits before or after the
 * rounding, as the CUDA backend's pass), not oneDNN's eltwise post-op, whose relu keeps -0. A
 * GELU epilogue's GEMM writes aux and the unary GELU kernel reads it into C (oneDNN's gelu
 * post-op computes its own tanh or erf on the unrounded value, other bits than amp_gelu's, and
 * cannot write the pre-activation the backward needs). The bias
 * gradient is sum_rows over A (the same chunked double sums, so the bits of the unfused linear
 * backward), or, for a padded A, a double sum per column in row order. allow_tf32 is ignored:
 * this CPU has no TF32 arithmetic and computes true f32.
 *
 * Determinism: the same inputs give the same bits on every call with the same thread count.
 * Across thread counts oneDNN keeps the bits for most shapes but not where it splits k between
 * threads (small m*n, large k, e.g. 16x16x4096); plans are keyed by the thread count. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/math/load_store.h"
#include "kernels/math/relu.h"

/* Everything a plan depends on; zeroed before filling because the cache compares its bytes. */
typedef struct gemm_key {
    int64_t m, n, k, lda, ldb, ldc;
    int64_t batch, stride_a, stride_b, stride_c; /* batch 1: one product */
    float alpha, beta;
    int32_t a_dtype, b_dtype, c_dtype, n_threads;
    uint8_t trans_a, trans_b, has_bias, unused;
} gemm_key;

typedef struct gemm_plan {
    dnnl_primitive_t prim; /* NULL: oneDNN lacks these dtypes here, widen to f32 */
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md, scratch_md;
    size_t scratch_nbytes;
    int bias_arg; /* DNNL_ARG_BIAS, the binary post-op's src1, or 0 without bias */
} gemm_plan;

static void gemm_plan_destroy(void *p) {
    gemm_plan *plan = p;
    if (plan->prim) dnnl_primitive_destroy(plan->prim);
    free(plan);
}

/* The strides of a logical rows x cols operand stored row-major with leading dimension ld,
 * transposed in memory when `trans`; with a batch, a leading batch dim of that stride (one
 * matrix for them all, oneDNN's broadcast, where the stride is 0). */
static amp_status operand_md(dnnl_memory_desc_t *md, int64_t batch, int64_t stride, int64_t rows,
                             int64_t cols, int64_t ld, bool trans, amp_dtype dt) {
    dnnl_data_type_t ddt = dnnl_f32;
    AMP_TRY(amp_dnnl_dtype(dt, "gemm operand", &ddt));
    if (batch > 1) {
        int64_t span = (trans ? cols : rows) * ld;
        dnnl_dims_t dims = {stride ? batch : 1, rows, cols};
        dnnl_dims_t strides = {stride ? stride : span, trans ? 1 : ld, trans ? ld : 1};
        AMP_DNNL_TRY(dnnl_memory_desc_init_by_strides(md, 3, dims, ddt, strides));
        return AMP_OK;
    }
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    AMP_DNNL_TRY(dnnl_memory_desc_init_by_strides(md, 2, dims, ddt, strides));
    return AMP_OK;
}

static amp_status gemm_attr_fill(dnnl_primitive_attr_t attr, const gemm_key *key,
                                 const dnnl_memory_desc_t *bias_md, bool bias_post_op) {
    if (key->alpha != 1.0f)
        AMP_DNNL_TRY(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key->alpha));
    if (key->beta == 0.0f && !bias_post_op) return AMP_OK;
    dnnl_post_ops_t po;
    AMP_DNNL_TRY(dnnl_post_ops_create(&po));
    dnnl_status_t s = dnnl_success;
    if (key->beta != 0.0f) s = dnnl_post_ops_append_sum(po, key->beta);
    if (s == dnnl_success && bias_post_op)
        s = dnnl_post_ops_append_binary(po, dnnl_binary_add, bias_md);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_post_ops_destroy(po);
    AMP_DNNL_TRY(s);
    return AMP_OK;
}

static amp_status gemm_plan_fill(gemm_plan *plan, const gemm_key *key, dnnl_primitive_attr_t attr) {
    int64_t nb = key->batch;
    AMP_TRY(operand_md(&plan->a_md, nb, key->stride_a, key->m, key->k, key->lda, key->trans_a,
                       key->a_dtype));
    AMP_TRY(operand_md(&plan->b_md, nb, key->stride_b, key->k, key->n, key->ldb, key->trans_b,
                       key->b_dtype));
    AMP_TRY(operand_md(&plan->c_md, nb, key->stride_c, key->m, key->n, key->ldc, false,
                       key->c_dtype));
    bool bias_post_op = key->has_bias && key->alpha != 1.0f;
    if (key->has_bias) {
        dnnl_dims_t dims = {1, 1, key->n};
        AMP_DNNL_TRY(dnnl_memory_desc_init_by_tag(&plan->bias_md, nb > 1 ? 3 : 2,
                                                  nb > 1 ? dims : dims + 1, dnnl_f32,
                                                  nb > 1 ? dnnl_abc : dnnl_ab));
        plan->bias_arg = bias_post_op ? (DNNL_ARG_ATTR_MULTIPLE_POST_OP(key->beta != 0.0f ? 1 : 0) |
                                         DNNL_ARG_SRC_1)
                                      : DNNL_ARG_BIAS;
    }
    AMP_TRY(gemm_attr_fill(attr, key, &plan->bias_md, bias_post_op));
    bool all_f32 = key->a_dtype == AMP_F32 && key->b_dtype == AMP_F32 && key->c_dtype == AMP_F32;
    dnnl_matmul_desc_t op;
    dnnl_status_t ds = dnnl_matmul_desc_init(&op, &plan->a_md, &plan->b_md,
                                             key->has_bias && !bias_post_op ? &plan->bias_md
                                                                            : NULL,
                                             &plan->c_md);
    /* oneDNN 2.6 refuses to describe some dtype mixes at all (f16 x f32 -> f16 with a bias):
     * widened like those it describes but has no kernel for. */
    if (ds != dnnl_success && !all_f32) return AMP_OK;
    AMP_DNNL_TRY(ds);
    dnnl_primitive_desc_t pd = NULL;
    amp_status s = amp_dnnl_pd_create(&op, attr, NULL, &pd);
    if (s == AMP_ERR_UNSUPPORTED && !all_f32) return AMP_OK; /* plan->prim stays NULL: widen */
    AMP_TRY(s);
    if (!all_f32 && amp_dnnl_pd_is_reference(pd)) { /* widen: the f32 kernels, not the loops */
        dnnl_primitive_desc_destroy(pd);
        return AMP_OK;
    }
    plan->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    plan->scratch_nbytes = dnnl_memory_desc_get_size(&plan->scratch_md);
    ds = dnnl_primitive_create(&plan->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    AMP_DNNL_TRY(ds);
    return AMP_OK;
}

static amp_status gemm_plan_build(const void *k, void **out) {
    const gemm_key *key = k;
    gemm_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return amp_fail(AMP_ERR_OOM, "%s: out of host memory", __func__);
    dnnl_primitive_attr_t attr = NULL;
    amp_status s = amp_dnnl_attr_create(&attr);
    if (s == AMP_OK) {
        s = gemm_plan_fill(plan, key, attr);
        dnnl_primitive_attr_destroy(attr);
    }
    if (s != AMP_OK) {
        gemm_plan_destroy(plan);
        return s;
    }
    *out = plan;
    return AMP_OK;
}

/* Runs the plan on d's pointers; `scratch` holds the plan's scratchpad. */
static amp_status gemm_run(const gemm_plan *plan, const amp_gemm_desc *d, void *scratch_p,
                           amp_dnnl_mems *mems) {
    dnnl_memory_t a = NULL, b = NULL, c = NULL, bias = NULL, scratch = NULL;
    AMP_TRY(amp_dnnl_mem(mems, &plan->a_md, d->a, &a));
    AMP_TRY(amp_dnnl_mem(mems, &plan->b_md, d->b, &b));
    AMP_TRY(amp_dnnl_mem(mems, &plan->c_md, d->c, &c));
    AMP_TRY(amp_dnnl_mem(mems, &plan->scratch_md, scratch_p, &scratch));
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c},
                               {DNNL_ARG_SCRATCHPAD, scratch}};
    int n_args = 4;
    if (plan->bias_arg) {
        AMP_TRY(amp_dnnl_mem(mems, &plan->bias_md, d->bias, &bias));
        args[n_args++] = (dnnl_exec_arg_t){plan->bias_arg, bias};
    }
    AMP_TRY(amp_dnnl_execute(plan->prim, n_args, args));
    return amp_dnnl_wait();
}

/* A row-major f32 B (not transposed) whose row stride is a multiple of 4 KiB puts every row of
 * a column panel in the same cache sets. oneDNN 2.6 reads such a B in place when it is 64-byte
 * aligned (and packs it when it is not), and the set conflicts halve its speed (the MLP's
 * dX = dY W; bench/RESULTS.md, "Figures behind decisions in the code", gemm.c). Such a B, when it outgrows L2 and m is large enough to pay for
 * one pass over it, is copied into scratch with a row stride padded by one cache line (the
 * choice depends on the shape alone). A half B never is. Every bf16 kernel (AMX and AVX512-BF16
 * brgemm, the gemm kernel) regroups B into pairs along k anyway, so its stride never reaches the
 * inner loop, and the copy only costs a pass and sends oneDNN from its AMX brgemm kernel to
 * the slower gemm kernel (the same section). An f16 B has no
 * oneDNN kernel here: gemm_widened widens it into f32, and that copy follows the f32 rule. */
#define GEMM_PAD_MIN_BYTES ((int64_t)1 << 20)
#define GEMM_PAD_MIN_M 32

static int64_t gemm_padded_ldb(const amp_gemm_desc *d) {
    const int64_t esize = (int64_t)sizeof(float), line = 64 / esize; /* f32 B only */
    if (d->batch > 1 || d->b_dtype != AMP_F32 || d->trans_b || d->m < GEMM_PAD_MIN_M ||
        (d->ldb * esize) % 4096 != 0 || d->k * d->n * esize < GEMM_PAD_MIN_BYTES)
        return 0;
    return (d->n + line - 1) / line * line + line;
}

static void gemm_copy_b(const amp_gemm_desc *d, void *dst, int64_t ld_dst) {
    size_t esize = amp_dtype_size(d->b_dtype), row = (size_t)d->n * esize;
#pragma omp parallel for schedule(static) if (d->k * d->n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t p = 0; p < d->k; p++)
        memcpy((char *)dst + (size_t)(p * ld_dst) * esize,
               (const char *)d->b + (size_t)(p * d->ldb) * esize, row);
}

/* Runs the plan, first copying B to its padded stride when the plan was built for one. */
static amp_status gemm_run_plan(const gemm_plan *plan, const amp_gemm_desc *d, int64_t padded_ldb) {
    size_t scratch_nbytes = (plan->scratch_nbytes + 63) / 64 * 64;
    size_t pad_nbytes = padded_ldb ? (size_t)(d->k * padded_ldb) * amp_dtype_size(d->b_dtype) : 0;
    void *arena = NULL;
    if (scratch_nbytes + pad_nbytes)
        AMP_TRY(amp_dnnl_scratch(scratch_nbytes + pad_nbytes, &arena));
    amp_gemm_desc run = *d;
    if (padded_ldb) {
        run.b = (char *)arena + scratch_nbytes;
        run.ldb = padded_ldb;
        gemm_copy_b(d, (void *)(uintptr_t)run.b, padded_ldb);
    }
    amp_dnnl_mems mems = {0};
    amp_status s = gemm_run(plan, &run, arena, &mems);
    amp_dnnl_mems_free(&mems);
    return s;
}

static amp_status gemm_core(const amp_gemm_desc *d);

/* The dtypes oneDNN refused: every non-f32 operand is widened into a dense f32 copy in the
 * thread's WIDEN arena, the f32 GEMM runs, and C is rounded back. A B that the f32 GEMM would
 * copy again to a padded stride (gemm_padded_ldb) is widened at that stride directly. */
static amp_status gemm_widened(const amp_gemm_desc *d) {
    amp_gemm_desc w = *d;
    int64_t a_rows = d->trans_a ? d->k : d->m, a_cols = d->trans_a ? d->m : d->k;
    int64_t b_rows = d->trans_b ? d->n : d->k, b_cols = d->trans_b ? d->k : d->n;
    int64_t b_ld = b_cols;
    if (d->b_dtype != AMP_F32) {
        amp_gemm_desc dense = *d;
        dense.b_dtype = AMP_F32, dense.ldb = b_cols;
        int64_t padded = gemm_padded_ldb(&dense);
        if (padded) b_ld = padded;
    }
    size_t a_nbytes = d->a_dtype != AMP_F32 ? amp_dnnl_f32_nbytes(a_rows * a_cols) : 0;
    size_t b_nbytes = d->b_dtype != AMP_F32 ? amp_dnnl_f32_nbytes(b_rows * b_ld) : 0;
    size_t c_nbytes = d->c_dtype != AMP_F32 ? amp_dnnl_f32_nbytes(d->m * d->n) : 0;
    char *arena = NULL;
    AMP_TRY(amp_dnnl_arena(AMP_DNNL_ARENA_WIDEN, a_nbytes + b_nbytes + c_nbytes, (void **)&arena));
    float *a32 = (float *)arena, *b32 = (float *)(arena + a_nbytes);
    float *c32 = (float *)(arena + a_nbytes + b_nbytes);
    if (a_nbytes) {
        amp_dnnl_widen(a32, a_cols, d->a, d->a_dtype, a_rows, a_cols, d->lda);
        w.a = a32, w.a_dtype = AMP_F32, w.lda = a_cols;
    }
    if (b_nbytes) {
        amp_dnnl_widen(b32, b_ld, d->b, d->b_dtype, b_rows, b_cols, d->ldb);
        w.b = b32, w.b_dtype = AMP_F32, w.ldb = b_ld;
    }
    if (c_nbytes) {
        /* Old C is read only when beta != 0. */
        if (d->beta != 0.0f) amp_dnnl_widen(c32, d->n, d->c, d->c_dtype, d->m, d->n, d->ldc);
        w.c = c32, w.c_dtype = AMP_F32, w.ldc = d->n;
    }
    AMP_TRY(gemm_core(&w));
    if (c_nbytes) amp_dnnl_narrow(d->c, d->c_dtype, d->m, d->n, d->ldc, c32);
    return AMP_OK;
}

/* How many products d asks for, and product i of them as a descriptor of one. */
static int64_t gemm_count(const amp_gemm_desc *d) { return d->batch > 1 ? d->batch : 1; }

static amp_gemm_desc gemm_slice(const amp_gemm_desc *d, int64_t i) {
    amp_gemm_desc one = *d;
    one.batch = 0;
    if (d->batch > 1) {
        one.a = (const char *)d->a + i * d->stride_a * (int64_t)amp_dtype_size(d->a_dtype);
        one.b = (const char *)d->b + i * d->stride_b * (int64_t)amp_dtype_size(d->b_dtype);
        one.c = (char *)d->c + i * d->stride_c * (int64_t)amp_dtype_size(d->c_dtype);
        if (d->aux) one.aux = (char *)d->aux + i * d->stride_c * (int64_t)amp_dtype_size(d->c_dtype);
    }
    return one;
}

/* k == 0: the product is empty, C = beta * C + bias (oneDNN rejects a zero-sized K). */
static amp_status gemm_empty_k(const amp_gemm_desc *d) {
    for (int64_t i = 0; i < d->m; i++)
        for (int64_t j = 0; j < d->n; j++) {
            int64_t at = i * d->ldc + j;
            float v = d->beta != 0.0f ? d->beta * amp_load_f32(d->c, d->c_dtype, at) : 0.0f;
            amp_store_f32(d->c, d->c_dtype, at, d->bias ? v + d->bias[j] : v);
        }
    return AMP_OK;
}

static amp_status gemm_validate(const amp_gemm_desc *d) {
    if (d->m < 0 || d->n < 0 || d->k < 0)
        return amp_fail(AMP_ERR_SHAPE, "amp_cpu_gemm: m=%lld n=%lld k=%lld must not be negative",
                        (long long)d->m, (long long)d->n, (long long)d->k);
    struct { int64_t ld, want; const char *name; } lds[3] = {
        {d->lda, d->trans_a ? d->m : d->k, "lda"},
        {d->ldb, d->trans_b ? d->k : d->n, "ldb"},
        {d->ldc, d->n, "ldc"},
    };
    for (int i = 0; i < 3; i++)
        if (lds[i].ld < (lds[i].want > 1 ? lds[i].want : 1))
            return amp_fail(AMP_ERR_SHAPE, "amp_cpu_gemm: %s=%lld is less than the row length %lld",
                            lds[i].name, (long long)lds[i].ld, (long long)lds[i].want);
    dnnl_data_type_t unused = dnnl_f32;
    AMP_TRY(amp_dnnl_dtype(d->a_dtype, "amp_cpu_gemm: a", &unused));
    AMP_TRY(amp_dnnl_dtype(d->b_dtype, "amp_cpu_gemm: b", &unused));
    AMP_TRY(amp_dnnl_dtype(d->c_dtype, "amp_cpu_gemm: c", &unused));
    return AMP_OK;
}

/* C = epilogue(C) in place, row by row (kernels/math/relu.h); a half C on its bits, which the
 * compiler vectorises (the per-element load and store through f32 took 3 % of an O1 step). */
static void gemm_relu_pass(const amp_gemm_desc *d) {
    if (d->c_dtype == AMP_F32) {
#pragma omp parallel for schedule(static) if (d->m * d->n >= AMP_CPU_PARALLEL_MIN)
        for (int64_t i = 0; i < d->m; i++) {
            float *row = (float *)d->c + i * d->ldc;
            for (int64_t j = 0; j < d->n; j++) row[j] = amp_relu_epilogue(row[j]);
        }
        return;
    }
    uint16_t inf_bits = d->c_dtype == AMP_F16 ? 0x7c00 : 0x7f80;
#pragma omp parallel for schedule(static) if (d->m * d->n >= AMP_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < d->m; i++) {
        uint16_t *row = (uint16_t *)d->c + i * d->ldc;
        for (int64_t j = 0; j < d->n; j++) row[j] = amp_relu_epilogue_half_bits(row[j], inf_bits);
    }
}

/* C = GELU(aux), the unary entry's kernel (the same bits as amp_gelu), over the dense rows at
 * once or row by row. */
static amp_status gemm_gelu_pass(amp_device_ctx *dev, const amp_gemm_desc *d) {
    amp_unary_op op = d->epilogue == AMP_GEMM_EPILOGUE_GELU_TANH ? AMP_UNARY_GELU_TANH
                                                                  : AMP_UNARY_GELU_ERF;
    if (d->ldc == d->n) return amp_cpu_unary(dev, op, d->c_dtype, d->m * d->n, d->aux, 1.0f, d->c);
    size_t es = amp_dtype_size(d->c_dtype);
    for (int64_t i = 0; i < d->m; i++)
        AMP_TRY(amp_cpu_unary(dev, op, d->c_dtype, d->n, (const char *)d->aux + i * d->ldc * es,
                              1.0f, (char *)d->c + i * d->ldc * es));
    return AMP_OK;
}

/* bias_grad[i] = sum over p of op(A)[i, p] = sum over the k stored rows of A's column i (trans_a,
 * checked): sum_rows when A is dense, else a double sum per column in row order. */
static amp_status gemm_bias_grad(amp_device_ctx *dev, const amp_gemm_desc *d) {
    if (d->lda == d->m) return amp_cpu_sum_rows(dev, d->a_dtype, d->k, d->m, d->a, d->bias_grad);
#pragma omp parallel for schedule(static) if (d->m * d->k >= AMP_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < d->m; i++) {
        double s = 0.0;
        for (int64_t p = 0; p < d->k; p++)
            s += (double)amp_load_f32(d->a, d->a_dtype, p * d->lda + i);
        d->bias_grad[i] = (float)s;
    }
    return AMP_OK;
}

amp_status amp_cpu_gemm(amp_device_ctx *dev, const amp_gemm_desc *d) {
    AMP_CHECK_ARG(d);
    AMP_TRY(gemm_validate(d));
    AMP_TRY(amp_backend_check_gemm_fused("amp_cpu_gemm", d));
    if (d->bias_grad && d->m > 0) {
        if (d->k > 0) AMP_CHECK_ARG(d->a);
        AMP_TRY(gemm_bias_grad(dev, d));
    }
    if (d->m == 0 || d->n == 0) return AMP_OK;
    AMP_CHECK_ARG(d->c);
    /* A half C's bias is rounded to C's dtype first (core/backend.h), as cuBLASLt takes it. */
    amp_gemm_desc h = *d;
    float *rounded = NULL;
    if (h.bias && h.c_dtype != AMP_F32) {
        if (!(rounded = malloc((size_t)h.n * sizeof *rounded)))
            return amp_fail(AMP_ERR_OOM, "amp_cpu_gemm: out of host memory for the bias");
        for (int64_t j = 0; j < h.n; j++)
            rounded[j] = h.c_dtype == AMP_F16
                             ? amp_f16_bits_to_f32(amp_f32_to_f16_bits(h.bias[j]))
                             : amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(h.bias[j]));
        h.bias = rounded;
    }
    /* A GELU epilogue: the GEMM writes the pre-activation to aux, the pass reads it into C. */
    bool gelu = amp_gemm_epilogue_is_gelu(h.epilogue);
    amp_gemm_desc pre = h;
    if (gelu) pre.c = h.aux, pre.aux = NULL;
    amp_status s = gemm_core(&pre);
    for (int64_t i = 0; s == AMP_OK && h.epilogue != AMP_GEMM_EPILOGUE_NONE && i < gemm_count(&h);
         i++) {
        amp_gemm_desc one = gemm_slice(&h, i);
        if (gelu) s = gemm_gelu_pass(dev, &one);
        else gemm_relu_pass(&one);
    }
    free(rounded);
    return s;
}

/* C = alpha op(A) op(B) + beta C (+ bias): everything but the fused parts; d validated, C set.
 * A batch runs as one oneDNN primitive with a batch dim; where oneDNN lacks the dtypes (the
 * widened route) or k is 0, product by product. */
static amp_status gemm_core(const amp_gemm_desc *d) {
    if (d->k == 0) {
        for (int64_t i = 0; i < gemm_count(d); i++) {
            amp_gemm_desc one = gemm_slice(d, i);
            AMP_TRY(gemm_empty_k(&one));
        }
        return AMP_OK;
    }
    AMP_CHECK_ARG(d->a);
    AMP_CHECK_ARG(d->b);

    gemm_key key;
    memset(&key, 0, sizeof key);
    key.m = d->m, key.n = d->n, key.k = d->k;
    int64_t padded_ldb = gemm_padded_ldb(d);
    key.lda = d->lda, key.ldb = padded_ldb ? padded_ldb : d->ldb, key.ldc = d->ldc;
    key.alpha = d->alpha, key.beta = d->beta;
    key.a_dtype = d->a_dtype, key.b_dtype = d->b_dtype, key.c_dtype = d->c_dtype;
    key.trans_a = d->trans_a, key.trans_b = d->trans_b, key.has_bias = d->bias != NULL;
    key.n_threads = amp_dnnl_threads();
    key.batch = d->batch > 1 ? d->batch : 1;
    if (key.batch > 1)
        key.stride_a = d->stride_a, key.stride_b = d->stride_b, key.stride_c = d->stride_c;

    gemm_plan *plan = NULL;
    amp_dnnl_cache_ref *ref = NULL;
    amp_status s = amp_dnnl_cache_get(&key, sizeof key, gemm_plan_build, gemm_plan_destroy,
                                      (void **)&plan, &ref);
    if (s != AMP_OK)
        return amp_fail_context(s, "amp_cpu_gemm(m=%lld n=%lld k=%lld, %s x %s -> %s)",
                                (long long)d->m, (long long)d->n, (long long)d->k,
                                amp_dtype_name(d->a_dtype), amp_dtype_name(d->b_dtype),
                                amp_dtype_name(d->c_dtype));
    if (plan->prim) {
        s = gemm_run_plan(plan, d, padded_ldb);
    } else if (d->batch > 1) {
        for (int64_t i = 0; s == AMP_OK && i < d->batch; i++) {
            amp_gemm_desc one = gemm_slice(d, i);
            s = gemm_widened(&one);
        }
    } else {
        s = gemm_widened(d);
    }
    amp_dnnl_cache_put(ref);
    return s;
}
