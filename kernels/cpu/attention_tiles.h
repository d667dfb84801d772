/* What the CPU attention kernels (attention.c, attention_bwd.c) share: the tile sizes, the
 * operands, the thread's tiles in its arena, the parallel loop over tasks, the store of f32
 * rows and the padding mask's check (rows are read through cpu_tile.h's tile_in). */
#ifndef AMP_KERNELS_CPU_ATTENTION_TILES_H
#define AMP_KERNELS_CPU_ATTENTION_TILES_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/backend.h"
#include "core/error.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/math/attention.h"

/* Query rows and keys per tile: bench/RESULTS.md ("fused causal attention on the CPU") has the
 * sweep. */
#define ATTN_BR 64
#define ATTN_BC 128

static inline int64_t attn_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* Whether the tile products are bf16 ones (attention_bf16.c): bf16 attention on a CPU with
 * AVX512-BF16. Else oneDNN's f32 sgemm. */
static inline bool attn_bf16_products(const amp_attn_desc *d) {
    return d->dt == AMP_BF16 && amp_cpu_avx512_bf16_kernels();
}

/* An operand of attn_gemm: f32 values, or bf16 storage that the bf16 products read as it is,
 * with the stride between its rows. */
typedef struct attn_opnd {
    const void *p;
    bool half;
    int64_t ld;
} attn_opnd;

static inline attn_opnd attn_f32(const float *p, int64_t ld) { return (attn_opnd){p, false, ld}; }

/* Rows [i0, i0 + n) of head row bh of part p (amp_attn_row) as f32 rows: the tensor
 * itself when f32 (its own row stride: the packed layout's rows are read in place; copying them
 * into buf first was slower, bench/RESULTS.md "the attention reads q, k and v where c_attn
 * wrote them"), else widened (cpu_tile.h) into buf, dense. */
static inline attn_opnd attn_rows_f32(const amp_attn_desc *d, const void *x, amp_attn_part p,
                                      int64_t bh, int64_t i0, int64_t n, float *buf) {
    int64_t at = amp_attn_row(d, p, bh, i0), ld = amp_attn_ld(d, p), dim = d->head_dim;
    if (d->dt == AMP_F32) return attn_f32((const float *)x + at, ld);
    if (ld == dim) {
        amp_cpu_widen_tile(buf, (const uint16_t *)x + at, d->dt, n * dim);
    } else {
        for (int64_t r = 0; r < n; r++)
            amp_cpu_widen_tile(buf + r * dim, (const uint16_t *)x + at + r * ld, d->dt, dim);
    }
    return attn_f32(buf, dim);
}

/* The same rows as an operand of attn_gemm: where the products are bf16, the tensor's bf16
 * storage itself (widening it to f32 for the packing to round back cost an eighth of a GPT
 * layer's attention: bench/RESULTS.md, "bias gradients in registers"), else attn_rows_f32. */
static inline attn_opnd attn_in(const amp_attn_desc *d, const void *x, amp_attn_part p,
                                int64_t bh, int64_t i0, int64_t n, float *buf) {
    if (attn_bf16_products(d))
        return (attn_opnd){(const uint16_t *)x + amp_attn_row(d, p, bh, i0), true,
                           amp_attn_ld(d, p)};
    return attn_rows_f32(d, x, p, bh, i0, n, buf);
}

/* A tile product, C = alpha op(A) op(B) + beta C (dnnl_sgemm's arguments, the operands' row
 * strides their own): in bf16 products (attention_bf16.c: the q, k, v and dO tiles hold bf16
 * values, P and dS are rounded to bf16 as FlashAttention's tensor-core products round them)
 * where attn_bf16_products, else oneDNN's f32 sgemm on f32 operands. False when it failed. */
static inline bool attn_gemm(const amp_attn_desc *d, char ta, char tb, int64_t m, int64_t n,
                             int64_t k, float alpha, attn_opnd a, attn_opnd b, float beta, float *c,
                             int64_t ldc) {
    if (attn_bf16_products(d))
        return amp_cpu_attn_gemm_bf16(ta, tb, m, n, k, alpha, a.p, a.half, a.ld, b.p, b.half, b.ld,
                                      beta, c, ldc);
    if (a.half || b.half) return false; /* attn_in widens every operand the sgemm takes */
    return dnnl_sgemm(ta, tb, m, n, k, alpha, (const float *)a.p, a.ld, (const float *)b.p, b.ld,
                      beta, c, ldc) == dnnl_success;
}

typedef struct attn_operands {
    const void *q, *k, *v, *o, *dout;
    const int32_t *kv_len;
    float *lse, *delta;
    void *out, *dq, *dk, *dv;
} attn_operands;

/* The thread's tiles (f32), carved from its widening arena. */
typedef struct attn_tiles {
    float *q, *k, *v, *s, *acc, *m, *l; /* forward */
    float *dout, *dp, *dk, *dv, *dq;    /* backward (dq: a whole head's rows) */
    double *dk_sum, *dv_sum;            /* grouped-query backward: a key/value head's dk and dv
                                           over its group (kv_seq rows each), NULL without */
} attn_tiles;

/* The query heads that share a key/value head. */
static inline int64_t attn_group(const amp_attn_desc *d) {
    return d->heads / amp_attn_kv_heads(d);
}

static inline int64_t attn_tiles_floats(const amp_attn_desc *d) {
    int64_t dim = d->head_dim, sums = attn_group(d) > 1 ? 4 * amp_attn_kv_seq(d) * dim + 32 : 0;
    return 4 * ATTN_BR * dim + 4 * ATTN_BC * dim + 2 * ATTN_BR * ATTN_BC + 2 * ATTN_BR +
           d->seq * dim + 64 * 12 + sums;
}

static inline amp_status attn_tiles_get(const amp_attn_desc *d, attn_tiles *t) {
    float *p = NULL;
    AMP_TRY(amp_dnnl_arena(AMP_DNNL_ARENA_WIDEN, (size_t)attn_tiles_floats(d) * sizeof *p,
                           (void **)&p));
    int64_t dim = d->head_dim;
    /* Each piece starts on a 64-byte boundary. */
#define ATTN_CARVE(field, n)                                                                       \
    do {                                                                                           \
        t->field = p;                                                                              \
        p += ((n) + 15) / 16 * 16;                                                                 \
    } while (0)
    ATTN_CARVE(q, ATTN_BR * dim);
    ATTN_CARVE(k, ATTN_BC * dim);
    ATTN_CARVE(v, ATTN_BC * dim);
    ATTN_CARVE(s, ATTN_BR * ATTN_BC);
    ATTN_CARVE(acc, ATTN_BR * dim);
    ATTN_CARVE(m, ATTN_BR);
    ATTN_CARVE(l, ATTN_BR);
    ATTN_CARVE(dout, ATTN_BR * dim);
    ATTN_CARVE(dp, ATTN_BR * ATTN_BC);
    ATTN_CARVE(dk, ATTN_BC * dim);
    ATTN_CARVE(dv, ATTN_BC * dim);
    ATTN_CARVE(dq, d->seq * dim);
    t->dk_sum = t->dv_sum = NULL;
    if (attn_group(d) > 1) { /* two f32 slots a double, on 64-byte boundaries as the rest */
        t->dk_sum = (double *)p;
        p += (2 * amp_attn_kv_seq(d) * dim + 15) / 16 * 16;
        t->dv_sum = (double *)p;
    }
#undef ATTN_CARVE
    return AMP_OK;
}

/* Lanes of the row reductions below: explicit, so that they vectorise without reassociation. */
#define ATTN_LANES 16
/* The max of s[0, n), n >= 1; *nan set when a NaN is among them (the max skips it). */
static inline __attribute__((always_inline)) float attn_row_max(const float *s, int64_t n,
                                                                 bool *nan) {
    float lane[ATTN_LANES];
    int odd = 0;
    for (int l = 0; l < ATTN_LANES; l++) lane[l] = -INFINITY;
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) {
            lane[l] = s[j + l] > lane[l] ? s[j + l] : lane[l];
            odd |= s[j + l] != s[j + l];
        }
    for (; j < n; j++) {
        lane[0] = s[j] > lane[0] ? s[j] : lane[0];
        odd |= s[j] != s[j];
    }
    float m = lane[0];
    for (int l = 1; l < ATTN_LANES; l++) m = lane[l] > m ? lane[l] : m;
    *nan = odd;
    return m;
}

/* s[j] = e^(s[j] - m) for j < n, m the finite max of a row without NaN (vector_exp.h); returns
 * their sum. */
static inline __attribute__((always_inline)) float attn_row_exp(float *s, int64_t n, float m) {
    amp_cpu_exp_shifted(s, n, m, s);
    float lane[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) lane[l] += s[j + l];
    for (; j < n; j++) lane[0] += s[j];
    float sum = 0.0f;
    for (int l = 0; l < ATTN_LANES; l++) sum += lane[l];
    return sum;
}

/* The same for any row (NaN and infinities as amp_expf has them), one element at a time. */
static inline float attn_row_exp_scalar(float *s, int64_t n, float m) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) sum += s[j] = amp_expf(s[j] - m);
    return sum;
}

/* Rows [i0, i0 + n) of head row bh of part p (dq, dk, dv or o), dtype d->dt, from n dense f32
 * rows of src, half types rounded to nearest even (cpu_tile.h; serial inside the kernels'
 * parallel tasks). */
static inline void attn_store_rows(const amp_attn_desc *d, void *y, amp_attn_part p, int64_t bh,
                                   int64_t i0, int64_t n, const float *src) {
    int64_t at = amp_attn_row(d, p, bh, i0), ld = amp_attn_ld(d, p), dim = d->head_dim;
    int64_t rows = ld == dim ? 1 : n, len = ld == dim ? n * dim : dim; /* dense: one run */
    for (int64_t r = 0; r < rows; r++) {
        if (d->dt == AMP_F32)
            memcpy((float *)y + at + r * ld, src + r * dim, (size_t)len * sizeof *src);
        else amp_cpu_round_tile((uint16_t *)y + at + r * ld, d->dt, src + r * dim, len);
    }
}

/* task(d, x, i, tiles) for every i < tasks, in parallel (dynamic: causal tasks differ in work),
 * each with its thread's tiles; fails naming fn when a task's product or arena failed. Tasks
 * i .. i + per_batch - 1 are one batch's heads (or key/value heads). */
typedef bool (*attn_task)(const amp_attn_desc *d, const attn_operands *x, int64_t i,
                          attn_tiles *t);
static inline amp_status attn_run(const char *fn, const amp_attn_desc *d, const attn_operands *x,
                                  int64_t tasks, int64_t per_batch, attn_task task) {
    int failed = 0;
    /* Packed, a head's rows are head_dim-long pieces of rows shared with the other heads: a
     * thread that takes a batch's heads one after another (consecutive tasks) finds their rows in
     * its cache and TLB (one GPT layer's backward went from 10 % slower than the dense layout to
     * 2-6 %: bench/RESULTS.md, "the attention reads q, k and v where c_attn wrote them"), where
     * there are enough tasks to balance. */
    bool by_batch = d->packed && per_batch > 0 && tasks / per_batch >= 4 * amp_dnnl_threads();
    int chunk = by_batch ? (int)per_batch : 1;
#pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t i = 0; i < tasks; i++) {
        attn_tiles t;
        if (attn_tiles_get(d, &t) != AMP_OK || !task(d, x, i, &t)) {
#pragma omp atomic write
            failed = 1;
        }
    }
    if (failed)
        return amp_fail(AMP_ERR_BACKEND, "%s: a tile's product (oneDNN's sgemm, or the bf16 "
                        "kernel's scratch) or its %lld-float arena failed", fn,
                        (long long)attn_tiles_floats(d));
    return AMP_OK;
}

/* The number of keys batch (bh / heads) may see. */
static inline int64_t attn_kv_len(const amp_attn_desc *d, const int32_t *kv_len, int64_t bh) {
    return kv_len ? kv_len[bh / d->heads] : amp_attn_kv_seq(d);
}

static inline amp_status attn_check_kv_len(const char *fn, const amp_attn_desc *d,
                                           const int32_t *kv_len) {
    for (int64_t b = 0; kv_len && b < d->batch; b++)
        if (kv_len[b] < 0 || kv_len[b] > amp_attn_kv_seq(d))
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: kv_len[%lld] = %d is outside [0, %lld]", fn,
                            (long long)b, (int)kv_len[b], (long long)amp_attn_kv_seq(d));
    return AMP_OK;
}

#endif
