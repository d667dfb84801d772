/* Sums on the device: the CUDA side of the table's sum (alpha * sum(x) into one f32 backend
 * scalar), sum_rows (column sums of a [rows, cols] matrix: bias gradients), and reduce_dim (sum
 * or max over the middle dim of [outer, n, inner]) with max's backward, scatter_dim.
 *
 * Both are deterministic without float atomics: every order is fixed by the shape.
 *  - sum: the two-pass scheme of block_reduce.cuh (per-thread grid-stride sums in double, block
 *    butterflies, one double partial per block, one final block), then out = (float)(alpha * s),
 *    rounded once as the CPU backend's (float)((double)alpha * total).
 *  - sum_rows: pass 1 cuts the rows into chunks of chunk_rows (from the shape only); thread j of
 *    chunk c sums column j over the chunk's rows in row order in double, reading one row of the
 *    block's columns per step (coalesced), into partials[c][j]; pass 2 adds each column's chunk
 *    partials in chunk order and rounds to f32 once. The CPU backend does the same with other
 *    chunk bounds, so the bits may differ from it within the final f32 rounding of an accurate
 *    double sum, as for sum.
 * Outputs are overwritten; rows = 0 writes zeros (a sum over nothing). The partials come from the
 * caching allocator and go back to it right after the launches: the context's one stream orders
 * their reuse. Launchers take an explicit stream and check each launch; the entries validate
 * their arguments with the CPU backend's statuses and messages and run on dev->stream. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/strided.h"

/* Threads per block of sum_rows: one column each, so a warp reads 32 consecutive elements of a
 * row (128 bytes of f32). */
#define ROWS_BLOCK 256
/* sum_rows' pass 1 aims at about this many threads (4096 x 256 = AMP_CUDA_MAX_BLOCKS x
 * AMP_CUDA_BLOCK): enough to fill every SM, few enough that the partials stay small. */
#define ROWS_TARGET_THREADS (1 << 20)
/* ... but each thread sums at least this many rows, so pass 2 reads at most 1/16 of the input. */
#define ROWS_MIN_CHUNK 16

/* One term of sum: x[i] widened to f32 (exactly), then to double. */
template <amp_dtype D>
struct sum_term {
    const void *x;
    __device__ double operator()(int64_t i) const { return (double)amp_load_f32(x, D, i); }
};

/* Pass 1 of sum_rows: grid (column blocks, row chunks). */
template <amp_dtype D>
static __global__ void sum_rows_partial_kernel(const void *x, int64_t rows, int64_t cols,
                                               int64_t chunk_rows, double *partials) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    int64_t r0 = (int64_t)blockIdx.y * chunk_rows;
    int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    double acc = 0.0;
    for (int64_t r = r0; r < r1; r++) acc += (double)amp_load_f32(x, D, r * cols + j);
    partials[(int64_t)blockIdx.y * cols + j] = acc;
}

/* Pass 2 of sum_rows: out[j] = the chunk partials of column j added in chunk order. */
static __global__ void sum_rows_final_kernel(const double *partials, int64_t n_chunks,
                                             int64_t cols, float *out) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += stride) {
        double s = 0.0;
        for (int64_t c = 0; c < n_chunks; c++) s += partials[c * cols + j];
        out[j] = (float)s;
    }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" int amp_cuda_sum_blocks(int64_t n) { return amp_red_blocks(n); }

template <amp_dtype D>
static void sum_partial_launch(const void *x, int64_t n, double *partials, int blocks,
                               cudaStream_t stream) {
    amp_red_partial_kernel<sum_term<D> ><<<blocks, AMP_RED_BLOCK, 0, stream>>>(sum_term<D>{x}, n,
                                                                               partials);
}

extern "C" amp_status amp_cuda_sum_launch(amp_dtype dt, int64_t n, const void *x, float alpha,
                                          float *out, double *partials, cudaStream_t stream) {
    int blocks = amp_red_blocks(n);
    switch (dt) {
    case AMP_F16: sum_partial_launch<AMP_F16>(x, n, partials, blocks, stream); break;
    case AMP_BF16: sum_partial_launch<AMP_BF16>(x, n, partials, blocks, stream); break;
    default: sum_partial_launch<AMP_F32>(x, n, partials, blocks, stream); break;
    }
    AMP_CUDA_LAUNCHED(stream);
    amp_red_final_kernel<<<1, AMP_RED_BLOCK, 0, stream>>>(partials, blocks, (double)alpha, 1.0,
                                                          out);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

/* The row chunking of sum_rows for a [rows, cols] input (rows >= 0, cols >= 1): chunk length
 * and count (0 chunks when rows = 0: pass 2 then writes zeros). */
extern "C" void amp_cuda_sum_rows_plan(int64_t rows, int64_t cols, int64_t *chunk_rows,
                                       int64_t *n_chunks) {
    int64_t col_threads = (cols + ROWS_BLOCK - 1) / ROWS_BLOCK * ROWS_BLOCK;
    int64_t max_chunks = ROWS_TARGET_THREADS / col_threads;
    if (max_chunks < 1) max_chunks = 1;
    int64_t len = (rows + max_chunks - 1) / max_chunks;
    *chunk_rows = len < ROWS_MIN_CHUNK ? ROWS_MIN_CHUNK : len;
    *n_chunks = (rows + *chunk_rows - 1) / *chunk_rows;
}

extern "C" amp_status amp_cuda_sum_rows_launch(amp_dtype dt, int64_t rows, int64_t cols,
                                               const void *x, float *out, double *partials,
                                               cudaStream_t stream) {
    int64_t chunk_rows, n_chunks;
    amp_cuda_sum_rows_plan(rows, cols, &chunk_rows, &n_chunks);
    if (n_chunks > 0) {
        /* n_chunks <= ROWS_TARGET_THREADS / ROWS_BLOCK = 4096, under grid.y's 65535. */
        dim3 grid((unsigned)((cols + ROWS_BLOCK - 1) / ROWS_BLOCK), (unsigned)n_chunks);
        switch (dt) {
        case AMP_F16:
            sum_rows_partial_kernel<AMP_F16><<<grid, ROWS_BLOCK, 0, stream>>>(
                x, rows, cols, chunk_rows, partials);
            break;
        case AMP_BF16:
            sum_rows_partial_kernel<AMP_BF16><<<grid, ROWS_BLOCK, 0, stream>>>(
                x, rows, cols, chunk_rows, partials);
            break;
        default:
            sum_rows_partial_kernel<AMP_F32><<<grid, ROWS_BLOCK, 0, stream>>>(
                x, rows, cols, chunk_rows, partials);
            break;
        }
        AMP_CUDA_LAUNCHED(stream);
    }
    sum_rows_final_kernel<<<grid_for(cols), AMP_CUDA_BLOCK, 0, stream>>>(partials, n_chunks, cols,
                                                                          out);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_sum(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *x,
                                   float alpha, float *out) {
    AMP_TRY(amp_backend_check_float("amp_cuda_sum", dt));
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "amp_cuda_sum: n = %lld < 0", (long long)n);
    AMP_CHECK_ARG(out);
    if (n > 0) AMP_CHECK_ARG(x);
    double *partials = NULL;
    AMP_TRY(amp_cuda_alloc(dev, sizeof(double) * (size_t)amp_red_blocks(n), (void **)&partials));
    amp_status s = amp_cuda_sum_launch(dt, n, x, alpha, out, partials, dev->stream);
    amp_cuda_free(dev, partials); /* reused only by work queued after these kernels (one stream) */
    return s;
}

extern "C" amp_status amp_cuda_sum_rows(amp_device_ctx *dev, amp_dtype dt, int64_t rows,
                                        int64_t cols, const void *x, float *out) {
    AMP_TRY(amp_backend_check_float("amp_cuda_sum_rows", dt));
    if (rows < 0 || cols < 0)
        return amp_fail(AMP_ERR_SHAPE, "amp_cuda_sum_rows: shape [%lld, %lld] has a negative size",
                        (long long)rows, (long long)cols);
    if (cols == 0) return AMP_OK;
    AMP_CHECK_ARG(out);
    if (rows > 0) AMP_CHECK_ARG(x);
    int64_t chunk_rows, n_chunks;
    amp_cuda_sum_rows_plan(rows, cols, &chunk_rows, &n_chunks);
    double *partials = NULL;
    if (n_chunks > 0)
        AMP_TRY(amp_cuda_alloc(dev, sizeof(double) * (size_t)(n_chunks * cols),
                               (void **)&partials));
    amp_status s = amp_cuda_sum_rows_launch(dt, rows, cols, x, out, partials, dev->stream);
    amp_cuda_free(dev, partials); /* as in amp_cuda_sum; free(NULL) is a no-op */
    return s;
}

template <amp_dtype D>
static __global__ void reduce_dim_kernel(amp_reduce_op op, int64_t outer, int64_t n,
                                         int64_t inner, const void *x, float alpha, void *y,
                                         int32_t *idx) {
    int64_t total = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        int64_t o = t / inner, i = t % inner, base = o * n * inner + i;
        if (op == AMP_REDUCE_SUM) {
            double s = 0.0;
            for (int64_t j = 0; j < n; j++) s += (double)amp_load_f32(x, D, base + j * inner);
            amp_store_f32(y, D, t, (float)((double)alpha * s));
        } else {
            float best = amp_load_f32(x, D, base);
            int32_t at = 0;
            for (int64_t j = 1; j < n; j++) {
                float v = amp_load_f32(x, D, base + j * inner);
                if (amp_max_takes(v, best)) {
                    best = v;
                    at = (int32_t)j;
                }
            }
            amp_store_f32(y, D, t, best);
            if (idx) idx[t] = at;
        }
    }
}

template <amp_dtype D>
static __global__ void scatter_dim_kernel(int64_t outer, int64_t n, int64_t inner,
                                          const int32_t *idx, const void *dy, void *dx) {
    int64_t total = outer * n * inner, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        int64_t i = e % inner, oj = e / inner, o = oj / n, j = oj % n, src = o * inner + i;
        amp_store_f32(dx, D, e, idx[src] == j ? amp_load_f32(dy, D, src) : 0.0f);
    }
}

extern "C" amp_status amp_cuda_reduce_dim(amp_device_ctx *dev, amp_reduce_op op, amp_dtype dt,
                                          int64_t outer, int64_t n, int64_t inner,
                                          const void *x, float alpha, void *y, int32_t *idx) {
    AMP_TRY(amp_backend_check_reduce_dim("amp_cuda_reduce_dim", op, dt, outer, n, inner));
    if (outer == 0 || inner == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(outer * inner);
    switch (dt) {
    case AMP_F16:
        reduce_dim_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(op, outer, n, inner, x,
                                                                        alpha, y, idx);
        break;
    case AMP_BF16:
        reduce_dim_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(op, outer, n, inner, x,
                                                                         alpha, y, idx);
        break;
    default:
        reduce_dim_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(op, outer, n, inner, x,
                                                                        alpha, y, idx);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_scatter_dim(amp_device_ctx *dev, amp_dtype dt, int64_t outer,
                                           int64_t n, int64_t inner, const int32_t *idx,
                                           const void *dy, void *dx) {
    AMP_TRY(amp_backend_check_reduce_dim("amp_cuda_scatter_dim", AMP_REDUCE_SUM, dt, outer, n,
                                         inner));
    if (outer == 0 || inner == 0) return AMP_OK;
    AMP_CHECK_ARG(idx);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(dx);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(outer * n * inner);
    switch (dt) {
    case AMP_F16:
        scatter_dim_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(outer, n, inner, idx,
                                                                         dy, dx);
        break;
    case AMP_BF16:
        scatter_dim_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(outer, n, inner, idx,
                                                                          dy, dx);
        break;
    default:
        scatter_dim_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(outer, n, inner, idx,
                                                                         dy, dx);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
