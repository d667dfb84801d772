/* Half NCHW activations to and from the f32 channel-blocked layouts (channel_blocks_avx512.c),
 * bit for bit against amp_cpu_cast followed by a scalar reorder written here: every f16 and bf16
 * bit pattern widened (NaN, infinities, subnormals, signed zeros), f32 values at and around
 * every rounding boundary narrowed, plane sizes with and without a remainder of 16 positions,
 * nChw16c and channels-last layouts. Then the half convolutions that use them (conv.c): f16
 * forward, backward data and backward weight give the bits of the f32 convolution of the
 * widened operands rounded back, which is what the widening pass and oneDNN's reorder gave. */
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "test_data.h"
#include "test_util.h"

/* Where element (i, c, p) of an n x c x hw tensor sits in layout l. */
static int64_t at(const amp_c16_layout *l, int64_t i, int64_t c, int64_t p) {
    return i * l->n + (c / 16) * l->block + p * l->hw + c % 16;
}

/* The layouts checked for c channels and hw positions: nChw16c, channels-last, and nChw16c with
 * a gap after each position and each sample (strides oneDNN does not pick, but the layout
 * allows). *size: the elements the layout spans. */
static amp_c16_layout layout_of(int which, int64_t n, int64_t c, int64_t hw, int64_t *size) {
    amp_c16_layout l;
    if (which == 0) l = (amp_c16_layout){.n = c * hw, .block = 16 * hw, .hw = 16};
    else if (which == 1) l = (amp_c16_layout){.n = hw * c, .block = 16, .hw = c};
    else l = (amp_c16_layout){.n = c * hw * 20 + 7, .block = 20 * hw, .hw = 20};
    *size = n * l.n;
    return l;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void check_widen(amp_dtype dt, int which, int64_t n, int64_t c, int64_t hw) {
    int64_t numel = n * c * hw, size;
    amp_c16_layout l = layout_of(which, n, c, hw, &size);
    uint16_t *src = malloc((size_t)numel * 2);
    float *flat = malloc((size_t)numel * 4), *dst = malloc((size_t)size * 4);
    /* Every bit pattern, in an order that puts different ones side by side. */
    for (int64_t i = 0; i < numel; i++) src[i] = (uint16_t)((uint64_t)i * 40503u + 11u);
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), flat, AMP_F32, src, dt, numel));
    memset(dst, 0xa5, (size_t)size * 4);
    amp_cpu_widen_to_c16(dst, &l, src, dt, n, c, hw);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++)
                bad += bits_of(dst[at(&l, i, ch, p)]) != bits_of(flat[(i * c + ch) * hw + p]);
    CHECK_MSG(bad == 0, "widen %s layout %d n=%lld c=%lld hw=%lld: %lld elements differ",
              amp_dtype_name(dt), which, (long long)n, (long long)c, (long long)hw,
              (long long)bad);
    free(src), free(flat), free(dst);
}

/* An f32 value for narrowing test k: half values, the midpoints between neighbours (ties to
 * even), one f32 ulp either side of them, overflow, NaN, infinities, tiny values. */
static float narrow_value(amp_dtype dt, uint64_t k) {
    uint16_t h = (uint16_t)(test_rng_next() & 0xffff);
    float v = dt == AMP_F16 ? amp_f16_bits_to_f32(h) : amp_bf16_bits_to_f32(h);
    uint32_t u = bits_of(v);
    switch (k % 8) {
    case 0: return v;
    case 1: return float_of(u + (dt == AMP_BF16 ? 0x8000u : 0x1000u)); /* a midpoint for normals */
    case 2: return float_of(u + (dt == AMP_BF16 ? 0x7fffu : 0x0fffu));
    case 3: return float_of(u + (dt == AMP_BF16 ? 0x8001u : 0x1001u));
    case 4: return (float)((test_uniform() - 0.5) * 200000.0); /* beyond f16's range too */
    case 5: return (float)((test_uniform() - 0.5) * 1e-6);     /* f16 subnormals, underflow */
    case 6: return float_of((uint32_t)test_rng_next());         /* any f32, NaN payloads too */
    default: return (k / 8) % 2 ? -INFINITY : -0.0f;
    }
}

static void check_narrow(amp_dtype dt, int which, int64_t n, int64_t c, int64_t hw) {
    int64_t numel = n * c * hw, size;
    amp_c16_layout l = layout_of(which, n, c, hw, &size);
    float *flat = malloc((size_t)numel * 4), *src = malloc((size_t)size * 4);
    uint16_t *want = malloc((size_t)numel * 2), *got = malloc((size_t)numel * 2);
    for (int64_t i = 0; i < size; i++) src[i] = NAN; /* outside the tensor: never read */
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t e = (i * c + ch) * hw + p;
                flat[e] = src[at(&l, i, ch, p)] = narrow_value(dt, (uint64_t)e);
            }
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), want, dt, flat, AMP_F32, numel));
    memset(got, 0xa5, (size_t)numel * 2);
    amp_cpu_narrow_from_c16(got, dt, src, &l, n, c, hw);
    int64_t bad = 0;
    for (int64_t i = 0; i < numel; i++) bad += got[i] != want[i];
    CHECK_MSG(bad == 0, "narrow %s layout %d n=%lld c=%lld hw=%lld: %lld elements differ",
              amp_dtype_name(dt), which, (long long)n, (long long)c, (long long)hw,
              (long long)bad);
    free(flat), free(src), free(want), free(got);
}

static void test_conversions(void) {
    static const int64_t planes[] = {1, 15, 16, 17, 49, 196, 784};
    static const amp_dtype dts[] = {AMP_F16, AMP_BF16};
    for (int t = 0; t < 2; t++)
        for (int which = 0; which < 3; which++)
            for (size_t k = 0; k < sizeof planes / sizeof *planes; k++)
                for (int64_t c = 16; c <= 48; c += 32) {
                    check_widen(dts[t], which, 3, c, planes[k]);
                    check_narrow(dts[t], which, 3, c, planes[k]);
                }
    /* Enough elements for the threaded loop, and all 65536 patterns several times over. */
    check_widen(AMP_F16, 0, 64, 32, 196);
    check_narrow(AMP_F16, 0, 64, 32, 196);
    CHECK(!amp_cpu_c16_vectorised(AMP_F16, 24));
    CHECK(!amp_cpu_c16_vectorised(AMP_F32, 16));
}

/* ---- f16 convolutions: the bits of the f32 convolution of the widened operands ------------- */

static amp_conv2d_desc conv_desc(int64_t n, int64_t c_in, int64_t h, int64_t w, int64_t c_out,
                                 int64_t k, int64_t pad, amp_dtype dt) {
    return (amp_conv2d_desc){.n = n, .c_in = c_in, .h_in = h, .w_in = w, .c_out = c_out,
                             .kh = k, .kw = k, .stride_h = 1, .stride_w = 1, .pad_h = pad,
                             .pad_w = pad, .h_out = h + 2 * pad - k + 1,
                             .w_out = w + 2 * pad - k + 1, .dtype = dt};
}

/* f16 and f32 copies of n random values (the f32 one exactly the f16 values). */
typedef struct pair {
    void *h;
    float *f;
    int64_t n;
} pair;

static pair pair_random(int64_t n) {
    pair p = {test_random_tensor(AMP_F16, n, -1, 1), malloc((size_t)n * 4 + 4), n};
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), p.f, AMP_F32, p.h, AMP_F16, n));
    return p;
}

static void pair_free(pair *p) { free(p->h), free(p->f); }

/* got (f16) against want (f32) rounded to f16, bit for bit. */
static void check_rounded(const char *what, const amp_conv2d_desc *d, const void *got,
                          const float *want, int64_t n) {
    uint16_t *w = malloc((size_t)n * 2 + 2);
    CHECK_OK(amp_cpu_cast(amp_cpu_device(), w, AMP_F16, want, AMP_F32, n));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += ((const uint16_t *)got)[i] != w[i];
    CHECK_MSG(bad == 0, "f16 %s n=%lld %lld->%lld %lldx%lld: %lld of %lld elements differ", what,
              (long long)d->n, (long long)d->c_in, (long long)d->c_out, (long long)d->h_in,
              (long long)d->w_in, (long long)bad, (long long)n);
    free(w);
}

static void check_conv_f16(amp_conv2d_desc d) {
    amp_conv2d_desc f = d;
    f.dtype = AMP_F32;
    int64_t nx = d.n * d.c_in * d.h_in * d.w_in, nw = d.c_out * d.c_in * d.kh * d.kw;
    int64_t ny = d.n * d.c_out * d.h_out * d.w_out;
    pair x = pair_random(nx), w = pair_random(nw), dy = pair_random(ny);
    float *bias = test_random_tensor(AMP_F32, d.c_out, -1, 1);
    uint16_t *y = malloc((size_t)ny * 2), *dx = malloc((size_t)nx * 2), *dw = malloc((size_t)nw * 2);
    float *fy = malloc((size_t)ny * 4), *fdx = malloc((size_t)nx * 4), *fdw = malloc((size_t)nw * 4);
    float db[64], fdb[64];
    CHECK_OK(amp_cpu_conv2d_fwd(amp_cpu_device(), &d, x.h, w.h, bias, y));
    CHECK_OK(amp_cpu_conv2d_fwd(amp_cpu_device(), &f, x.f, w.f, bias, fy));
    check_rounded("forward", &d, y, fy, ny);
    CHECK_OK(amp_cpu_conv2d_bwd_data(amp_cpu_device(), &d, dy.h, w.h, dx));
    CHECK_OK(amp_cpu_conv2d_bwd_data(amp_cpu_device(), &f, dy.f, w.f, fdx));
    check_rounded("backward data", &d, dx, fdx, nx);
    /* With fewer than 8 input channels, channels-last and sliced over the batch: these batches
     * fit in one slice, so the f32 weight gradient is rounded once, as here. */
    CHECK_OK(amp_cpu_conv2d_bwd_weight(amp_cpu_device(), &d, x.h, dy.h, dw, db));
    CHECK_OK(amp_cpu_conv2d_bwd_weight(amp_cpu_device(), &f, x.f, dy.f, fdw, fdb));
    check_rounded("backward weight", &d, dw, fdw, nw);
    CHECK(memcmp(db, fdb, (size_t)d.c_out * sizeof *db) == 0);
    pair_free(&x), pair_free(&w), pair_free(&dy);
    free(bias), free(y), free(dx), free(dw), free(fy), free(fdx), free(fdw);
}

static void test_conv_f16(void) {
    check_conv_f16(conv_desc(8, 16, 14, 14, 32, 5, 2, AMP_F16)); /* the ConvNet's second layer */
    check_conv_f16(conv_desc(8, 1, 28, 28, 16, 5, 2, AMP_F16));  /* its first */
    check_conv_f16(conv_desc(5, 32, 9, 7, 48, 3, 1, AMP_F16));   /* 63 positions: a remainder */
    check_conv_f16(conv_desc(3, 24, 6, 6, 16, 3, 0, AMP_F16));   /* 24 channels: not direct */
    check_conv_f16(conv_desc(4, 3, 10, 10, 32, 3, 1, AMP_F16));  /* channels-last dy, 2 blocks */
}

int main(void) {
    test_rng_seed(20261127);
    if (amp_cpu_c16_vectorised(AMP_F16, 16)) test_conversions();
    else printf("test_cpu_channel_blocks: no AVX-512 here (or AMP_CPU_ISA caps it): conversions not run\n");
    test_conv_f16();
    return test_summary("test_cpu_channel_blocks");
}
