/* RoPE on the device: the CUDA side of core/backend_kernels.def's rope. One thread per element
 * pair of a rotated head (grid-stride), each reading its position's cos and sin from the table
 * and writing both members through kernels/math/rope.h's pair, so the bits are the CPU loop's;
 * one thread per element of the heads that are only copied (the v of a packed q/k/v). y is
 * overwritten; nothing waits for the host. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/rope.h"

template <amp_dtype D>
static __global__ void rope_kernel(amp_rope_desc d, const float *table, const void *x, void *y) {
    int64_t half = d.head_dim / 2, row = d.heads * d.head_dim;
    int64_t pairs = d.batch * d.seq * d.rot_heads * half, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < pairs; e += stride) {
        int64_t i = e % half, h = (e / half) % d.rot_heads, r = e / (half * d.rot_heads);
        int64_t t = r % d.seq, ia, ib;
        amp_rope_members(i, d.head_dim, d.interleaved, &ia, &ib);
        ia += r * row + h * d.head_dim, ib += r * row + h * d.head_dim;
        const float *cs = table + ((d.offset + t) * half + i) * 2;
        float c = cs[0], s = d.inverse ? -cs[1] : cs[1], ya, yb;
        amp_rope_pair(amp_load_f32(x, D, ia), amp_load_f32(x, D, ib), c, s, &ya, &yb);
        amp_store_f32(y, D, ia, ya);
        amp_store_f32(y, D, ib, yb);
    }
}

/* y = x for the heads [rot_heads, heads) of every row. */
template <typename T>
static __global__ void rope_copy_kernel(amp_rope_desc d, const T *x, T *y) {
    int64_t kept = (d.heads - d.rot_heads) * d.head_dim, row = d.heads * d.head_dim;
    int64_t n = d.batch * d.seq * kept, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        int64_t at = (e / kept) * row + d.rot_heads * d.head_dim + e % kept;
        y[at] = x[at];
    }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" amp_status amp_cuda_rope(amp_device_ctx *dev, const amp_rope_desc *d,
                                    const float *table, const void *x, void *y) {
    AMP_TRY(amp_backend_check_rope("amp_cuda_rope", d));
    int64_t rows = d->batch * d->seq;
    if (rows == 0 || d->heads == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    if (d->rot_heads > 0) AMP_CHECK_ARG(table);
    cudaStream_t stream = dev->stream;
    int64_t pairs = rows * d->rot_heads * (d->head_dim / 2);
    if (pairs > 0) {
        unsigned grid = grid_for(pairs);
        switch (d->dt) {
        case AMP_F16:
            rope_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, table, x, y);
            break;
        case AMP_BF16:
            rope_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, table, x, y);
            break;
        default:
            rope_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, table, x, y);
            break;
        }
        AMP_CUDA_LAUNCHED(stream);
    }
    int64_t kept = rows * (d->heads - d->rot_heads) * d->head_dim;
    if (kept > 0 && x != y) {
        unsigned grid = grid_for(kept);
        if (d->dt == AMP_F32)
            rope_copy_kernel<float><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(
                *d, (const float *)x, (float *)y);
        else
            rope_copy_kernel<uint16_t><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(
                *d, (const uint16_t *)x, (uint16_t *)y);
        AMP_CUDA_LAUNCHED(stream);
    }
    return AMP_OK;
}
