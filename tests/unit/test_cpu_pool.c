/* CPU max pooling (pool.c) against a naive reference written here with PyTorch's rules
 * (padding never wins; the first maximum in row-major window order holds the argmax; NaN wins),
 * in f32, f16 and bf16; the backward, which finds the argmax again from x, with overlapping
 * windows (stride < k) against a double accumulation, and each rule seen through it (a one-hot
 * dy lands on the window's argmax); shape and argument errors; thread determinism. The 2x2
 * stride-2 pooling (sixteen outputs per vector on AVX-512, pool_2x2_avx512.c) is also checked bit
 * for bit on rows of several vectors with NaN, signed zeros and infinities in every dtype. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "test_data.h"
#include "test_util.h"

static amp_pool_desc make_desc(amp_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                               int64_t s, int64_t p) {
    return (amp_pool_desc){.n = n, .c = c, .h_in = h, .w_in = w, .k = k, .stride = s, .pad = p,
                           .h_out = (h + 2 * p - k) / s + 1, .w_out = (w + 2 * p - k) / s + 1,
                           .dtype = dt};
}

/* Forward and backward of one configuration on values drawn from a few levels (so ties are
 * common), all negative (so a zero from padding would win if padding took part). */
static void check_config(amp_dtype dt, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                         int64_t s, int64_t p) {
    amp_pool_desc d = make_desc(dt, n, c, h, w, k, s, p);
    int64_t planes = n * c, in_sz = h * w, out_sz = d.h_out * d.w_out;
    size_t in_bytes = (size_t)(planes * in_sz) * test_dtype_size(dt);
    size_t out_bytes = (size_t)(planes * out_sz) * test_dtype_size(dt);
    void *x = malloc(in_bytes), *y = malloc(out_bytes);
    void *dy = malloc(out_bytes), *dx = malloc(in_bytes);
    double *ref_dx = calloc((size_t)(planes * in_sz), sizeof *ref_dx);
    for (int64_t i = 0; i < planes * in_sz; i++)
        test_store(x, dt, i, -1.0f - (float)(int)(test_uniform() * 4));
    for (int64_t i = 0; i < planes * out_sz; i++)
        test_store(dy, dt, i, (float)(test_uniform() * 2 - 1));
    CHECK_OK(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y));
    memset(dx, 0xff, in_bytes); /* NaN: every element must be written */
    CHECK_OK(amp_cpu_maxpool_bwd(amp_cpu_device(), &d, dy, x, dx));
    int bad = 0;
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oh = 0; oh < d.h_out; oh++)
            for (int64_t ow = 0; ow < d.w_out; ow++) {
                float best = -INFINITY;
                int64_t best_i = -1;
                for (int64_t ih = oh * s - p; ih < oh * s - p + k; ih++)
                    for (int64_t iw = ow * s - p; iw < ow * s - p + k; iw++) {
                        if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                        float v = test_load(x, dt, pl * in_sz + ih * w + iw);
                        if (best_i < 0 || v > best) best = v, best_i = ih * w + iw;
                    }
                int64_t o = pl * out_sz + oh * d.w_out + ow;
                bad += test_load(y, dt, o) != best;
                ref_dx[pl * in_sz + best_i] += test_load(dy, dt, o);
            }
    CHECK_MSG(bad == 0, "maxpool %s k%lld s%lld p%lld: %d outputs wrong", amp_dtype_name(dt),
              (long long)k, (long long)s, (long long)p, bad);
    bad = 0;
    double ulp = dt == AMP_F32 ? 0x1p-22 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
    for (int64_t i = 0; i < planes * in_sz; i++)
        bad += !(fabs(test_load(dx, dt, i) - ref_dx[i]) <=
                 ulp * (fabs(ref_dx[i]) + 1e-3) * (double)(k * k)); /* a NaN is wrong */
    CHECK_MSG(bad == 0, "maxpool bwd %s k%lld s%lld p%lld: %d wrong", amp_dtype_name(dt),
              (long long)k, (long long)s, (long long)p, bad);
    free(x), free(y), free(dy), free(dx), free(ref_dx);
}

/* The input index that output o's window picks, seen through the backward: dy one-hot at o must
 * come back as dx one-hot there, with every other element an exact 0. -1 when it does not. */
static int64_t picked_by(const amp_pool_desc *d, const float *x, int64_t o) {
    int64_t in_n = d->n * d->c * d->h_in * d->w_in, out_n = d->n * d->c * d->h_out * d->w_out;
    float *dy = calloc((size_t)out_n, sizeof *dy), *dx = malloc((size_t)in_n * sizeof *dx);
    dy[o] = 1.0f;
    int64_t at = -1, ones = 0, others = 0;
    CHECK_OK(amp_cpu_maxpool_bwd(amp_cpu_device(), d, dy, x, dx));
    for (int64_t i = 0; i < in_n; i++) {
        if (dx[i] == 1.0f) at = i, ones++;
        else if (dx[i] != 0.0f) others++;
    }
    free(dy), free(dx);
    return ones == 1 && others == 0 ? at : -1;
}

/* Ties, NaN, -inf windows and padding, on one 4x4 plane with k 2, stride 1, pad 1. */
static void test_rules(void) {
    amp_pool_desc d = make_desc(AMP_F32, 1, 1, 4, 4, 2, 1, 1); /* 5 x 5 output */
    float x[16], y[25];
    for (int i = 0; i < 16; i++) x[i] = -5.0f;
    x[5] = NAN;
    x[15] = -INFINITY;
    CHECK_OK(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y));
    CHECK(y[0] == -5.0f && picked_by(&d, x, 0) == 0);          /* corner: only x[0] is in bounds */
    CHECK(y[1] == -5.0f && picked_by(&d, x, 1) == 0);          /* tie of x[0], x[1]: the first */
    CHECK(isnan(y[6]) && picked_by(&d, x, 6) == 5);            /* NaN wins */
    CHECK(isnan(y[12]) && picked_by(&d, x, 12) == 5);          /* NaN wins over values after it */
    CHECK(y[24] == -INFINITY && picked_by(&d, x, 24) == 15);   /* -inf only: its own index */
    CHECK(y[18] == -5.0f && picked_by(&d, x, 18) == 10);       /* window rows 2-3, cols 2-3 */
    /* Backward with overlapping windows: x[0] is the argmax of outputs 0, 1, 5. */
    float dy[25], dx[16];
    for (int i = 0; i < 25; i++) dy[i] = 1.0f;
    CHECK_OK(amp_cpu_maxpool_bwd(amp_cpu_device(), &d, dy, x, dx));
    float total = 0;
    for (int i = 0; i < 16; i++) total += dx[i];
    CHECK(total == 25.0f && dx[0] == 3.0f);
}

/* The same rules through the 2x2 stride-2 path (pool.c's fast path), on a 4x5 plane whose
 * last column no window reads. */
static void test_rules_2x2(void) {
    amp_pool_desc d = make_desc(AMP_F32, 1, 1, 4, 5, 2, 2, 0); /* 2 x 2 output */
    float x[20], y[4];
    for (int i = 0; i < 20; i++) x[i] = -5.0f;
    x[4] = 100.0f;                         /* the unread column */
    x[2] = NAN, x[8] = NAN;                /* window 1: two NaN, the last one holds the argmax */
    x[10] = x[11] = x[15] = x[16] = -INFINITY; /* window 2: -inf only */
    x[13] = -1.0f, x[18] = -1.0f;          /* window 3: a tie of -1, the first wins */
    CHECK_OK(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y));
    CHECK(y[0] == -5.0f && picked_by(&d, x, 0) == 0);
    CHECK(isnan(y[1]) && picked_by(&d, x, 1) == 8);
    CHECK(y[2] == -INFINITY && picked_by(&d, x, 2) == 10);
    CHECK(y[3] == -1.0f && picked_by(&d, x, 3) == 13);
    /* The whole dx, overwritten (junk before), a -0 dy landing as +0 as in the generic scatter
     * (0 + -0), and the unread column 0. */
    float dy[4] = {-0.0f, 1.0f, 2.0f, 3.0f}, dx[20], want[20] = {0};
    for (int i = 0; i < 20; i++) dx[i] = 7.0f;
    want[8] = 1.0f, want[10] = 2.0f, want[13] = 3.0f;
    CHECK_OK(amp_cpu_maxpool_bwd(amp_cpu_device(), &d, dy, x, dx));
    CHECK(memcmp(dx, want, sizeof want) == 0);
}

/* The bits a pooled or scattered value is stored with: the dtype's value, NaN as 0x7fff in
 * f16/bf16 (core/half.h's conversions), 0 + v for dx. */
static uint32_t stored_bits(amp_dtype dt, float v) {
    if (dt == AMP_F32) {
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        return u;
    }
    return dt == AMP_F16 ? amp_f32_to_f16_bits(v) : amp_f32_to_bf16_bits(v);
}

static uint32_t load_bits(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F32) return ((const uint32_t *)p)[i];
    return ((const uint16_t *)p)[i];
}

/* 2x2 stride 2 on 2 planes of 9 x 71 (35 outputs a row: two full vectors and a part, and a row
 * and a column no window reads), values drawn from {NaN, -inf, -1, -0, +0, 1, 2}, half NaN with
 * and without payload: every output's
 * bits against the rule (NaN as any NaN), every dx element's bits against 0 + dy at the argmax. */
static void test_2x2_special_values(amp_dtype dt) {
    amp_pool_desc d = make_desc(dt, 1, 2, 9, 71, 2, 2, 0);
    const float pick[7] = {NAN, -INFINITY, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f};
    int64_t in_n = 2 * 9 * 71, out_n = 2 * d.h_out * d.w_out, in_sz = 9 * 71;
    size_t es = test_dtype_size(dt);
    void *x = malloc((size_t)in_n * es), *y = malloc((size_t)out_n * es);
    void *dy = malloc((size_t)out_n * es), *dx = malloc((size_t)in_n * es);
    for (int64_t i = 0; i < in_n; i++) {
        test_store(x, dt, i, pick[(int)(test_uniform() * 7) % 7]);
        if (dt != AMP_F32 && isnan(test_load(x, dt, i)) && i % 2)
            ((uint16_t *)x)[i] = dt == AMP_F16 ? 0xfe01 : 0xffc1; /* sign, payload: out as 0x7fff */
    }
    for (int64_t i = 0; i < out_n; i++)
        test_store(dy, dt, i, i % 5 == 0 ? -0.0f : (float)(int)(test_uniform() * 9) - 4.0f);
    memset(dx, 0xff, (size_t)in_n * es);
    CHECK_OK(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y));
    CHECK_OK(amp_cpu_maxpool_bwd(amp_cpu_device(), &d, dy, x, dx));
    float *want_dx = calloc((size_t)in_n, sizeof *want_dx);
    int bad_y = 0, bad_dx = 0;
    for (int64_t pl = 0; pl < 2; pl++)
        for (int64_t oh = 0; oh < d.h_out; oh++)
            for (int64_t ow = 0; ow < d.w_out; ow++) {
                int64_t at = -1;
                float best = -INFINITY;
                for (int64_t k = 0; k < 4; k++) {
                    int64_t i = pl * in_sz + (2 * oh + k / 2) * 71 + 2 * ow + k % 2;
                    float v = test_load(x, dt, i);
                    if (at < 0 || v > best || isnan(v)) best = v, at = i;
                }
                int64_t o = pl * d.h_out * d.w_out + oh * d.w_out + ow;
                float got = test_load(y, dt, o);
                bool half_nan_ok = dt == AMP_F32 || load_bits(y, dt, o) == 0x7fff;
                bad_y += isnan(best) ? !isnan(got) || !half_nan_ok
                                     : load_bits(y, dt, o) != stored_bits(dt, best);
                want_dx[at] = 0.0f + test_load(dy, dt, o);
            }
    for (int64_t i = 0; i < in_n; i++)
        bad_dx += load_bits(dx, dt, i) != stored_bits(dt, want_dx[i]);
    CHECK_MSG(bad_y == 0 && bad_dx == 0, "2x2 %s (%s): %d outputs, %d dx elements wrong",
              amp_dtype_name(dt), amp_cpu_pool2x2_vectorised(&d) ? "AVX-512" : "scalar", bad_y,
              bad_dx);
    free(x), free(y), free(dy), free(dx), free(want_dx);
}

static void test_errors(void) {
    float x[16] = {0}, y[16];
    amp_pool_desc d = make_desc(AMP_F32, 1, 1, 4, 4, 2, 2, 0);
    d.h_out = 3;
    CHECK_FAILS(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y), AMP_ERR_SHAPE, "output 3 x 2");
    d = make_desc(AMP_F32, 1, 1, 4, 4, 2, 2, 2);
    CHECK_FAILS(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y), AMP_ERR_INVALID_ARG, "pad 2");
    d = make_desc(AMP_F32, 1, 1, 4, 4, 2, 1, 0);
    d.stride = 0;
    CHECK_FAILS(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y), AMP_ERR_INVALID_ARG, "stride 0");
    d = make_desc(AMP_I32, 1, 1, 4, 4, 2, 2, 0);
    CHECK_FAILS(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y), AMP_ERR_DTYPE, "i32");
    d = make_desc(AMP_F32, 1, 1, 4, 4, 2, 2, 0);
    CHECK_FAILS(amp_cpu_maxpool_bwd(amp_cpu_device(), &d, y, NULL, x), AMP_ERR_INVALID_ARG, "x");
}

static void test_thread_determinism(void) {
    amp_pool_desc d = make_desc(AMP_F16, 4, 8, 40, 40, 3, 1, 1);
    int64_t in_n = 4 * 8 * 40 * 40, out_n = 4 * 8 * d.h_out * d.w_out;
    uint16_t *x = malloc((size_t)in_n * 2), *dy = malloc((size_t)out_n * 2), *y[2], *dx[2];
    for (int64_t i = 0; i < in_n; i++) x[i] = amp_f32_to_f16_bits((float)test_uniform());
    for (int64_t i = 0; i < out_n; i++) dy[i] = amp_f32_to_f16_bits((float)test_uniform() - 0.5f);
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        y[t] = malloc((size_t)out_n * 2), dx[t] = malloc((size_t)in_n * 2);
        CHECK_OK(amp_cpu_maxpool_fwd(amp_cpu_device(), &d, x, y[t]));
        CHECK_OK(amp_cpu_maxpool_bwd(amp_cpu_device(), &d, dy, x, dx[t]));
    }
    CHECK(memcmp(y[0], y[1], (size_t)out_n * 2) == 0);
    CHECK(memcmp(dx[0], dx[1], (size_t)in_n * 2) == 0);
    free(x), free(dy);
    for (int t = 0; t < 2; t++) free(y[t]), free(dx[t]);
}

int main(void) {
    test_rng_seed(0x082efa98ec4e6c89ull);
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int i = 0; i < 3; i++) {
        check_config(dts[i], 2, 3, 28, 28, 2, 2, 0); /* the MNIST ConvNet's pooling */
        check_config(dts[i], 2, 3, 7, 9, 2, 2, 0);   /* a row and a column no window covers */
        check_config(dts[i], 2, 3, 9, 11, 3, 2, 1);  /* overlapping, padded, odd sizes */
        check_config(dts[i], 1, 2, 7, 5, 3, 1, 1);   /* stride 1: heavy overlap */
        check_config(dts[i], 1, 1, 5, 5, 5, 3, 2);
    }
    test_rules();
    test_rules_2x2();
    for (int i = 0; i < 3; i++) test_2x2_special_values(dts[i]);
    test_errors();
    test_thread_determinism();
    return test_summary("test_cpu_pool");
}
