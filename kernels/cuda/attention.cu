/* Fused scaled dot-product attention on the device: the CUDA side of attn_fwd and attn_bwd
 * (core/backend_kernels.def), FlashAttention's algorithm in its simplest deterministic form:
 * one warp per query row (forward, dq) or per key (dk, dv), lanes over the head dim (d = lane +
 * 32 u, at most ATTN_PER_LANE values a lane, head_dim <= 128), each score a warp's butterfly
 * sum, the softmax online (the forward keeps the row's running max and sum, the backward
 * recomputes e^(s - lse) from the forward's logsumexp). Nothing of seq x seq is stored; the
 * extra memory is the f32 delta = rowsum(dO O) per row, the caller's workspace.
 *  - Forward: per (i, j) pair the row reads k_j and v_j (2 head_dim elements, from L1/L2 after
 *    the first row of a block) and does 4 head_dim FLOPs plus two exps.
 *  - Backward: the dk/dv kernel (a warp per key, over the rows that see it) and the dq kernel (a
 *    warp per row, over its keys) each recompute s and dp: 8 head_dim FLOPs per pair for dk/dv
 *    and 6 for dq; every sum has one order, so the gradients are deterministic without atomics.
 * No shared-memory tiles or tensor cores yet: at B=8, H=12, T=1024, D=64 in bf16 causal the
 * forward's 25.8 GFLOP take about 0.1 ms at 30 % of an H100's 990 TFLOPS bf16 dense with
 * tensor cores; these CUDA-core warps reach at most its 67 TFLOPS f32, and less with the
 * shuffles. scripts/gpu.sh times it when a device is lent; tiles in shared memory with mma come
 * with a GPU that can prove them.
 * A kv_len outside [0, seq] (device memory: the host cannot see it without waiting) writes NaN
 * into the outputs of that batch and records the batch in word 3 of the context's bad-index
 * record, which the next cross-entropy forward reports (xent.cu). Dropout draws are the CPU's
 * (kernels/math/attention.h), so the masks are identical. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/warp_lanes.cuh"
#include "kernels/math/attention.h"
#include "kernels/math/load_store.h"

#define ATTN_WARPS 4
#define ATTN_PER_LANE 4 /* head_dim <= 32 * 4 */
#define ATTN_RECORD 3   /* the word of the context's bad-index record */

/* The lane's values of row `row` (head_dim elements) of x, 0 past head_dim. */
template <amp_dtype D>
static __device__ inline void load_row(const void *x, int64_t row, int64_t dim, int lane,
                                       float out[ATTN_PER_LANE]) {
    for (int u = 0; u < ATTN_PER_LANE; u++) {
        int64_t c = lane + 32 * u;
        out[u] = c < dim ? amp_load_f32(x, D, row * dim + c) : 0.0f;
    }
}

template <amp_dtype D>
static __device__ inline void store_row(void *x, int64_t row, int64_t dim, int lane,
                                        const float v[ATTN_PER_LANE]) {
    for (int u = 0; u < ATTN_PER_LANE; u++) {
        int64_t c = lane + 32 * u;
        if (c < dim) amp_store_f32(x, D, row * dim + c, v[u]);
    }
}

static __device__ inline float dot(const float a[ATTN_PER_LANE], const float b[ATTN_PER_LANE]) {
    float s = 0.0f;
    for (int u = 0; u < ATTN_PER_LANE; u++) s += a[u] * b[u];
    return amp_warp_sum(s);
}

/* The batch's key count, or -1 (recorded) when kv_len is outside [0, seq]. */
static __device__ inline int64_t batch_len(const amp_attn_desc &d, const int32_t *kv_len,
                                           int64_t bh, unsigned long long *record) {
    if (!kv_len) return d.seq;
    int32_t len = kv_len[bh / d.heads];
    if (len < 0 || len > d.seq) {
        atomicMin(record, (unsigned long long)(bh / d.heads));
        return -1;
    }
    return len;
}

template <amp_dtype D>
static __global__ void attn_fwd_kernel(amp_attn_desc d, const void *q, const void *k,
                                       const void *v, const int32_t *kv_len, void *o, float *lse,
                                       unsigned long long *record) {
    int lane = threadIdx.x % AMP_LANES;
    int64_t rows = d.batch * d.heads * d.seq, warps = (int64_t)gridDim.x * ATTN_WARPS;
    float inv_keep = amp_dropout_scale(d.dropout_p);
    for (int64_t row = (int64_t)blockIdx.x * ATTN_WARPS + threadIdx.x / AMP_LANES; row < rows;
         row += warps) {
        int64_t bh = row / d.seq, i = row % d.seq, len = batch_len(d, kv_len, bh, record);
        float acc[ATTN_PER_LANE] = {0}, qv[ATTN_PER_LANE], kv[ATTN_PER_LANE], vv[ATTN_PER_LANE];
        if (len < 0) {
            for (int u = 0; u < ATTN_PER_LANE; u++) acc[u] = NAN;
            store_row<D>(o, row, d.head_dim, lane, acc);
            if (lane == 0) lse[row] = NAN;
            continue;
        }
        load_row<D>(q, row, d.head_dim, lane, qv);
        float m = -INFINITY, l = 0.0f;
        int64_t nk = amp_attn_keys(d.causal, d.seq, i, len);
        for (int64_t j = 0; j < nk; j++) {
            load_row<D>(k, bh * d.seq + j, d.head_dim, lane, kv);
            float s = dot(qv, kv) * d.scale;
            float m_new = s > m ? s : m;
            float corr = m == -INFINITY ? 0.0f : amp_expf(m - m_new), p = amp_expf(s - m_new);
            l = l * corr + p;
            m = m_new;
            float pz = p * amp_attn_keep(d.dropout_p, inv_keep, d.seed,
                                         amp_attn_draw(d.offset, d.seq, bh, i, j));
            load_row<D>(v, bh * d.seq + j, d.head_dim, lane, vv);
            for (int u = 0; u < ATTN_PER_LANE; u++) acc[u] = acc[u] * corr + pz * vv[u];
        }
        float inv = amp_attn_inv_sum(l);
        for (int u = 0; u < ATTN_PER_LANE; u++) acc[u] *= inv;
        store_row<D>(o, row, d.head_dim, lane, acc);
        if (lane == 0) lse[row] = amp_attn_lse(m, l);
    }
}

/* delta[row] = sum_c dO[row, c] O[row, c]. */
template <amp_dtype D>
static __global__ void attn_delta_kernel(amp_attn_desc d, const void *o, const void *dout,
                                         float *delta) {
    int lane = threadIdx.x % AMP_LANES;
    int64_t rows = d.batch * d.heads * d.seq, warps = (int64_t)gridDim.x * ATTN_WARPS;
    for (int64_t row = (int64_t)blockIdx.x * ATTN_WARPS + threadIdx.x / AMP_LANES; row < rows;
         row += warps) {
        float ov[ATTN_PER_LANE], dov[ATTN_PER_LANE];
        load_row<D>(o, row, d.head_dim, lane, ov);
        load_row<D>(dout, row, d.head_dim, lane, dov);
        float s = dot(ov, dov);
        if (lane == 0) delta[row] = s;
    }
}

/* The probability, its dropout factor and dS of pair (i, j), given the rows' q, k, v, dO. */
struct attn_pair {
    float pz, ds;
};
static __device__ inline attn_pair pair_grads(const amp_attn_desc &d, float inv_keep, int64_t bh,
                                              int64_t i, int64_t j, const float *qv,
                                              const float *kv, const float *vv, const float *dov,
                                              float lse, float delta) {
    float p = amp_attn_prob(dot(qv, kv) * d.scale, lse), dp = dot(dov, vv);
    float z = amp_attn_keep(d.dropout_p, inv_keep, d.seed, amp_attn_draw(d.offset, d.seq, bh, i, j));
    return attn_pair{p * z, p * (dp * z - delta)};
}

/* dk, dv: a warp per key j, over the rows that see it. */
template <amp_dtype D>
static __global__ void attn_dkdv_kernel(amp_attn_desc d, const void *q, const void *k,
                                        const void *v, const int32_t *kv_len, const void *dout,
                                        const float *lse, const float *delta, void *dk, void *dv,
                                        unsigned long long *record) {
    int lane = threadIdx.x % AMP_LANES;
    int64_t keys = d.batch * d.heads * d.seq, warps = (int64_t)gridDim.x * ATTN_WARPS;
    float inv_keep = amp_dropout_scale(d.dropout_p);
    for (int64_t key = (int64_t)blockIdx.x * ATTN_WARPS + threadIdx.x / AMP_LANES; key < keys;
         key += warps) {
        int64_t bh = key / d.seq, j = key % d.seq, len = batch_len(d, kv_len, bh, record);
        float kv[ATTN_PER_LANE], vv[ATTN_PER_LANE], qv[ATTN_PER_LANE], dov[ATTN_PER_LANE];
        float dkv[ATTN_PER_LANE] = {0}, dvv[ATTN_PER_LANE] = {0};
        load_row<D>(k, key, d.head_dim, lane, kv);
        load_row<D>(v, key, d.head_dim, lane, vv);
        /* Rows i >= j see key j when causal, every row otherwise; none past the batch's length. */
        int64_t i0 = len < 0 || j >= len ? d.seq : d.causal ? j : 0;
        for (int64_t i = i0; i < d.seq; i++) {
            int64_t row = bh * d.seq + i;
            load_row<D>(q, row, d.head_dim, lane, qv);
            load_row<D>(dout, row, d.head_dim, lane, dov);
            attn_pair g = pair_grads(d, inv_keep, bh, i, j, qv, kv, vv, dov, lse[row], delta[row]);
            for (int u = 0; u < ATTN_PER_LANE; u++) {
                dvv[u] += g.pz * dov[u];
                dkv[u] += (g.ds * d.scale) * qv[u];
            }
        }
        if (len < 0)
            for (int u = 0; u < ATTN_PER_LANE; u++) dkv[u] = NAN, dvv[u] = NAN;
        store_row<D>(dk, key, d.head_dim, lane, dkv);
        store_row<D>(dv, key, d.head_dim, lane, dvv);
    }
}

/* dq: a warp per row i, over its keys. */
template <amp_dtype D>
static __global__ void attn_dq_kernel(amp_attn_desc d, const void *q, const void *k, const void *v,
                                      const int32_t *kv_len, const void *dout, const float *lse,
                                      const float *delta, void *dq, unsigned long long *record) {
    int lane = threadIdx.x % AMP_LANES;
    int64_t rows = d.batch * d.heads * d.seq, warps = (int64_t)gridDim.x * ATTN_WARPS;
    float inv_keep = amp_dropout_scale(d.dropout_p);
    for (int64_t row = (int64_t)blockIdx.x * ATTN_WARPS + threadIdx.x / AMP_LANES; row < rows;
         row += warps) {
        int64_t bh = row / d.seq, i = row % d.seq, len = batch_len(d, kv_len, bh, record);
        float kv[ATTN_PER_LANE], vv[ATTN_PER_LANE], qv[ATTN_PER_LANE], dov[ATTN_PER_LANE];
        float dqv[ATTN_PER_LANE] = {0};
        load_row<D>(q, row, d.head_dim, lane, qv);
        load_row<D>(dout, row, d.head_dim, lane, dov);
        int64_t nk = len < 0 ? 0 : amp_attn_keys(d.causal, d.seq, i, len);
        for (int64_t j = 0; j < nk; j++) {
            load_row<D>(k, bh * d.seq + j, d.head_dim, lane, kv);
            load_row<D>(v, bh * d.seq + j, d.head_dim, lane, vv);
            attn_pair g = pair_grads(d, inv_keep, bh, i, j, qv, kv, vv, dov, lse[row], delta[row]);
            for (int u = 0; u < ATTN_PER_LANE; u++) dqv[u] += (g.ds * d.scale) * kv[u];
        }
        if (len < 0)
            for (int u = 0; u < ATTN_PER_LANE; u++) dqv[u] = NAN;
        store_row<D>(dq, row, d.head_dim, lane, dqv);
    }
}

static unsigned grid_for_warps(int64_t n) {
    int64_t blocks = (n + ATTN_WARPS - 1) / ATTN_WARPS;
    return (unsigned)(blocks < AMP_CUDA_MAX_BLOCKS ? blocks : AMP_CUDA_MAX_BLOCKS);
}

static amp_status check_dim(const char *fn, const amp_attn_desc *d) {
    if (d->head_dim <= 32 * ATTN_PER_LANE) return AMP_OK;
    return amp_fail(AMP_ERR_UNSUPPORTED, "%s: head_dim %lld > %d is not supported on CUDA (the "
                    "CPU backend takes any)", fn, (long long)d->head_dim, 32 * ATTN_PER_LANE);
}

/* The launches, for one storage dtype. */
template <amp_dtype D>
static void launch_fwd(const amp_attn_desc *d, const void *q, const void *k, const void *v,
                       const int32_t *kv_len, void *o, float *lse, unsigned long long *record,
                       unsigned grid, cudaStream_t stream) {
    attn_fwd_kernel<D><<<grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(*d, q, k, v, kv_len, o, lse,
                                                                     record);
}

template <amp_dtype D>
static void launch_bwd(const amp_attn_desc *d, const void *q, const void *k, const void *v,
                       const int32_t *kv_len, const void *o, const void *dout, const float *lse,
                       float *delta, void *dq, void *dk, void *dv, unsigned long long *record,
                       unsigned grid, cudaStream_t stream) {
    attn_delta_kernel<D><<<grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(*d, o, dout, delta);
    attn_dkdv_kernel<D><<<grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(*d, q, k, v, kv_len, dout,
                                                                      lse, delta, dk, dv, record);
    attn_dq_kernel<D><<<grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(*d, q, k, v, kv_len, dout, lse,
                                                                    delta, dq, record);
}

extern "C" amp_status amp_cuda_attn_fwd(amp_device_ctx *dev, const amp_attn_desc *d,
                                        const void *q, const void *k, const void *v,
                                        const int32_t *kv_len, void *o, float *lse) {
    static const char *fn = "amp_cuda_attn_fwd";
    AMP_TRY(amp_backend_check_attn_fwd(fn, d, q, k, v, o, lse));
    AMP_TRY(check_dim(fn, d));
    int64_t rows = d->batch * d->heads * d->seq;
    if (rows == 0) return AMP_OK;
    cudaStream_t stream = dev->stream;
    unsigned long long *record = dev->label_record + ATTN_RECORD;
    unsigned grid = grid_for_warps(rows);
    switch (d->dt) {
    case AMP_F16: launch_fwd<AMP_F16>(d, q, k, v, kv_len, o, lse, record, grid, stream); break;
    case AMP_BF16: launch_fwd<AMP_BF16>(d, q, k, v, kv_len, o, lse, record, grid, stream); break;
    default: launch_fwd<AMP_F32>(d, q, k, v, kv_len, o, lse, record, grid, stream); break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}

extern "C" amp_status amp_cuda_attn_bwd(amp_device_ctx *dev, const amp_attn_desc *d,
                                        const void *q, const void *k, const void *v,
                                        const int32_t *kv_len, const void *o, const void *dout,
                                        const float *lse, float *delta, void *dq, void *dk,
                                        void *dv) {
    static const char *fn = "amp_cuda_attn_bwd";
    AMP_TRY(amp_backend_check_attn_bwd(fn, d, q, k, v, o, dout, lse, delta, dq, dk, dv));
    AMP_TRY(check_dim(fn, d));
    int64_t rows = d->batch * d->heads * d->seq;
    if (rows == 0) return AMP_OK;
    cudaStream_t stream = dev->stream;
    unsigned long long *record = dev->label_record + ATTN_RECORD;
    unsigned grid = grid_for_warps(rows);
    switch (d->dt) {
    case AMP_F16:
        launch_bwd<AMP_F16>(d, q, k, v, kv_len, o, dout, lse, delta, dq, dk, dv, record, grid,
                            stream);
        break;
    case AMP_BF16:
        launch_bwd<AMP_BF16>(d, q, k, v, kv_len, o, dout, lse, delta, dq, dk, dv, record, grid,
                             stream);
        break;
    default:
        launch_bwd<AMP_F32>(d, q, k, v, kv_len, o, dout, lse, delta, dq, dk, dv, record, grid,
                            stream);
        break;
    }
    AMP_CUDA_LAUNCHED(stream);
    return AMP_OK;
}
