/* The order in which the CPU backend's batch norm entries visit a channel (batchnorm.c,
 * sync_batchnorm.c; batchnorm.cu and sync_batchnorm.cu copy it on the device): one order for
 * every sum, so a channel's statistics do not depend on the loop, thread or backend. */
#ifndef AMP_KERNELS_CPU_BATCHNORM_TILES_H
#define AMP_KERNELS_CPU_BATCHNORM_TILES_H

#include <string.h>

#include "core/backend.h"
#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/batchnorm.h"

/* A channel is visited in tiles: the n planes in order (plane i of channel ch starts at
 * (i * c + ch) * hw), each plane in pieces of AMP_CPU_REDUCE_CHUNK. Every loop over a channel
 * uses this one order, so the sums do not depend on which loop or thread runs them. */
static inline int64_t channel_tiles(const amp_bn_desc *d) {
    return d->n * ((d->hw + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK);
}

/* Tile t of channel ch: returns its first element's offset and sets its length. */
static inline int64_t channel_tile(const amp_bn_desc *d, int64_t ch, int64_t t, int64_t *len) {
    int64_t per_plane = (d->hw + AMP_CPU_REDUCE_CHUNK - 1) / AMP_CPU_REDUCE_CHUNK;
    int64_t i = t / per_plane, t0 = (t % per_plane) * AMP_CPU_REDUCE_CHUNK;
    *len = d->hw - t0 < AMP_CPU_REDUCE_CHUNK ? d->hw - t0 : AMP_CPU_REDUCE_CHUNK;
    return (i * d->c + ch) * d->hw + t0;
}

/* The fixed tree that combines 8 double lanes. */
static inline double lanes_total(const double lane[8]) {
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* Element i of a tensor of dtype dt (f32 or bf16, a constant where these are called, so that
 * each loop is built per dtype) as f32, and the store that rounds back as amp_cpu_cast does: a
 * bf16 value is widened in the register that the loop computes in (a shift) instead of through
 * a copy, which made bf16 batch norm slower than f32. The generic loops take f16 (no such
 * shift) through tiles; the f16 load here serves batchnorm_avx512.c's scalar tails, which read
 * f16 in place (F16C). */
AMP_CPU_CLONE_INLINE float bn_load(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F16) return amp_f16_bits_to_f32(((const uint16_t *)p)[i]);
    return dt == AMP_BF16 ? amp_bf16_bits_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

AMP_CPU_CLONE_INLINE void bn_store(void *p, amp_dtype dt, int64_t i, float v) {
    if (dt == AMP_BF16) ((uint16_t *)p)[i] = amp_f32_to_bf16_bits(v);
    else ((float *)p)[i] = v;
}

/* Eight consecutive elements from i as doubles, for the sums' eight lanes: lane j of a sum
 * takes the elements k + j, and GCC did not vectorise that loop over j written as scalars (it
 * ran one double at a time). Vector extensions keep each lane's operations and their order, so
 * the sums have the scalar loop's bits at any vector width. */
typedef double bn_v8d __attribute__((vector_size(64)));

typedef float bn_v8f __attribute__((vector_size(32)));
typedef int32_t bn_v8i __attribute__((vector_size(32)));

/* Eight consecutive elements from i as f32 (through a pointer: a vector return value would
 * change the baseline clone's ABI). */
AMP_CPU_CLONE_INLINE void bn_load8f(const void *p, amp_dtype dt, int64_t i, bn_v8f *out) {
    typedef uint16_t v8u16 __attribute__((vector_size(16)));
    typedef uint32_t v8u32 __attribute__((vector_size(32)));
    if (dt == AMP_BF16) {
        v8u16 h;
        memcpy(&h, (const uint16_t *)p + i, sizeof h);
        v8u32 w = __builtin_convertvector(h, v8u32) << 16;
        memcpy(out, &w, sizeof *out);
    } else {
        memcpy(out, (const float *)p + i, sizeof *out);
    }
}

AMP_CPU_CLONE_INLINE void bn_load8(const void *p, amp_dtype dt, int64_t i, bn_v8d *out) {
    bn_v8f v;
    bn_load8f(p, dt, i, &v);
    *out = __builtin_convertvector(v, bn_v8d);
}

/* What a channel's sums add up, per element (x and dy widened to double, c a per-channel
 * double): x (batch norm's mean); (x - c)^2 (its variance); x - c and (x - c)^2 (synchronised
 * batch norm's statistics about a centre); dy and (x - c) dy (both backwards; with y given, dy
 * masked by ReLU's backward on y first, kernels/math/relu.h's amp_relu_bwd). The formulas are
 * kernels/math/batchnorm.h's and sync_batchnorm.h's, in the same order of operations. */
typedef enum bn_sum_kind { BN_SUM_X, BN_SUM_SQ_DEV, BN_SUM_CENTERED, BN_SUM_DY } bn_sum_kind;

/* Element i of dy, masked by ReLU's backward on y[i] when y is given. */
AMP_CPU_CLONE_INLINE float bn_load_dy(const void *dy, const void *y, amp_dtype dt, int64_t i) {
    float g = bn_load(dy, dt, i);
    return y ? amp_relu_bwd(bn_load(y, dt, i), g) : g;
}

/* amp_relu_bwd on eight lanes: dy where !(y <= 0) (y > 0 or NaN), else +0. */
AMP_CPU_CLONE_INLINE void bn_load8_dy(const void *dy, const void *y, amp_dtype dt, int64_t i,
                                      bn_v8d *out) {
    bn_v8f g, yv;
    bn_load8f(dy, dt, i, &g);
    if (y) {
        bn_load8f(y, dt, i, &yv);
        bn_v8i keep = ~(yv <= 0.0f), bits;
        memcpy(&bits, &g, sizeof bits);
        bits &= keep;
        memcpy(&g, &bits, sizeof g);
    }
    *out = __builtin_convertvector(g, bn_v8d);
}

AMP_CPU_CLONE_INLINE void bn_sum_step8(bn_sum_kind kind, amp_dtype dt, const void *x,
                                       const void *dy, const void *y, int64_t at, double c,
                                       bn_v8d *a, bn_v8d *b) {
    bn_v8d xv, gv;
    bn_load8(x, dt, at, &xv);
    switch (kind) {
    case BN_SUM_X: *a += xv; break;
    case BN_SUM_SQ_DEV: xv -= c; *a += xv * xv; break;
    case BN_SUM_CENTERED: xv -= c; *a += xv; *b += xv * xv; break;
    case BN_SUM_DY: bn_load8_dy(dy, y, dt, at, &gv); *a += gv; *b += (xv - c) * gv; break;
    }
}

AMP_CPU_CLONE_INLINE void bn_sum_step1(bn_sum_kind kind, amp_dtype dt, const void *x,
                                       const void *dy, const void *y, int64_t at, double c,
                                       double *a, double *b) {
    float xv = bn_load(x, dt, at);
    switch (kind) {
    case BN_SUM_X: *a += (double)xv; break;
    case BN_SUM_SQ_DEV: *a += amp_bn_sq_dev(xv, c); break;
    case BN_SUM_CENTERED: *a += (double)xv - c; *b += amp_bn_sq_dev(xv, c); break;
    case BN_SUM_DY: {
        float gv = bn_load_dy(dy, y, dt, at);
        *a += (double)gv;
        *b += amp_bn_dy_dev(xv, gv, c);
        break;
    }
    }
}

/* Tiles summed side by side. Each tile's eight lanes are chains of additions of their own, so
 * running BN_TILE_GROUP tiles in step changes no bit of any sum, and keeps that many additions
 * in flight: one tile at a time ran at the adder's latency (8 elements per 4 cycles). */
#define BN_TILE_GROUP 4

/* batchnorm_avx512.c: whether its loops run for d (amp_cpu_avx512_kernels(); f32, bf16 and f16
 * are all read in place there); then channel_sums, the forward's normalising pass
 * (y = amp_bn_apply(x, scale, shift), relu with d->relu) and the dx loop of channel ch, with the
 * generic loops' bits. */
bool amp_cpu_bn_vectorised(const amp_bn_desc *d);
void amp_cpu_bn_sums_avx512(const amp_bn_desc *d, bn_sum_kind kind, const void *x, const void *dy,
                            const void *y, int64_t ch, double c, double *s1, double *s2);
void amp_cpu_bn_apply_avx512(const amp_bn_desc *d, const void *x, int64_t ch, float scale,
                             float shift, void *y);
void amp_cpu_bn_bwd_dx_avx512(const amp_bn_desc *d, const void *x, const void *dy, const void *y,
                              int64_t ch, float mean, float proj, float mean_dy, float k,
                              void *dx);

/* Channel ch's sums of `kind` (*s2 only for the kinds with two; y only for BN_SUM_DY, may be
 * NULL), for dt f32 or bf16: each tile's lane j takes its elements k + j, the lanes join by
 * lanes_total, the tiles add up in order. */
AMP_CPU_CLONE_INLINE void channel_sums_typed(const amp_bn_desc *d, amp_dtype dt, bn_sum_kind kind,
                                             const void *x, const void *dy, const void *y,
                                             int64_t ch, double c, double *s1, double *s2) {
    double a = 0.0, b = 0.0;
    int64_t tiles = channel_tiles(d);
    for (int64_t t = 0; t < tiles; t += BN_TILE_GROUP) {
        int g = tiles - t < BN_TILE_GROUP ? (int)(tiles - t) : BN_TILE_GROUP;
        int64_t off[BN_TILE_GROUP], len[BN_TILE_GROUP], common = AMP_CPU_REDUCE_CHUNK, k = 0;
        bn_v8d va[BN_TILE_GROUP], vb[BN_TILE_GROUP];
        for (int i = 0; i < g; i++) {
            off[i] = channel_tile(d, ch, t + i, &len[i]);
            common = len[i] < common ? len[i] : common;
            va[i] = vb[i] = (bn_v8d){0};
        }
        if (g == BN_TILE_GROUP)
            for (; k + 8 <= common; k += 8)
                for (int i = 0; i < BN_TILE_GROUP; i++)
                    bn_sum_step8(kind, dt, x, dy, y, off[i] + k, c, &va[i], &vb[i]);
        for (int i = 0; i < g; i++) {
            int64_t j = k;
            for (; j + 8 <= len[i]; j += 8)
                bn_sum_step8(kind, dt, x, dy, y, off[i] + j, c, &va[i], &vb[i]);
            double la[8], lb[8];
            memcpy(la, &va[i], sizeof la);
            memcpy(lb, &vb[i], sizeof lb);
            for (; j < len[i]; j++)
                bn_sum_step1(kind, dt, x, dy, y, off[i] + j, c, &la[j & 7], &lb[j & 7]);
            a += lanes_total(la);
            b += lanes_total(lb);
        }
    }
    *s1 = a;
    if (s2) *s2 = b;
}

/* channel_sums_typed for d's dtype, through batchnorm_avx512.c where it runs (any dtype);
 * elsewhere f32 or bf16: f16 comes here as its f32 copy (bn_through_f32_copies). */
AMP_CPU_CLONE_INLINE void channel_sums(const amp_bn_desc *d, bn_sum_kind kind, const void *x,
                                       const void *dy, const void *y, int64_t ch, double c,
                                       double *s1, double *s2) {
    if (amp_cpu_bn_vectorised(d)) amp_cpu_bn_sums_avx512(d, kind, x, dy, y, ch, c, s1, s2);
    else if (d->dtype == AMP_BF16) channel_sums_typed(d, AMP_BF16, kind, x, dy, y, ch, c, s1, s2);
    else channel_sums_typed(d, AMP_F32, kind, x, dy, y, ch, c, s1, s2);
}

/* Whether d's passes run on f32 copies of each channel: f16 where the AVX-512 loops do not run
 * (batchnorm.c's training entries, widening each channel once). */
static inline bool bn_through_f32_copies(const amp_bn_desc *d) {
    return d->dtype == AMP_F16 && !amp_cpu_bn_vectorised(d);
}

/* dx over channel ch from the channel's folded backward terms (kernels/math/batchnorm.h), for dt
 * f32 or bf16 (direct) or f16 (tiles); dy masked by ReLU's backward on y when y is given. dx may
 * alias dy: each element is read before it is written. */
AMP_CPU_CLONE_INLINE void channel_bwd_dx_typed(const amp_bn_desc *d, amp_dtype dt, const void *x,
                                               const void *dy, const void *y, int64_t ch,
                                               float mean, float proj, float mean_dy, float k,
                                               void *dx) {
    float bx[AMP_CPU_REDUCE_CHUNK], bdy[AMP_CPU_REDUCE_CHUNK], by[AMP_CPU_REDUCE_CHUNK];
    for (int64_t t = 0; t < channel_tiles(d); t++) {
        int64_t len, off = channel_tile(d, ch, t, &len);
        if (dt != AMP_F16) {
            for (int64_t e = off; e < off + len; e++)
                bn_store(dx, dt, e,
                         amp_bn_bwd_dx(bn_load(x, dt, e), bn_load_dy(dy, y, dt, e), mean, proj,
                                       mean_dy, k));
            continue;
        }
        const float *xv = tile_in(x, dt, off, len, bx);
        const float *gv = tile_in(dy, dt, off, len, bdy);
        const float *yv = y ? tile_in(y, dt, off, len, by) : NULL;
        float *o = tile_out(dx, dt, off, bdy);
        for (int64_t e = 0; e < len; e++)
            o[e] = amp_bn_bwd_dx(xv[e], yv ? amp_relu_bwd(yv[e], gv[e]) : gv[e], mean, proj,
                                 mean_dy, k);
        tile_out_store(dx, dt, off, len, o);
    }
}

/* The dx loop both batch norms' backward entries end with, for d's dtype (y: as above), through
 * batchnorm_avx512.c where it runs. */
AMP_CPU_CLONE_INLINE void channel_bwd_dx_tiles(const amp_bn_desc *d, const void *x, const void *dy,
                                               const void *y, int64_t ch, float mean, float proj,
                                               float mean_dy, float k, void *dx) {
    amp_dtype dt = d->dtype;
    if (amp_cpu_bn_vectorised(d))
        amp_cpu_bn_bwd_dx_avx512(d, x, dy, y, ch, mean, proj, mean_dy, k, dx);
    else if (dt == AMP_BF16)
        channel_bwd_dx_typed(d, AMP_BF16, x, dy, y, ch, mean, proj, mean_dy, k, dx);
    else if (dt == AMP_F16)
        channel_bwd_dx_typed(d, AMP_F16, x, dy, y, ch, mean, proj, mean_dy, k, dx);
    else channel_bwd_dx_typed(d, AMP_F32, x, dy, y, ch, mean, proj, mean_dy, k, dx);
}

#endif
