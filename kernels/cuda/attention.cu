/* Fused scaled dot-product attention on the device: the CUDA side of attn_fwd and attn_bwd
 * (core/backend_kernels.def), FlashAttention's algorithm in a simple deterministic form, the
 * softmax online (the forward keeps each row's running max and sum per tile of keys, the
 * backward recomputes e^(s - lse) from the forward's logsumexp). A block works on consecutive
 * rows (or keys) of one (batch, head); what they all visit comes through shared memory in tiles
 * of ATTN_TILE, read from global memory once per block instead of once per warp. Nothing of
 * seq x seq is stored; the extra memory is the f32 delta = rowsum(dO O) per row, the caller's
 * workspace. head_dim <= 128 (ATTN_PER_LANE values a lane where lanes run over it).
 *  - Forward (attn_fwd_kernel): a warp per ATTN_ROWS_PER_WARP rows, lanes over the tile's 32
 *    keys: a score is one lane's own dot product (lane_dots), not a butterfly; each row's tile
 *    max and sum are two butterflies per 32 keys, and its output (lane l holding elements l,
 *    l + 32, ...) takes each key's probability from the key's lane by a shuffle (lane_gather).
 *    About 8 warp instructions a (row, key) pair at head_dim 64 by count (no GPU has timed
 *    either form yet), where a warp per row with a butterfly per score (the first form) took
 *    about 50. Per pair 4 head_dim FLOPs and one exp; global traffic per block of ATTN_FWD_ROWS
 *    rows: the keys' k and v once, 2 head_dim s / ATTN_FWD_ROWS bytes per pair (s the dtype's
 *    size): 8 B at head_dim 64 in bf16.
 *  - Backward, in the same form: the dq kernel (a warp per ATTN_BWD_PER_WARP rows, lanes over 32
 *    keys, k and v tiled) and the dk/dv kernel (a warp per ATTN_BWD_PER_WARP keys, lanes over
 *    32 rows, q, dO, lse and delta tiled) each recompute s and dp by lane_dots and gather dS k,
 *    dS q and p z dO by lane_gather: about 10 warp instructions a pair for the two
 *    products at head_dim 64 and 4 to 8 for the gathers, where the first form took 50 to 60.
 *    8 head_dim FLOPs per pair for dk/dv and 6 for dq; every sum has one order, so the
 *    gradients are deterministic without atomics.
 * What an H100 allows (bench/RESULTS.md): at B=8, H=12, T=1024, D=64 causal the forward is
 * 12.9 GFLOP (50.3 M pairs), 13 us at its 989 TFLOPS dense bf16 tensor-core peak and 0.19 ms at
 * its 67 TFLOPS f32 CUDA-core peak, which bounds these kernels (no mma: cudacpu cannot run it);
 * the forward's 8 B a pair in bf16 are 0.40 GB, mostly from L2 (a head's k and v are 256 KiB).
 * scripts/gpu.sh times them (bench/cuda_kernels) when a device is lent; tensor-core tiles come
 * with a GPU that can prove them.
 * Grouped-query attention: query head h reads key/value head h / (heads / kv_heads) where it is,
 * and the dk/dv kernel sums a key/value head's group in head order (see it); keys may be more
 * than queries (a cache), the causal mask aligned to the end (kernels/math/attention.h).
 * A kv_len outside [0, kv_seq] (device memory: the host cannot see it without waiting) writes NaN
 * into the outputs of that batch and notes the batch in the context's bad-index record
 * (bad_index.h), which the next host read, synchronisation or cross-entropy reports. Dropout draws are the CPU's
 * (kernels/math/attention.h), so the masks are identical. */
#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/bad_index.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/warp_lanes.cuh"
#include "kernels/math/attention.h"
#include "kernels/math/load_store.h"

#define ATTN_WARPS 4
#define ATTN_PER_LANE 4 /* head_dim <= 32 * 4 */
#define ATTN_DMAX (32 * ATTN_PER_LANE)
#define ATTN_TILE 32 /* keys (or rows) a block holds in shared memory: 2 x 16 KiB at head_dim 128 */
#define ATTN_ROWS_PER_WARP 4                            /* the forward's query rows per warp */
#define ATTN_FWD_ROWS (ATTN_WARPS * ATTN_ROWS_PER_WARP) /* and per block */
#define ATTN_BWD_PER_WARP 2 /* the backward's rows (dq) or keys (dk, dv) per warp: two padded */
#define ATTN_BWD_ROWS (ATTN_WARPS * ATTN_BWD_PER_WARP) /* tiles and these fit in 48 KiB */

/* The lane's values of the row (head_dim elements) that starts at element `at` of x
 * (amp_attn_row: the dense or the packed layout), 0 past head_dim. */
template <amp_dtype D>
static __device__ inline void load_row(const void *x, int64_t at, int64_t dim, int lane,
                                       float out[ATTN_PER_LANE]) {
    for (int u = 0; u < ATTN_PER_LANE; u++) {
        int64_t c = lane + 32 * u;
        out[u] = c < dim ? amp_load_f32(x, D, at + c) : 0.0f;
    }
}

template <amp_dtype D>
static __device__ inline void store_row(void *x, int64_t at, int64_t dim, int lane,
                                        const float v[ATTN_PER_LANE]) {
    for (int u = 0; u < ATTN_PER_LANE; u++) {
        int64_t c = lane + 32 * u;
        if (c < dim) amp_store_f32(x, D, at + c, v[u]);
    }
}

static __device__ inline float dot(const float a[ATTN_PER_LANE], const float b[ATTN_PER_LANE]) {
    float s = 0.0f;
    for (int u = 0; u < ATTN_PER_LANE; u++) s += a[u] * b[u];
    return amp_warp_sum(s);
}

/* The key count of batch b, or -1 (recorded) when kv_len is outside [0, kv_seq]. */
static __device__ inline int64_t batch_len(const amp_attn_desc &d, const int32_t *kv_len,
                                           int64_t b, unsigned long long *record) {
    if (!kv_len) return amp_attn_kv_seq(&d);
    int32_t len = kv_len[b];
    if (len < 0 || len > amp_attn_kv_seq(&d)) {
        amp_bad_index_note(record, AMP_BAD_KV_LEN, b, len);
        return -1;
    }
    return len;
}

/* Rows [r0, r0 + n) of head row bh of part p (amp_attn_row) into a tile whose rows are padded
 * by one float, so that lane j reading row j, element c, hits bank (j + c) mod 32: no two lanes
 * on one bank. */
template <amp_dtype D>
static __device__ inline void load_tile_padded(float (*tile)[ATTN_DMAX + 1], const void *x,
                                               const amp_attn_desc &d, amp_attn_part p,
                                               int64_t bh, int64_t r0, int64_t n) {
    int64_t dim = d.head_dim;
    for (int64_t e = threadIdx.x; e < n * dim; e += blockDim.x)
        tile[e / dim][e % dim] = amp_load_f32(x, D, amp_attn_row(&d, p, bh, r0 + e / dim) + e % dim);
}

/* Rows [r0, r0 + n) of head row bh of part p into a tile of ATTN_DMAX-wide rows (read at one
 * address by every lane), zeros past the part's length. */
template <amp_dtype D>
static __device__ inline void load_rows(float (*tile)[ATTN_DMAX], const void *x,
                                        const amp_attn_desc &d, amp_attn_part p, int64_t bh,
                                        int64_t r0, int64_t n) {
    int64_t dim = d.head_dim, rows = p == AMP_ATTN_KV ? amp_attn_kv_seq(&d) : d.seq;
    for (int64_t e = threadIdx.x; e < n * dim; e += blockDim.x) {
        int64_t i = r0 + e / dim;
        tile[e / dim][e % dim] =
            i < rows ? amp_load_f32(x, D, amp_attn_row(&d, p, bh, i) + e % dim) : 0.0f;
    }
}

/* out[r] = the lane's own row (or key) of a padded tile . rows[r], for the R rows (or keys) of
 * the warp that every lane reads at one address: a (row, key) pair's dot product per lane, 32
 * pairs at a time, one pass over the tile's row for all R. */
template <int R>
static __device__ inline void lane_dots(const float (*tile)[ATTN_DMAX + 1], int lane,
                                        const float (*rows)[ATTN_DMAX], int64_t dim,
                                        float out[R]) {
    for (int r = 0; r < R; r++) out[r] = 0.0f;
    for (int64_t c = 0; c < dim; c++) {
        float t = tile[lane][c];
        for (int r = 0; r < R; r++) out[r] += rows[r][c] * t;
    }
}

/* acc[r][u] += sum over the tile's n rows jj of w[r] from lane jj times tile[jj][lane + 32 u]:
 * each lane's weight (its key's, or its row's) gathered into the warp's R outputs, lane l
 * holding elements l, l + 32, ... (PL of them), by a shuffle per tile row. */
template <int R, int PL>
static __device__ inline void lane_gather(const float (*tile)[ATTN_DMAX + 1], int64_t n, int lane,
                                          int64_t dim, const float w[R], float acc[R][PL]) {
    for (int jj = 0; jj < n; jj++) {
        float t[PL];
        for (int u = 0; u < PL; u++) {
            int c = lane + 32 * u;
            t[u] = c < dim ? tile[jj][c] : 0.0f;
        }
        for (int r = 0; r < R; r++) {
            float wj = __shfl_sync(0xffffffffu, w[r], jj);
            for (int u = 0; u < PL; u++) acc[r][u] += wj * t[u];
        }
    }
}

/* Forward: a block takes ATTN_FWD_ROWS consecutive query rows of one (batch, head), a warp
 * ATTN_ROWS_PER_WARP of them; the keys come through shared memory 32 at a time, lane j holding
 * key j of the tile. Each lane scores its key against the warp's rows (their q read from shared
 * memory, the same address for every lane), a row's tile max and sum of exps are two butterflies
 * per 32 keys, and its output (lane l holding elements l, l + 32, ...: PL of them) takes each
 * key's probability from the key's lane by a shuffle. Per (row, key) pair about 8 warp
 * instructions at head_dim 64, where one warp per row with a butterfly per score took about 50.
 * The online softmax runs per tile of 32 keys (FlashAttention's), not per key. */
template <amp_dtype D, int PL>
static __global__ void attn_fwd_kernel(amp_attn_desc d, const void *q, const void *k,
                                       const void *v, const int32_t *kv_len, void *o, float *lse,
                                       unsigned long long *record) {
    __shared__ float ks[ATTN_TILE][ATTN_DMAX + 1], vs[ATTN_TILE][ATTN_DMAX + 1];
    __shared__ float qs[ATTN_FWD_ROWS][ATTN_DMAX];
    const int R = ATTN_ROWS_PER_WARP;
    int lane = threadIdx.x % AMP_LANES, warp = threadIdx.x / AMP_LANES;
    int64_t dim = d.head_dim, per = (d.seq + ATTN_FWD_ROWS - 1) / ATTN_FWD_ROWS;
    int64_t groups = d.batch * d.heads * per;
    float inv_keep = amp_dropout_scale(d.dropout_p);
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        int64_t bh = g / per, first = (g % per) * ATTN_FWD_ROWS, kvh = amp_attn_kv_of(&d, bh);
        int64_t len = batch_len(d, kv_len, bh / d.heads, record); /* the same for the block */
        int64_t i0 = first + (int64_t)warp * R;                   /* the warp's first row */
        float acc[R][PL], m[R], l[R];
        int64_t nk[R];
        for (int r = 0; r < R; r++) {
            m[r] = -INFINITY, l[r] = 0.0f;
            nk[r] = len >= 0 && i0 + r < d.seq ? amp_attn_keys(&d, i0 + r, len) : 0;
            for (int u = 0; u < PL; u++) acc[r][u] = len < 0 ? NAN : 0.0f;
        }
        int64_t last = first + ATTN_FWD_ROWS <= d.seq ? first + ATTN_FWD_ROWS - 1 : d.seq - 1;
        int64_t nk_block = len < 0 ? 0 : amp_attn_keys(&d, last, len);
        __syncthreads(); /* the previous group's tiles are consumed */
        load_rows<D>(qs, q, d, AMP_ATTN_Q, bh, first, ATTN_FWD_ROWS);
        for (int64_t t0 = 0; t0 < nk_block; t0 += ATTN_TILE) {
            int64_t n = nk_block - t0 < ATTN_TILE ? nk_block - t0 : ATTN_TILE, j = t0 + lane;
            __syncthreads(); /* the previous tile is consumed */
            load_tile_padded<D>(ks, k, d, AMP_ATTN_KV, kvh, t0, n);
            load_tile_padded<D>(vs, v, d, AMP_ATTN_KV, kvh, t0, n);
            __syncthreads();
            float s[R];
            lane_dots<R>(ks, lane, qs + warp * R, dim, s);
            float pz[R];
            for (int r = 0; r < R; r++) {
                float sc = j < nk[r] ? s[r] * d.scale : -INFINITY;
                float m_new = fmaxf(m[r], amp_warp_max(sc));
                float p = 0.0f, corr = 1.0f;
                if (m_new != -INFINITY) { /* a key of this row in the tiles so far */
                    corr = m[r] == -INFINITY ? 0.0f : amp_expf(m[r] - m_new);
                    p = sc == -INFINITY ? 0.0f : amp_expf(sc - m_new);
                }
                l[r] = l[r] * corr + amp_warp_sum(p);
                m[r] = m_new;
                for (int u = 0; u < PL; u++) acc[r][u] *= corr;
                uint64_t draw = amp_attn_draw(&d, bh, i0 + r, j);
                pz[r] = p == 0.0f ? 0.0f : p * amp_attn_keep(d.dropout_p, inv_keep, d.seed, draw);
            }
            lane_gather<R, PL>(vs, n, lane, dim, pz, acc);
        }
        for (int r = 0; r < R; r++) {
            int64_t i = i0 + r;
            if (i >= d.seq) break;
            float inv = amp_attn_inv_sum(l[r]), out[ATTN_PER_LANE] = {0};
            for (int u = 0; u < PL; u++) out[u] = len < 0 ? NAN : acc[r][u] * inv;
            store_row<D>(o, amp_attn_row(&d, AMP_ATTN_O, bh, i), dim, lane, out);
            if (lane == 0) lse[bh * d.seq + i] = len < 0 ? NAN : amp_attn_lse(m[r], l[r]);
        }
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
        int64_t at = amp_attn_row(&d, AMP_ATTN_O, row / d.seq, row % d.seq);
        load_row<D>(o, at, d.head_dim, lane, ov);
        load_row<D>(dout, at, d.head_dim, lane, dov);
        float s = dot(ov, dov);
        if (lane == 0) delta[row] = s;
    }
}

/* dq: a block takes ATTN_BWD_ROWS query rows of one (batch, head), a warp ATTN_BWD_PER_WARP of
 * them, lanes over the tile's 32 keys (k and v padded in shared memory): each lane recomputes
 * its key's s and dp for the warp's rows, dS = p (dp z - delta), and dq gathers dS scale k by a
 * shuffle per key, as the forward gathers p v. */
template <amp_dtype D, int PL>
static __global__ void attn_dq_kernel(amp_attn_desc d, const void *q, const void *k, const void *v,
                                      const int32_t *kv_len, const void *dout, const float *lse,
                                      const float *delta, void *dq, unsigned long long *record) {
    __shared__ float ks[ATTN_TILE][ATTN_DMAX + 1], vs[ATTN_TILE][ATTN_DMAX + 1];
    __shared__ float qs[ATTN_BWD_ROWS][ATTN_DMAX], dos[ATTN_BWD_ROWS][ATTN_DMAX];
    const int R = ATTN_BWD_PER_WARP;
    int lane = threadIdx.x % AMP_LANES, warp = threadIdx.x / AMP_LANES;
    int64_t dim = d.head_dim, per = (d.seq + ATTN_BWD_ROWS - 1) / ATTN_BWD_ROWS;
    int64_t groups = d.batch * d.heads * per;
    float inv_keep = amp_dropout_scale(d.dropout_p);
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        int64_t bh = g / per, first = (g % per) * ATTN_BWD_ROWS, kvh = amp_attn_kv_of(&d, bh);
        int64_t len = batch_len(d, kv_len, bh / d.heads, record);
        int64_t i0 = first + (int64_t)warp * R;
        float acc[R][PL], row_lse[R], row_delta[R];
        int64_t nk[R];
        for (int r = 0; r < R; r++) {
            bool active = i0 + r < d.seq;
            nk[r] = len >= 0 && active ? amp_attn_keys(&d, i0 + r, len) : 0;
            row_lse[r] = active ? lse[bh * d.seq + i0 + r] : 0.0f;
            row_delta[r] = active ? delta[bh * d.seq + i0 + r] : 0.0f;
            for (int u = 0; u < PL; u++) acc[r][u] = 0.0f;
        }
        int64_t last = first + ATTN_BWD_ROWS <= d.seq ? first + ATTN_BWD_ROWS - 1 : d.seq - 1;
        int64_t nk_block = len < 0 ? 0 : amp_attn_keys(&d, last, len);
        __syncthreads(); /* the previous group's tiles are consumed */
        load_rows<D>(qs, q, d, AMP_ATTN_Q, bh, first, ATTN_BWD_ROWS);
        load_rows<D>(dos, dout, d, AMP_ATTN_O, bh, first, ATTN_BWD_ROWS);
        for (int64_t t0 = 0; t0 < nk_block; t0 += ATTN_TILE) {
            int64_t n = nk_block - t0 < ATTN_TILE ? nk_block - t0 : ATTN_TILE, j = t0 + lane;
            __syncthreads();
            load_tile_padded<D>(ks, k, d, AMP_ATTN_KV, kvh, t0, n);
            load_tile_padded<D>(vs, v, d, AMP_ATTN_KV, kvh, t0, n);
            __syncthreads();
            float sc[R], dp[R], dsk[R];
            lane_dots<R>(ks, lane, qs + warp * R, dim, sc);
            lane_dots<R>(vs, lane, dos + warp * R, dim, dp);
            for (int r = 0; r < R; r++) {
                float ds = 0.0f;
                if (j < nk[r]) {
                    float p = amp_attn_prob(sc[r] * d.scale, row_lse[r]);
                    float z = amp_attn_keep(d.dropout_p, inv_keep, d.seed,
                                            amp_attn_draw(&d, bh, i0 + r, j));
                    ds = p * (dp[r] * z - row_delta[r]);
                }
                dsk[r] = ds * d.scale;
            }
            lane_gather<R, PL>(ks, n, lane, dim, dsk, acc);
        }
        for (int r = 0; r < R; r++) {
            if (i0 + r >= d.seq) break;
            float out[ATTN_PER_LANE] = {0};
            for (int u = 0; u < PL; u++) out[u] = len < 0 ? NAN : acc[r][u];
            store_row<D>(dq, amp_attn_row(&d, AMP_ATTN_Q, bh, i0 + r), dim, lane, out);
        }
    }
}

/* The value a head's attention writes for v (rounded to D), in f64 for a group's sum. */
template <amp_dtype D>
static __device__ inline double rounded(float v) {
    if (D == AMP_BF16) return (double)amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(v));
    if (D == AMP_F16) return (double)amp_f16_bits_to_f32(amp_f32_to_f16_bits(v));
    return (double)v;
}

/* dk, dv: a block takes ATTN_BWD_ROWS keys of one (batch, key/value head), a warp
 * ATTN_BWD_PER_WARP of them; for each query head of the group in order, lanes over a tile of 32
 * query rows (q and dO padded in shared memory, lse and delta beside them): each lane recomputes
 * its row's p and dS for the warp's keys; dv gathers p z dO and dk gathers dS scale q by a shuffle
 * per row. A head's dk and dv are rounded to D, as its own attention would write them, and summed
 * over the group in f64 (one head: those values), then rounded once: CPU's order. */
template <amp_dtype D, int PL>
static __global__ void attn_dkdv_kernel(amp_attn_desc d, const void *q, const void *k,
                                        const void *v, const int32_t *kv_len, const void *dout,
                                        const float *lse, const float *delta, void *dk, void *dv,
                                        unsigned long long *record) {
    __shared__ float qs[ATTN_TILE][ATTN_DMAX + 1], dos[ATTN_TILE][ATTN_DMAX + 1];
    __shared__ float kks[ATTN_BWD_ROWS][ATTN_DMAX], vvs[ATTN_BWD_ROWS][ATTN_DMAX];
    __shared__ float lses[ATTN_TILE], deltas[ATTN_TILE];
    const int R = ATTN_BWD_PER_WARP;
    int lane = threadIdx.x % AMP_LANES, warp = threadIdx.x / AMP_LANES;
    int64_t kv_seq = amp_attn_kv_seq(&d), kv_heads = amp_attn_kv_heads(&d);
    int64_t group = d.heads / kv_heads;
    int64_t dim = d.head_dim, per = (kv_seq + ATTN_BWD_ROWS - 1) / ATTN_BWD_ROWS;
    int64_t groups = d.batch * kv_heads * per;
    float inv_keep = amp_dropout_scale(d.dropout_p);
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
        int64_t kvh = g / per, first = (g % per) * ATTN_BWD_ROWS, b = kvh / kv_heads;
        int64_t len = batch_len(d, kv_len, b, record);
        int64_t j0 = first + (int64_t)warp * R; /* the warp's first key */
        double dks[R][PL], dvs[R][PL];
        for (int r = 0; r < R; r++)
            for (int u = 0; u < PL; u++) dks[r][u] = 0.0, dvs[r][u] = 0.0;
        /* Rows from the first that sees the block's first key, when causal; none when the
         * batch's length ends before that key. */
        int64_t i_block = len < 0 || first >= len ? d.seq : amp_attn_first_row(&d, first);
        __syncthreads(); /* the previous group's tiles are consumed */
        load_rows<D>(kks, k, d, AMP_ATTN_KV, kvh, first, ATTN_BWD_ROWS);
        load_rows<D>(vvs, v, d, AMP_ATTN_KV, kvh, first, ATTN_BWD_ROWS);
        for (int64_t hh = 0; hh < group; hh++) {
            int64_t bh = b * d.heads + (kvh % kv_heads) * group + hh;
            float dka[R][PL], dva[R][PL];
            for (int r = 0; r < R; r++)
                for (int u = 0; u < PL; u++) dka[r][u] = 0.0f, dva[r][u] = 0.0f;
            for (int64_t t0 = i_block; t0 < d.seq; t0 += ATTN_TILE) {
                int64_t n = d.seq - t0 < ATTN_TILE ? d.seq - t0 : ATTN_TILE, i = t0 + lane;
                __syncthreads();
                load_tile_padded<D>(qs, q, d, AMP_ATTN_Q, bh, t0, n);
                load_tile_padded<D>(dos, dout, d, AMP_ATTN_O, bh, t0, n);
                for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
                    lses[e] = lse[bh * d.seq + t0 + e];
                    deltas[e] = delta[bh * d.seq + t0 + e];
                }
                __syncthreads();
                int64_t nk = i < d.seq && len >= 0 ? amp_attn_keys(&d, i, len) : 0;
                float sc[R], dp[R], pzs[R], dsq[R];
                lane_dots<R>(qs, lane, kks + warp * R, dim, sc);
                lane_dots<R>(dos, lane, vvs + warp * R, dim, dp);
                for (int r = 0; r < R; r++) {
                    float pz = 0.0f, ds = 0.0f;
                    if (j0 + r < nk) { /* row i sees key j0 + r */
                        float p = amp_attn_prob(sc[r] * d.scale, lses[lane]);
                        float z = amp_attn_keep(d.dropout_p, inv_keep, d.seed,
                                                amp_attn_draw(&d, bh, i, j0 + r));
                        pz = p * z;
                        ds = p * (dp[r] * z - deltas[lane]);
                    }
                    pzs[r] = pz, dsq[r] = ds * d.scale;
                }
                lane_gather<R, PL>(dos, n, lane, dim, pzs, dva);
                lane_gather<R, PL>(qs, n, lane, dim, dsq, dka);
            }
            for (int r = 0; r < R; r++)
                for (int u = 0; u < PL; u++) {
                    dks[r][u] += rounded<D>(dka[r][u]);
                    dvs[r][u] += rounded<D>(dva[r][u]);
                }
        }
        for (int r = 0; r < R; r++) {
            if (j0 + r >= kv_seq) break;
            float dko[ATTN_PER_LANE] = {0}, dvo[ATTN_PER_LANE] = {0};
            for (int u = 0; u < PL; u++) {
                dko[u] = len < 0 ? NAN : (float)dks[r][u];
                dvo[u] = len < 0 ? NAN : (float)dvs[r][u];
            }
            int64_t key = amp_attn_row(&d, AMP_ATTN_KV, kvh, j0 + r);
            store_row<D>(dk, key, dim, lane, dko);
            store_row<D>(dv, key, dim, lane, dvo);
        }
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
template <amp_dtype D, int PL>
static void launch_fwd_pl(const amp_attn_desc *d, const void *q, const void *k, const void *v,
                          const int32_t *kv_len, void *o, float *lse, unsigned long long *record,
                          cudaStream_t stream) {
    int64_t groups = d->batch * d->heads * ((d->seq + ATTN_FWD_ROWS - 1) / ATTN_FWD_ROWS);
    unsigned grid = (unsigned)(groups < AMP_CUDA_MAX_BLOCKS ? groups : AMP_CUDA_MAX_BLOCKS);
    attn_fwd_kernel<D, PL><<<grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(*d, q, k, v, kv_len, o,
                                                                         lse, record);
}

/* The forward for head_dim's elements per lane (PL = ceil(head_dim / 32), at most 4). */
template <amp_dtype D>
static void launch_fwd(const amp_attn_desc *d, const void *q, const void *k, const void *v,
                       const int32_t *kv_len, void *o, float *lse, unsigned long long *record,
                       cudaStream_t stream) {
    switch ((d->head_dim + 31) / 32) {
    case 1: launch_fwd_pl<D, 1>(d, q, k, v, kv_len, o, lse, record, stream); break;
    case 2: launch_fwd_pl<D, 2>(d, q, k, v, kv_len, o, lse, record, stream); break;
    case 3: launch_fwd_pl<D, 3>(d, q, k, v, kv_len, o, lse, record, stream); break;
    default: launch_fwd_pl<D, 4>(d, q, k, v, kv_len, o, lse, record, stream); break;
    }
}

template <amp_dtype D, int PL>
static void launch_bwd_pl(const amp_attn_desc *d, const void *q, const void *k, const void *v,
                          const int32_t *kv_len, const void *dout, const float *lse,
                          const float *delta, void *dq, void *dk, void *dv,
                          unsigned long long *record, cudaStream_t stream) {
    int64_t kv_blocks = d->batch * amp_attn_kv_heads(d) *
                        ((amp_attn_kv_seq(d) + ATTN_BWD_ROWS - 1) / ATTN_BWD_ROWS);
    unsigned kv_grid = (unsigned)(kv_blocks < AMP_CUDA_MAX_BLOCKS ? kv_blocks : AMP_CUDA_MAX_BLOCKS);
    attn_dkdv_kernel<D, PL><<<kv_grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(
            *d, q, k, v, kv_len, dout, lse, delta, dk, dv, record);
    int64_t groups = d->batch * d->heads * ((d->seq + ATTN_BWD_ROWS - 1) / ATTN_BWD_ROWS);
    unsigned grid = (unsigned)(groups < AMP_CUDA_MAX_BLOCKS ? groups : AMP_CUDA_MAX_BLOCKS);
    attn_dq_kernel<D, PL><<<grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(*d, q, k, v, kv_len, dout,
                                                                        lse, delta, dq, record);
}

template <amp_dtype D>
static void launch_bwd(const amp_attn_desc *d, const void *q, const void *k, const void *v,
                       const int32_t *kv_len, const void *o, const void *dout, const float *lse,
                       float *delta, void *dq, void *dk, void *dv, unsigned long long *record,
                       unsigned grid, cudaStream_t stream) {
    attn_delta_kernel<D><<<grid, ATTN_WARPS * AMP_LANES, 0, stream>>>(*d, o, dout, delta);
    void (*run)(const amp_attn_desc *, const void *, const void *, const void *, const int32_t *,
                const void *, const float *, const float *, void *, void *, void *,
                unsigned long long *, cudaStream_t);
    switch ((d->head_dim + 31) / 32) {
    case 1: run = launch_bwd_pl<D, 1>; break;
    case 2: run = launch_bwd_pl<D, 2>; break;
    case 3: run = launch_bwd_pl<D, 3>; break;
    default: run = launch_bwd_pl<D, 4>; break;
    }
    run(d, q, k, v, kv_len, dout, lse, delta, dq, dk, dv, record, stream);
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
    unsigned long long *record = dev->bad_index.words;
    switch (d->dt) {
    case AMP_F16: launch_fwd<AMP_F16>(d, q, k, v, kv_len, o, lse, record, stream); break;
    case AMP_BF16: launch_fwd<AMP_BF16>(d, q, k, v, kv_len, o, lse, record, stream); break;
    default: launch_fwd<AMP_F32>(d, q, k, v, kv_len, o, lse, record, stream); break;
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
    unsigned long long *record = dev->bad_index.words;
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
