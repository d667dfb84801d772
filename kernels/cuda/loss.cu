/* Losses on the device: the CUDA side of the table's xent_fwd/xent_bwd (softmax cross-entropy with
 * saved log-softmax, mean over rows) and mse_fwd/mse_bwd (mean squared error).
 *
 * Numerics follow the CPU backend (kernels/cpu/loss.c) through the same per-element functions
 * (kernels/math/xent.h, mse.h):
 *  - xent_fwd: one block per row (grid-stride over rows). The row's maximum is the sequential
 *    scan's (amp_block_max_first: the first of equal maxima, so a zero maximum has the scan's
 *    sign); the sum of exp(x - max) is in double in a fixed tree order (the CPU's is sequential,
 *    so log(sum) may differ in the last double bit, and expf on a GPU by an ulp or two from the
 *    host's); log-softmax is written in f32. The loss, -mean of the labels' log-softmax, is summed
 *    in double by one block in a fixed order and rounded once; 0 rows give NaN, as torch.
 *  - xent_bwd: dlogits = (exp(logsoftmax) - onehot) * (*dloss / rows), the scale formed in f32 on
 *    the device as the CPU forms it on the host (no host read of dloss).
 *  - mse_fwd: the two-pass sum of block_reduce.cuh over (a - b)^2 (f32 squares, double sum), then
 *    (float)(total / n); mse_bwd: da = ((a - b) * (2 / n)) * (*dloss), 2 / n rounded from double.
 * Outputs are overwritten; da may be a or b itself (the same thread reads and writes an element).
 *
 * Labels outside [0, classes). The CPU backend checks them before writing anything and fails
 * naming the first bad row. Here the labels are device memory, so an answer needs the device:
 *  - xent_fwd launches a check kernel that records the lowest bad row (an integer atomicMin, so
 *    the same row whatever the order) in a 16-byte device record, reads the record back and
 *    waits for it: ONE host synchronisation per forward, the price of failing at the call that
 *    got the bad labels, with the CPU's status and message and nothing written. Nothing else in
 *    this file waits for the device.
 *  - xent_bwd does not wait: its kernel writes NaN into the gradient row of a bad label (which the
 *    loss scaler's inf/NaN check then sees) and records the lowest such row in the record's
 *    second slot; the next xent_fwd reports it as an error (naming xent_bwd and the row). In a
 *    training step the labels of backward are those forward already checked.
 * The record is one cudaMalloc per device context, made with the context (amp_device_ctx's
 * label_record; outside the caching allocator, so it is not counted as the caller's memory);
 * all its traffic is on the context's stream. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/mse.h"
#include "kernels/math/xent.h"

/* Threads per row of xent_fwd: 8 warps stream a row of up to tens of thousands of classes; for
 * MNIST's 10 classes most lanes idle, which costs little next to launching per row. */
#define XENT_BLOCK 256
/* xent_fwd's grid is capped at this many blocks (rows loop beyond). */
#define XENT_MAX_BLOCKS 8192
/* The record's "no bad row" value. */
#define NO_BAD_ROW 0xffffffffffffffffull

/* record[0] = lowest row whose label is outside [0, classes) (atomicMin). */
static __global__ void xent_check_kernel(const int32_t *labels, int64_t rows, int64_t classes,
                                         unsigned long long *record) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride)
        if (labels[r] < 0 || labels[r] >= classes) atomicMin(record, (unsigned long long)r);
}

/* Log-softmax of each row (labels already checked). */
template <amp_dtype D>
static __global__ void xent_rows_kernel(const void *logits, int64_t rows, int64_t classes,
                                        float *logsoftmax) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t base = r * classes;
        float best = -INFINITY;
        int64_t best_j = INT64_MAX;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
            float x = amp_load_f32(logits, D, base + j);
            if (x > best) best = x, best_j = j; /* amp_xent_max's test, with the index kept */
        }
        float max = amp_block_max_first<XENT_BLOCK>(best, best_j);
        double acc = 0.0;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
            acc += (double)amp_xent_exp(amp_load_f32(logits, D, base + j), max);
        float log_sum = (float)log(amp_block_sum_f64<XENT_BLOCK>(acc));
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
            logsoftmax[base + j] = amp_xent_logsoftmax(amp_load_f32(logits, D, base + j), max,
                                                       log_sum);
    }
}

/* One block: *loss = (float)(-sum_r logsoftmax[r, labels[r]] / rows). */
static __global__ void xent_loss_kernel(const float *logsoftmax, const int32_t *labels,
                                        int64_t rows, int64_t classes, float *loss) {
    double acc = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
        acc -= (double)logsoftmax[r * classes + labels[r]];
    double total = amp_block_sum_f64<AMP_RED_BLOCK>(acc);
    if (threadIdx.x == 0) *loss = (float)(total / (double)rows);
}

template <amp_dtype D>
static __global__ void xent_bwd_kernel(const float *logsoftmax, const int32_t *labels,
                                       int64_t rows, int64_t classes, const float *dloss,
                                       void *dlogits, unsigned long long *record) {
    float scale = *dloss / (float)rows;
    int64_t n = rows * classes, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t r = i / classes, j = i - r * classes;
        int32_t label = labels[r];
        float g;
        if (label < 0 || label >= classes) {
            g = NAN;
            if (j == 0) atomicMin(record + 1, (unsigned long long)r);
        } else {
            g = amp_xent_grad(logsoftmax[i], j == label, scale);
        }
        amp_store_f32(dlogits, D, i, g);
    }
}

/* One term of mse_fwd's sum: (a[i] - b[i])^2 in f32, widened to double. */
template <amp_dtype D>
struct mse_term {
    const void *a, *b;
    __device__ double operator()(int64_t i) const {
        return (double)amp_mse_sq(amp_load_f32(a, D, i), amp_load_f32(b, D, i));
    }
};

template <amp_dtype D>
static __global__ void mse_bwd_kernel(const void *a, const void *b, int64_t n, float norm,
                                      const float *dloss, void *da) {
    float g = *dloss;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = amp_mse_grad(amp_load_f32(a, D, i), amp_load_f32(b, D, i), norm, g);
        amp_store_f32(da, D, i, v);
    }
}

static unsigned grid_for(int64_t n) {
    int64_t blocks = (n + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

/* Log-softmax and loss of validated labels (rows >= 1). */
extern "C" amp_status amp_cuda_xent_fwd_launch(amp_dtype dt, int64_t rows, int64_t classes,
                                               const void *logits, const int32_t *labels,
                                               float *loss, float *logsoftmax,
                                               cudaStream_t stream) {
    unsigned grid = (unsigned)(rows < XENT_MAX_BLOCKS ? rows : XENT_MAX_BLOCKS);
    switch (dt) {
    case AMP_F16:
        xent_rows_kernel<AMP_F16><<<grid, XENT_BLOCK, 0, stream>>>(logits, rows, classes,
                                                                    logsoftmax);
        break;
    case AMP_BF16:
        xent_rows_kernel<AMP_BF16><<<grid, XENT_BLOCK, 0, stream>>>(logits, rows, classes,
                                                                     logsoftmax);
        break;
    default:
        xent_rows_kernel<AMP_F32><<<grid, XENT_BLOCK, 0, stream>>>(logits, rows, classes,
                                                                    logsoftmax);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    xent_loss_kernel<<<1, AMP_RED_BLOCK, 0, stream>>>(logsoftmax, labels, rows, classes, loss);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

/* Checks the labels on the device and waits for the answer (the one host sync of this file);
 * also reports a bad row that an earlier xent_bwd recorded, and a bad index an earlier
 * embedding_fwd recorded (embedding.cu: the wait here costs nothing more). Clears what it
 * reports. */
static amp_status check_labels(amp_device_ctx *dev, const char *fn, int64_t rows, int64_t classes,
                               const int32_t *labels) {
    cudaStream_t stream = dev->stream;
    unsigned long long *record = dev->label_record, seen[3];
    if (rows > 0) {
        xent_check_kernel<<<grid_for(rows), AMP_CUDA_BLOCK, 0, stream>>>(labels, rows, classes,
                                                                         record);
        AMP_CUDA_LAUNCHED(stream);
    }
    AMP_CUDA_TRY(cudaMemcpyAsync(seen, record, sizeof seen, cudaMemcpyDeviceToHost, stream));
    amp_profile_host_wait();
    AMP_CUDA_TRY(cudaStreamSynchronize(stream));
    if (seen[0] == NO_BAD_ROW && seen[1] == NO_BAD_ROW && seen[2] == NO_BAD_ROW) return AMP_OK;
    AMP_CUDA_TRY(cudaMemsetAsync(record, 0xff, sizeof seen, stream));
    if (seen[2] != NO_BAD_ROW)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: an earlier amp_cuda_embedding_fwd had an index "
                        "outside [0, vocab) at position %lld (its row was set to NaN)", fn,
                        (long long)seen[2]);
    if (seen[0] != NO_BAD_ROW) {
        int32_t label = 0;
        AMP_CUDA_TRY(cudaMemcpyAsync(&label, labels + seen[0], sizeof label,
                                     cudaMemcpyDeviceToHost, stream));
        AMP_CUDA_TRY(cudaStreamSynchronize(stream));
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: label %d of row %lld is outside [0, %lld)", fn,
                        (int)label, (long long)seen[0], (long long)classes);
    }
    return amp_fail(AMP_ERR_INVALID_ARG,
                    "%s: an earlier amp_cuda_xent_bwd had a label outside [0, classes) in row "
                    "%lld (its gradient row was set to NaN)", fn, (long long)seen[1]);
}

extern "C" amp_status amp_cuda_xent_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows,
                                        int64_t classes, const void *logits, const int32_t *labels,
                                        float *loss, float *logsoftmax) {
    AMP_TRY(amp_backend_check_xent("amp_cuda_xent_fwd", dt, rows, classes, labels));
    AMP_CHECK_ARG(loss);
    if (rows > 0) {
        AMP_CHECK_ARG(logits);
        AMP_CHECK_ARG(logsoftmax);
    }
    cudaStream_t stream = dev->stream;
    AMP_TRY(check_labels(dev, "amp_cuda_xent_fwd", rows, classes, labels));
    if (rows == 0) {
        /* 0 / 0: NaN, as torch's mean over nothing; written by the stream, in order. */
        const float nan_bits = NAN;
        AMP_CUDA_TRY(cudaMemcpyAsync(loss, &nan_bits, sizeof nan_bits, cudaMemcpyHostToDevice,
                                     stream));
        return AMP_OK;
    }
    return amp_cuda_xent_fwd_launch(dt, rows, classes, logits, labels, loss, logsoftmax, stream);
}

extern "C" amp_status amp_cuda_xent_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t rows,
                                        int64_t classes, const float *logsoftmax,
                                        const int32_t *labels, const float *dloss, void *dlogits) {
    AMP_TRY(amp_backend_check_xent("amp_cuda_xent_bwd", dt, rows, classes, labels));
    AMP_CHECK_ARG(dloss);
    if (rows == 0) return AMP_OK;
    AMP_CHECK_ARG(logsoftmax);
    AMP_CHECK_ARG(dlogits);
    unsigned long long *record = dev->label_record;
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(rows * classes);
    switch (dt) {
    case AMP_F16:
        xent_bwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(
            logsoftmax, labels, rows, classes, dloss, dlogits, record);
        break;
    case AMP_BF16:
        xent_bwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(
            logsoftmax, labels, rows, classes, dloss, dlogits, record);
        break;
    default:
        xent_bwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(
            logsoftmax, labels, rows, classes, dloss, dlogits, record);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

template <amp_dtype D>
static void mse_partial_launch(const void *a, const void *b, int64_t n, double *partials,
                               int blocks, cudaStream_t stream) {
    amp_red_partial_kernel<mse_term<D> ><<<blocks, AMP_RED_BLOCK, 0, stream>>>(mse_term<D>{a, b},
                                                                               n, partials);
}

extern "C" amp_status amp_cuda_mse_fwd_launch(amp_dtype dt, int64_t n, const void *a,
                                              const void *b, float *loss, double *partials,
                                              cudaStream_t stream) {
    int blocks = amp_red_blocks(n);
    switch (dt) {
    case AMP_F16: mse_partial_launch<AMP_F16>(a, b, n, partials, blocks, stream); break;
    case AMP_BF16: mse_partial_launch<AMP_BF16>(a, b, n, partials, blocks, stream); break;
    default: mse_partial_launch<AMP_F32>(a, b, n, partials, blocks, stream); break;
    }
    AMP_CUDA_LAUNCHED(stream);
    /* n = 0: 0 / 0 = NaN, as torch's mean over nothing. */
    amp_red_final_kernel<<<1, AMP_RED_BLOCK, 0, stream>>>(partials, blocks, 1.0, (double)n, loss);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_mse_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *a,
                                       const void *b, float *loss) {
    AMP_TRY(amp_backend_check_mse("amp_cuda_mse_fwd", dt, n, a, b));
    AMP_CHECK_ARG(loss);
    double *partials = NULL;
    AMP_TRY(amp_cuda_alloc(dev, sizeof(double) * (size_t)amp_red_blocks(n), (void **)&partials));
    amp_status s = amp_cuda_mse_fwd_launch(dt, n, a, b, loss, partials, dev->stream);
    amp_cuda_free(dev, partials); /* reused only by work queued after these kernels (one stream) */
    return s;
}

extern "C" amp_status amp_cuda_mse_bwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *a,
                                       const void *b, const float *dloss, void *da) {
    AMP_TRY(amp_backend_check_mse("amp_cuda_mse_bwd", dt, n, a, b));
    AMP_CHECK_ARG(dloss);
    if (n == 0) return AMP_OK;
    AMP_CHECK_ARG(da);
    float norm = (float)(2.0 / (double)n);
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(n);
    switch (dt) {
    case AMP_F16:
        mse_bwd_kernel<AMP_F16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(a, b, n, norm, dloss, da);
        break;
    case AMP_BF16:
        mse_bwd_kernel<AMP_BF16><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(a, b, n, norm, dloss, da);
        break;
    default:
        mse_bwd_kernel<AMP_F32><<<grid, AMP_CUDA_BLOCK, 0, stream>>>(a, b, n, norm, dloss, da);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
