/* The embedding on the device: the CUDA side of embedding_fwd (a gather) and embedding_bwd (a
 * deterministic scatter-add), core/backend_kernels.def's contracts.
 *
 * Forward: one thread per output element (grid-stride), a row of dim elements read and written
 * per index: 2 dim elements of traffic each. No host wait: a bad index writes NaN into its row
 * and notes the lowest such i in the context's bad-index record (bad_index.h), which the next
 * host read, synchronisation or cross-entropy reports.
 * Backward: dw zeroed, then one thread per column c adding dy[i, c] into dw[idx[i], c] for
 * i = 0, 1, ... in order: no float atomics and the CPU backend's order, so the same bits. A warp
 * covers 32 consecutive columns (coalesced); dim threads in all, each reading n elements: for
 * GPT-2 (dim 768, n = B T = 8192) about 6 M dependent adds in 768 threads, memory-latency bound.
 * A sort of the indices (PyTorch's embedding_dense_backward) would spread it over the device;
 * this one is the simple deterministic scheme, to be measured on a GPU before it is replaced. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/bad_index.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"

template <amp_dtype D>
static __global__ void emb_fwd_kernel(int64_t n, int64_t dim, int64_t vocab, const int32_t *idx,
                                      const void *w, void *y, unsigned long long *record) {
    int64_t total = n * dim, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        int64_t i = e / dim, c = e % dim;
        int32_t v = idx[i];
        if (v < 0 || v >= vocab) {
            amp_store_f32(y, D, e, __int_as_float(0x7fc00000));
            if (c == 0) amp_bad_index_note(record, AMP_BAD_EMBEDDING, i, v);
        } else {
            amp_store_f32(y, D, e, amp_load_f32(w, D, (int64_t)v * dim + c));
        }
    }
}

template <amp_dtype D>
static __global__ void emb_bwd_kernel(int64_t n, int64_t dim, int64_t vocab, const int32_t *idx,
                                      const void *dy, float *dw) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < dim; c += stride)
        for (int64_t i = 0; i < n; i++) {
            int32_t v = idx[i];
            if (v >= 0 && v < vocab) dw[(int64_t)v * dim + c] += amp_load_f32(dy, D, i * dim + c);
        }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

extern "C" amp_status amp_cuda_embedding_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                             int64_t dim, int64_t vocab, const int32_t *idx,
                                             const void *w, void *y) {
    AMP_TRY(amp_backend_check_embedding("amp_cuda_embedding_fwd", dt, n, dim, vocab, idx));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(y);
    cudaStream_t stream = dev->stream;
    unsigned long long *record = dev->bad_index.words;
    unsigned grid = grid_for(n * dim);
    switch (dt) {
    case AMP_F16:
        emb_fwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(n, dim, vocab, idx, w, y,
                                                                     record);
        break;
    case AMP_BF16:
        emb_fwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(n, dim, vocab, idx, w, y,
                                                                      record);
        break;
    default:
        emb_fwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(n, dim, vocab, idx, w, y,
                                                                     record);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_embedding_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                             int64_t dim, int64_t vocab, const int32_t *idx,
                                             const void *dy, float *dw) {
    AMP_TRY(amp_backend_check_embedding("amp_cuda_embedding_bwd", dt, n, dim, vocab, idx));
    AMP_CHECK_ARG(dw);
    cudaStream_t stream = dev->stream;
    AMP_CUDA_TRY(cudaMemsetAsync(dw, 0, (size_t)(vocab * dim) * sizeof *dw, stream));
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(dy);
    unsigned grid = grid_for(dim);
    switch (dt) {
    case AMP_F16:
        emb_bwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(n, dim, vocab, idx, dy, dw);
        break;
    case AMP_BF16:
        emb_bwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(n, dim, vocab, idx, dy, dw);
        break;
    default:
        emb_bwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(n, dim, vocab, idx, dy, dw);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
