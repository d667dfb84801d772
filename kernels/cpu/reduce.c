/* CPU backend: sum (to a backend scalar), sum over rows (bias gradients), and sum or max over one
 * dim (reduce_dim) with max's backward (scatter_dim). (The loss scaler's sum of squares is
 * sum_squares_multi, unscale_multi.c.)
 *
 * Determinism: the data is cut into chunks whose bounds depend only on the shape; each chunk is
 * summed in double in a fixed order (8 interleaved lanes, then a fixed tree), and the chunk sums
 * are added in index order. Threads only decide who computes which chunk, so the bits do not
 * depend on the thread count. Double accumulators keep the sum of up to billions of f32 values
 * accurate to f32 rounding, where PyTorch's cascade sum in f32 is close but not bit-identical. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/load_store.h"
#include "kernels/math/strided.h"

/* Chunk sums computed per parallel region: they live on the caller's stack (4 KiB). */
#define SUM_GROUP 512
/* sum_rows works on column blocks this wide, the fold's (amp_cpu_fold_chunks). */
#define ROWS_COL_BLOCK AMP_CPU_FOLD_BLOCK

/* Sum of x[0, n) in double: 8 independent lanes (which the compiler vectorises), combined in a
 * fixed tree, then the tail. */
static inline double sum_f32_array(const float *x, int64_t n) {
    double lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += (double)x[i + j];
    double s =
        ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; i++) s += (double)x[i];
    return s;
}

/* The chunked sum of the file comment over x[0, n) (n >= 0, x checked by the caller). */
static double chunked_sum(amp_dtype dt, int64_t n, const void *x) {
    int64_t n_chunks = (n + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK;
    double total = 0.0;
    for (int64_t g0 = 0; g0 < n_chunks; g0 += SUM_GROUP) {
        int64_t gn = n_chunks - g0 < SUM_GROUP ? n_chunks - g0 : SUM_GROUP;
        double part[SUM_GROUP];
#pragma omp parallel for schedule(static) if (n >= AMP_CPU_PARALLEL_MIN)
        for (int64_t c = 0; c < gn; c++) {
            float buf[AMP_CPU_REDUCE_CHUNK];
            int64_t i0 = (g0 + c) * AMP_CPU_REDUCE_CHUNK;
            int64_t len = n - i0 < AMP_CPU_REDUCE_CHUNK ? n - i0 : AMP_CPU_REDUCE_CHUNK;
            const float *v = tile_in(x, dt, i0, len, buf);
            part[c] = sum_f32_array(v, len);
        }
        for (int64_t c = 0; c < gn; c++) total += part[c];
    }
    return total;
}

amp_status amp_cpu_sum(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *x, float alpha,
                       float *out) {
    AMP_TRY(amp_backend_check_float(__func__, dt));
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "amp_cpu_sum: n = %lld < 0", (long long)n);
    AMP_CHECK_ARG(out);
    if (n > 0) AMP_CHECK_ARG(x);
    *out = (float)((double)alpha * chunked_sum(dt, n, x));
    return AMP_OK;
}

/* Adds rows [r0, r1) of columns [j0, j0 + w) into acc (w <= ROWS_COL_BLOCK), each column in
 * row order; built per ISA. The rows are widened first where x is a half type (at most
 * AMP_CPU_REDUCE_CHUNK floats: chunk_rows x w), then summed ROWS_REG_BLOCK columns at a time,
 * their double sums held in registers across the rows (eight AVX-512 registers): a sum kept in
 * memory was loaded and stored again for every row, and a half row widened by a call of the
 * cast entry, which held a linear layer's bias gradient to about 10 GB/s (bench/RESULTS.md, "bias
 * gradients in registers"). */
#define ROWS_REG_BLOCK 64
typedef double rows_v8d __attribute__((vector_size(64)));
typedef float rows_v8f __attribute__((vector_size(32)));

/* *s += the eight floats at p as doubles (a pointer, not a vector return, which GCC's
 * per-clone ABI warns of). */
static inline __attribute__((always_inline)) void rows_add8(rows_v8d *s, const float *p) {
    rows_v8f f;
    memcpy(&f, p, sizeof f);
    *s += __builtin_convertvector(f, rows_v8d);
}

AMP_CPU_CLONED(static, void, sum_rows_block, (amp_dtype dt, int64_t cols, const void *x, int64_t r0,
               int64_t r1, int64_t j0, int64_t w, double *acc),
               (dt, cols, x, r0, r1, j0, w, acc)) {
    float buf[AMP_CPU_REDUCE_CHUNK];
    const float *rows[AMP_CPU_REDUCE_CHUNK];
    for (int64_t r = r0; r < r1; r++)
        rows[r - r0] = tile_in(x, dt, r * cols + j0, w, buf + (r - r0) * w);
    int64_t n = r1 - r0, jb = 0;
    for (; jb + ROWS_REG_BLOCK <= w; jb += ROWS_REG_BLOCK) {
        rows_v8d s[ROWS_REG_BLOCK / 8] = {0};
        for (int64_t r = 0; r < n; r++) {
#pragma GCC unroll 8
            for (int v = 0; v < ROWS_REG_BLOCK / 8; v++) rows_add8(&s[v], rows[r] + jb + 8 * v);
        }
        memcpy(acc + jb, s, sizeof s);
    }
    for (int64_t j = jb; j < w; j++) acc[j] = 0.0;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = jb; j < w; j++) acc[j] += (double)rows[r][j];
}

AMP_CPU_CLONED(, void, amp_cpu_fold_chunks, (const double *partial, int64_t n_chunks,
               int64_t stride, int64_t j0, int64_t w, float *out),
               (partial, n_chunks, stride, j0, w, out)) {
    double s[AMP_CPU_FOLD_BLOCK] = {0};
    for (int64_t c = 0; c < n_chunks; c++)
        for (int64_t j = 0; j < w; j++) s[j] += partial[c * stride + j0 + j];
    for (int64_t j = 0; j < w; j++) out[j0 + j] = (float)s[j];
}

amp_status amp_cpu_sum_rows(amp_device_ctx *dev, amp_dtype dt, int64_t rows, int64_t cols,
                            const void *x, float *out) {
    AMP_TRY(amp_backend_check_float(__func__, dt));
    if (rows < 0 || cols < 0)
        return amp_fail(AMP_ERR_SHAPE, "amp_cpu_sum_rows: shape [%lld, %lld] has a negative size",
                        (long long)rows, (long long)cols);
    if (cols == 0) return AMP_OK;
    AMP_CHECK_ARG(out);
    if (rows > 0) AMP_CHECK_ARG(x);
    /* Row chunks of about AMP_CPU_REDUCE_CHUNK elements of a column block; each (chunk, block)
     * writes its column sums into partial, then chunks are added in order per column. */
    int64_t block_w = cols < ROWS_COL_BLOCK ? cols : ROWS_COL_BLOCK;
    int64_t chunk_rows = AMP_CPU_REDUCE_CHUNK / block_w;
    int64_t n_chunks = rows == 0 ? 1 : (rows + chunk_rows - 1) / chunk_rows;
    int64_t n_blocks = (cols + ROWS_COL_BLOCK - 1) / ROWS_COL_BLOCK;
    double *partial = malloc((size_t)n_chunks * (size_t)cols * sizeof *partial);
    if (!partial)
        return amp_fail(AMP_ERR_OOM, "amp_cpu_sum_rows: out of memory for %lld x %lld partial sums",
                        (long long)n_chunks, (long long)cols);
    int parallel = rows * cols >= AMP_CPU_PARALLEL_MIN;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t task = 0; task < n_chunks * n_blocks; task++) {
        int64_t c = task / n_blocks, j0 = (task % n_blocks) * ROWS_COL_BLOCK;
        int64_t r0 = c * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
        int64_t w = cols - j0 < ROWS_COL_BLOCK ? cols - j0 : ROWS_COL_BLOCK;
        sum_rows_block(dt, cols, x, r0, r1, j0, w, partial + c * cols + j0);
    }
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t b = 0; b < n_blocks; b++) {
        int64_t j0 = b * ROWS_COL_BLOCK, left = cols - j0;
        amp_cpu_fold_chunks(partial, n_chunks, cols, j0,
                            left < ROWS_COL_BLOCK ? left : ROWS_COL_BLOCK, out);
    }
    free(partial);
    return AMP_OK;
}

/* reduce_dim: outputs in blocks of REDUCE_DIM_BLOCK consecutive i of one o; each output
 * accumulates over j = 0, 1, ... in that order (double for sums), as the CUDA kernel's one
 * thread per output does, so both give the same bits; the block keeps the reads of each j
 * contiguous. */
#define REDUCE_DIM_BLOCK 64

amp_status amp_cpu_reduce_dim(amp_device_ctx *dev, amp_reduce_op op, amp_dtype dt, int64_t outer,
                              int64_t n, int64_t inner, const void *x, float alpha, void *y,
                              int32_t *idx) {
    AMP_TRY(amp_backend_check_reduce_dim(__func__, op, dt, outer, n, inner));
    if (outer == 0 || inner == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    int64_t blocks = (inner + REDUCE_DIM_BLOCK - 1) / REDUCE_DIM_BLOCK;
#pragma omp parallel for schedule(static) if (outer * n * inner >= AMP_CPU_PARALLEL_MIN)
    for (int64_t ob = 0; ob < outer * blocks; ob++) {
        int64_t o = ob / blocks, i0 = (ob % blocks) * REDUCE_DIM_BLOCK;
        int64_t len = inner - i0 < REDUCE_DIM_BLOCK ? inner - i0 : REDUCE_DIM_BLOCK;
        int64_t base = o * n * inner + i0;
        double sum[REDUCE_DIM_BLOCK];
        float best[REDUCE_DIM_BLOCK];
        int32_t at[REDUCE_DIM_BLOCK];
        for (int64_t i = 0; i < len; i++) {
            sum[i] = 0.0;
            best[i] = amp_load_f32(x, dt, base + i);
            at[i] = 0;
        }
        for (int64_t j = 0; j < n; j++) {
            int64_t row = base + j * inner;
            if (op == AMP_REDUCE_SUM) {
                for (int64_t i = 0; i < len; i++) sum[i] += (double)amp_load_f32(x, dt, row + i);
            } else {
                for (int64_t i = 0; i < len; i++) {
                    float v = amp_load_f32(x, dt, row + i);
                    if (amp_max_takes(v, best[i])) {
                        best[i] = v;
                        at[i] = (int32_t)j;
                    }
                }
            }
        }
        for (int64_t i = 0; i < len; i++) {
            int64_t out = o * inner + i0 + i;
            if (op == AMP_REDUCE_SUM) {
                amp_store_f32(y, dt, out, (float)((double)alpha * sum[i]));
            } else {
                amp_store_f32(y, dt, out, best[i]);
                if (idx) idx[out] = at[i];
            }
        }
    }
    return AMP_OK;
}

amp_status amp_cpu_scatter_dim(amp_device_ctx *dev, amp_dtype dt, int64_t outer, int64_t n,
                               int64_t inner, const int32_t *idx, const void *dy, void *dx) {
    AMP_TRY(amp_backend_check_reduce_dim(__func__, AMP_REDUCE_SUM, dt, outer, n, inner));
    if (outer == 0 || inner == 0) return AMP_OK;
    AMP_CHECK_ARG(idx);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(dx);
#pragma omp parallel for schedule(static) if (outer * n * inner >= AMP_CPU_PARALLEL_MIN)
    for (int64_t oj = 0; oj < outer * n; oj++) {
        int64_t o = oj / n, j = oj % n;
        for (int64_t i = 0; i < inner; i++) {
            int64_t src = o * inner + i;
            float v = idx[src] == j ? amp_load_f32(dy, dt, src) : 0.0f;
            amp_store_f32(dx, dt, oj * inner + i, v);
        }
    }
    return AMP_OK;
}
