/* Deterministic block reductions shared by reduce.cu and loss.cu (device code only).
 *
 * Every order is fixed by the launch shape and the thread index, never by timing: each warp
 * reduces with a butterfly (lane l adds lane l ^ k for k = 16..1), lane 0 of each warp stores its
 * warp's value in shared memory, and warp 0 reduces those the same way. No float atomics, so the
 * bits depend on the shape and the data only. The result is broadcast to every thread (a second
 * barrier), which also makes a function safe to call again in the same kernel: no thread writes
 * the shared slots of the next call before every thread has read the result of this one.
 * Blocks must be whole warps and at most 32 warps; every thread of the block must call.
 *
 * The two-pass sum (amp_red_partial_kernel, amp_red_final_kernel), with the term as a functor:
 * pass 1 writes one double partial per block, pass 2 (one block) sums the partials and rounds to
 * f32 once. */
#ifndef AMP_KERNELS_CUDA_BLOCK_REDUCE_CUH
#define AMP_KERNELS_CUDA_BLOCK_REDUCE_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

/* Threads per block of the two-pass sum: 8 warps, as the backend's other kernels. */
#define AMP_RED_BLOCK 256
/* Pass 1 of the two-pass sum uses at most this many blocks (partials): 1024 x 256 threads keep an
 * H100's 132 SMs busy on a memory-bound read, and pass 2 then reads only 8 KiB. */
#define AMP_RED_MAX_BLOCKS 1024

/* The sum of v over the block, returned to every thread. */
template <int BLOCK>
static __device__ double amp_block_sum_f64(double v) {
    static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "whole warps, at most 32");
    __shared__ double warp_vals[BLOCK / 32];
    __shared__ double result;
    for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_vals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < BLOCK / 32 ? warp_vals[lane] : 0.0;
        for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
        if (lane == 0) result = v;
    }
    __syncthreads();
    return result;
}

/* The block's maximum of v as a sequential scan `if (v > best) best = v` from index 0 returns it:
 * the greatest value, and among values that compare equal (+0 and -0) the one of the lowest
 * index, so the sign of a zero maximum is the scan's. idx is the index v came from; a NaN v never
 * wins (the caller keeps NaN out, as the scan does). Returned to every thread. */
template <int BLOCK>
static __device__ float amp_block_max_first(float v, int64_t idx) {
    static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "whole warps, at most 32");
    __shared__ float warp_vals[BLOCK / 32];
    __shared__ int64_t warp_idx[BLOCK / 32];
    __shared__ float result;
    for (int k = 16; k >= 1; k >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, k);
        int64_t oi = __shfl_xor_sync(0xffffffffu, idx, k);
        if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_vals[warp] = v, warp_idx[warp] = idx;
    __syncthreads();
    if (warp == 0) {
        v = lane < BLOCK / 32 ? warp_vals[lane] : -INFINITY;
        idx = lane < BLOCK / 32 ? warp_idx[lane] : INT64_MAX;
        for (int k = 16; k >= 1; k >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, v, k);
            int64_t oi = __shfl_xor_sync(0xffffffffu, idx, k);
            if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
        }
        if (lane == 0) result = v;
    }
    __syncthreads();
    return result;
}

/* Pass 1: partials[block] = the sum in double of term(i) over the block's grid-stride elements
 * (each thread in index order, then amp_block_sum_f64). Term is a small struct of pointers with
 * `__device__ double operator()(int64_t i) const`. */
template <class Term>
static __global__ void amp_red_partial_kernel(Term term, int64_t n, double *partials) {
    double acc = 0.0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc += term(i);
    double s = amp_block_sum_f64<AMP_RED_BLOCK>(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

/* Pass 2, one block: *out = (float)(alpha * total / divisor), one rounding to f32 (alpha 1 or
 * divisor 1 are exact in double). */
static __global__ void amp_red_final_kernel(const double *partials, int n_partials, double alpha,
                                            double divisor, float *out) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < n_partials; i += blockDim.x) acc += partials[i];
    double s = amp_block_sum_f64<AMP_RED_BLOCK>(acc);
    if (threadIdx.x == 0) *out = (float)(alpha * s / divisor);
}

/* Blocks (= partials) of pass 1 for n terms: at least 1, so that n = 0 writes a 0 sum. */
static inline int amp_red_blocks(int64_t n) {
    int64_t blocks = (n + AMP_RED_BLOCK - 1) / AMP_RED_BLOCK;
    if (blocks < 1) blocks = 1;
    return (int)(blocks < AMP_RED_MAX_BLOCKS ? blocks : AMP_RED_MAX_BLOCKS);
}

#endif
