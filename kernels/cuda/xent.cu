/* Softmax cross-entropy over a large vocabulary on the device: the CUDA side of xent_fwd and
 * xent_bwd, with the arithmetic and order of kernels/math/xent.h (the same bits as the CPU
 * backend's kernels/cpu/xent.c).
 *  - Forward: one warp per row (8 rows per 256-thread block, grid-stride over rows), lane l on
 *    elements l, l + 32, ...: the max, the sum of exps and (label smoothing) the sum of logits by
 *    __shfl_xor_sync butterflies, then lane 0 writes the row's logsumexp and loss. One block then
 *    sums the losses in double over 256 lanes and a shared-memory tree, counts the rows, and
 *    writes the loss and the count. Per element: reads of 2 (max, sum; the second from L1/L2),
 *    one exp; a [8192, 50257] bf16 forward reads about 0.8 GB: about 0.3 ms at 85 % of an H100's
 *    3.35 TB/s.
 *  - Backward: one block per row (grid-stride), its threads over the classes: one read, one
 *    exp, one write per element (the same [8192, 50257] bf16: 1.6 GB moved, about 0.6 ms); a
 *    row's padding columns (after its classes: a padded vocabulary) get 0, the forward never
 *    reads them.
 *    No probability tensor exists at any point.
 * Labels outside [0, classes) that are not ignore_index. The CPU backend checks them before
 * writing anything and fails naming the first bad row. Here the labels are device memory, so an
 * answer needs the device:
 *  - xent_fwd launches a check kernel that notes the lowest bad row in the context's bad-index
 *    record (bad_index.h), reads the record back and waits for it: ONE host synchronisation per
 *    forward, the price of failing at the call that got the bad labels, with the CPU's status
 *    and message and nothing written. Nothing else in this file waits for the device.
 *  - xent_bwd does not wait: it writes NaN into the gradient row of a bad label (which the loss
 *    scaler's inf/NaN check then sees) and notes the row in the record; the next host read,
 *    synchronisation or xent_fwd reports it. In a training step the labels of backward are those
 *    forward already checked. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/cuda/bad_index.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/warp_lanes.cuh"
#include "kernels/math/load_store.h"
#include "kernels/math/softmax.h"
#include "kernels/math/xent.h"

#define XENT_WARPS 8
#define XENT_BWD_BLOCK 256

static __device__ inline bool bad_label(int32_t label, const amp_xent_desc &d) {
    return label != d.ignore_index && (label < 0 || label >= d.classes);
}

/* Notes the lowest row whose label is bad. */
static __global__ void xent_check_kernel(amp_xent_desc d, const int32_t *labels,
                                         unsigned long long *record) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < d.rows; r += stride)
        if (bad_label(labels[r], d)) amp_bad_index_note(record, AMP_BAD_LABEL, r, labels[r]);
}

/* Each row's logsumexp and loss into stats (labels already checked). */
template <amp_dtype D>
static __global__ void xent_rows_kernel(amp_xent_desc d, const void *logits, const int32_t *labels,
                                        float *stats) {
    int lane = threadIdx.x % AMP_LANES;
    int64_t warps = (int64_t)gridDim.x * XENT_WARPS;
    for (int64_t row = (int64_t)blockIdx.x * XENT_WARPS + threadIdx.x / AMP_LANES; row < d.rows;
         row += warps) {
        int32_t label = labels[row];
        if (label == d.ignore_index) {
            if (lane == 0) stats[row] = 0.0f, stats[d.rows + row] = 0.0f;
            continue;
        }
        int64_t base = row * (d.classes + d.padding);
        float m = -INFINITY;
        for (int64_t j = lane; j < d.classes; j += AMP_LANES) {
            float v = amp_load_f32(logits, D, base + j);
            m = amp_lanes_max2(m, v); /* the CPU's order */
        }
        m = amp_warp_max(m);
        float s = 0.0f, sx = 0.0f;
        bool smooth = d.label_smoothing > 0.0f;
        for (int64_t j = lane; j < d.classes; j += AMP_LANES) {
            float v = amp_load_f32(logits, D, base + j);
            s += amp_softmax_exp(v, m);
            if (smooth) sx += v;
        }
        s = amp_warp_sum(s);
        sx = smooth ? amp_warp_sum(sx) : 0.0f;
        if (lane == 0) {
            float xl = amp_load_f32(logits, D, base + label);
            stats[row] = amp_xent_lse(m, s);
            stats[d.rows + row] = amp_xent_row_loss(m, s, xl, sx, d.classes, d.label_smoothing);
        }
    }
}

/* One block of AMP_XENT_TOTAL_LANES threads: the loss and the count from the rows' losses. */
static __global__ void xent_total_kernel(amp_xent_desc d, const int32_t *labels, float *stats,
                                         float *loss) {
    __shared__ double lane[AMP_XENT_TOTAL_LANES];
    __shared__ long long counted[AMP_XENT_TOTAL_LANES];
    int t = threadIdx.x;
    double acc = 0.0;
    long long n = 0;
    for (int64_t r = t; r < d.rows; r += AMP_XENT_TOTAL_LANES) {
        acc += (double)stats[d.rows + r];
        n += labels[r] != d.ignore_index;
    }
    lane[t] = acc;
    counted[t] = n;
    __syncthreads();
    for (int half = AMP_XENT_TOTAL_LANES / 2; half >= 1; half /= 2) {
        if (t < half) lane[t] += lane[t + half], counted[t] += counted[t + half];
        __syncthreads();
    }
    if (t == 0) {
        stats[2 * d.rows] = (float)counted[0];
        *loss = amp_xent_loss(lane[0], counted[0], d.sum);
    }
}

/* Each thread reads an element's logit before writing its gradient there: dlogits may be the
 * logits (core/backend_kernels.def). */
template <amp_dtype D>
static __global__ void xent_bwd_kernel(amp_xent_desc d, const void *logits, const int32_t *labels,
                                       const float *stats, const float *dloss, void *dlogits,
                                       unsigned long long *record) {
    float scale = amp_xent_scale(*dloss, stats[2 * d.rows], d.sum);
    float eps = d.label_smoothing, eps_c = eps / (float)d.classes;
    for (int64_t row = blockIdx.x; row < d.rows; row += gridDim.x) {
        int32_t label = labels[row];
        int64_t width = d.classes + d.padding, base = row * width;
        bool bad = bad_label(label, d), ignored = label == d.ignore_index;
        if (bad && threadIdx.x == 0) amp_bad_index_note(record, AMP_BAD_LABEL_BWD, row, label);
        float lse = stats[row];
        for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
            float g = bad ? NAN
                      : ignored || j >= d.classes
                          ? 0.0f
                          : amp_xent_grad(amp_load_f32(logits, D, base + j), lse, j == label, eps,
                                          eps_c, scale);
            amp_store_f32(dlogits, D, base + j, g);
        }
    }
}

static unsigned grid_for(int64_t blocks) {
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

/* Checks the labels on the device and waits for the answer (the one host sync of this file),
 * which brings the whole bad-index record back (bad_index.h): what an earlier op noted is
 * reported first, naming it; else a bad label of these labels, as the CPU backend names it. */
static amp_status check_labels(amp_device_ctx *dev, const char *fn, const amp_xent_desc *d,
                               const int32_t *labels) {
    cudaStream_t stream = dev->stream;
    const amp_cuda_bad_index *r = &dev->bad_index;
    if (d->rows > 0) {
        unsigned grid = grid_for((d->rows + AMP_CUDA_BLOCK - 1) / AMP_CUDA_BLOCK);
        xent_check_kernel<<<grid, AMP_CUDA_BLOCK, 0, stream>>>(*d, labels, r->words);
        AMP_CUDA_LAUNCHED(stream);
    }
    AMP_CUDA_TRY(amp_cuda_bad_index_fetch(r, stream));
    amp_profile_host_wait();
    AMP_CUDA_TRY(cudaStreamSynchronize(stream));
    bool earlier = false;
    for (int w = 0; w < AMP_BAD_LABEL; w++) earlier |= r->seen[w] != AMP_BAD_NONE;
    if (earlier || r->seen[AMP_BAD_LABEL] == AMP_BAD_NONE)
        return amp_cuda_bad_index_report(r, stream, "the next cross-entropy");
    int label = amp_cuda_bad_index_value(r, AMP_BAD_LABEL);
    long long row = amp_cuda_bad_index_where(r, AMP_BAD_LABEL);
    AMP_TRY(amp_cuda_bad_index_clear(r, stream));
    return amp_fail(AMP_ERR_INVALID_ARG, "%s: label %d of row %lld is outside [0, %lld)", fn,
                    label, row, (long long)d->classes);
}

extern "C" amp_status amp_cuda_xent_fwd(amp_device_ctx *dev, const amp_xent_desc *d,
                                        const void *logits, const int32_t *labels, float *stats,
                                        float *loss) {
    AMP_TRY(amp_backend_check_xent("amp_cuda_xent_fwd", d, labels));
    AMP_CHECK_ARG(stats);
    AMP_CHECK_ARG(loss);
    if (d->rows > 0) AMP_CHECK_ARG(logits);
    AMP_TRY(check_labels(dev, "amp_cuda_xent_fwd", d, labels));
    cudaStream_t stream = dev->stream;
    if (d->rows > 0) {
        unsigned grid = grid_for((d->rows + XENT_WARPS - 1) / XENT_WARPS);
        switch (d->dt) {
        case AMP_F16:
            xent_rows_kernel<AMP_F16><<<grid, XENT_WARPS * AMP_LANES, 0, stream>>>(*d, logits,
                                                                                  labels, stats);
            break;
        case AMP_BF16:
            xent_rows_kernel<AMP_BF16><<<grid, XENT_WARPS * AMP_LANES, 0, stream>>>(*d, logits,
                                                                                   labels, stats);
            break;
        default:
            xent_rows_kernel<AMP_F32><<<grid, XENT_WARPS * AMP_LANES, 0, stream>>>(*d, logits,
                                                                                  labels, stats);
            break;
        }
        AMP_CUDA_LAUNCHED(stream);
    }
    xent_total_kernel<<<1, AMP_XENT_TOTAL_LANES, 0, stream>>>(*d, labels, stats, loss);
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_xent_bwd(amp_device_ctx *dev, const amp_xent_desc *d,
                                        const void *logits, const int32_t *labels,
                                        const float *stats, const float *dloss, void *dlogits) {
    AMP_TRY(amp_backend_check_xent("amp_cuda_xent_bwd", d, labels));
    AMP_CHECK_ARG(dloss);
    if (d->rows == 0) return AMP_OK;
    AMP_CHECK_ARG(logits);
    AMP_CHECK_ARG(stats);
    AMP_CHECK_ARG(dlogits);
    unsigned long long *record = dev->bad_index.words;
    cudaStream_t stream = dev->stream;
    unsigned grid = grid_for(d->rows);
    switch (d->dt) {
    case AMP_F16:
        xent_bwd_kernel<AMP_F16><<<grid, XENT_BWD_BLOCK, 0, stream>>>(*d, logits, labels, stats,
                                                                      dloss, dlogits, record);
        break;
    case AMP_BF16:
        xent_bwd_kernel<AMP_BF16><<<grid, XENT_BWD_BLOCK, 0, stream>>>(*d, logits, labels, stats,
                                                                       dloss, dlogits, record);
        break;
    default:
        xent_bwd_kernel<AMP_F32><<<grid, XENT_BWD_BLOCK, 0, stream>>>(*d, logits, labels, stats,
                                                                      dloss, dlogits, record);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
