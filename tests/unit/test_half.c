/* core/half.h conversions, checked exhaustively over the 65536 patterns of each half type against
 * a float64 reference (ldexp arithmetic, written here), and over 2^26 f32 patterns spread across the
 * whole range against the CPU's own conversion instructions (F16C vcvtps2ph, AVX512-BF16
 * vcvtneps2bf16), which round to nearest even in hardware: an independent implementation. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "kernels/math/relu.h"
#include "test_util.h"

/* Value of an f16 pattern, computed from its fields in double. */
static double ref_f16_value(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return sign ? -v : v;
}

static double ref_bf16_value(uint16_t h) {
    int sign = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return sign ? -v : v;
}

static int same_or_both_nan(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Each half pattern widens exactly, narrows back to itself (NaN to the canonical 0x7fff), and the
 * midpoint to its successor rounds to whichever of the two is even; just off the midpoint rounds to
 * the nearer one. `to` and `from` are the pair under test. */
static void check_half_type(const char *name, double (*ref)(uint16_t), float (*widen)(uint16_t),
                            uint16_t (*narrow)(float), uint16_t max_finite) {
    int bad = 0;
    for (uint32_t p = 0; p < 65536; p++) {
        uint16_t h = (uint16_t)p;
        double r = ref(h);
        float f = widen(h);
        if (!same_or_both_nan((double)f, r) || (r == 0 && !signbit(f) != !signbit(r))) {
            if (bad++ < 5) fprintf(stderr, "%s widen 0x%04x: got %.9g want %.9g\n", name, h, f, r);
            continue;
        }
        uint16_t back = narrow(f);
        uint16_t want = isnan(r) ? 0x7fff : h;
        if (back != want && bad++ < 5)
            fprintf(stderr, "%s narrow(widen(0x%04x)) = 0x%04x\n", name, h, back);
        /* Ties between h and h+1 (same sign, both finite). */
        if ((h & 0x7fff) < max_finite) {
            double lo = r, hi = ref((uint16_t)(h + 1));
            double mid = (lo + hi) / 2; /* exact in double, representable in f32 */
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
            float fm = (float)mid;
            uint16_t got = narrow(fm);
            if ((double)fm == mid && got != even && bad++ < 5)
                fprintf(stderr, "%s tie 0x%04x/0x%04x: got 0x%04x\n", name, h, h + 1, got);
            float below = nextafterf(fm, (float)lo), above = nextafterf(fm, (float)hi);
            if ((narrow(below) != h || narrow(above) != (uint16_t)(h + 1)) && bad++ < 5)
                fprintf(stderr, "%s near tie 0x%04x: 0x%04x 0x%04x\n", name, h, narrow(below),
                        narrow(above));
        }
    }
    CHECK_MSG(bad == 0, "%s: %d mismatches over all 65536 patterns", name, bad);
}

static float w_f16(uint16_t h) { return amp_f16_bits_to_f32(h); }
static uint16_t n_f16(float f) { return amp_f32_to_f16_bits(f); }
static float w_bf16(uint16_t h) { return amp_bf16_bits_to_f32(h); }
static uint16_t n_bf16(float f) { return amp_f32_to_bf16_bits(f); }

static void check_specials(void) {
    CHECK(amp_f32_to_f16_bits(65504.0f) == 0x7bff);
    CHECK(amp_f32_to_f16_bits(65519.99f) == 0x7bff);    /* below the tie with 65536: stays */
    CHECK(amp_f32_to_f16_bits(65520.0f) == 0x7c00);     /* tie rounds to even: inf */
    CHECK(amp_f32_to_f16_bits(-1e10f) == 0xfc00);
    CHECK(amp_f32_to_f16_bits(INFINITY) == 0x7c00);
    CHECK(amp_f32_to_f16_bits(-0.0f) == 0x8000);
    CHECK(amp_f32_to_f16_bits(ldexpf(1, -24)) == 0x0001); /* smallest subnormal */
    CHECK(amp_f32_to_f16_bits(ldexpf(1, -25)) == 0x0000); /* tie with 0: even */
    CHECK(amp_f32_to_f16_bits(ldexpf(1.5f, -25)) == 0x0001);
    CHECK(amp_f32_to_f16_bits(-NAN) == 0x7fff);
    CHECK(amp_f32_to_bf16_bits(3.3895314e38f) == 0x7f7f);
    CHECK(amp_f32_to_bf16_bits(FLT_MAX) == 0x7f80);      /* rounds up past the largest bf16 */
    CHECK(amp_f32_to_bf16_bits(ldexpf(1, -149)) == 0x0000);
    CHECK(amp_f32_to_bf16_bits(ldexpf(1, -133)) == 0x0001);
    CHECK(amp_f32_to_bf16_bits(NAN) == 0x7fff);
}

__attribute__((target("f16c"))) static uint16_t hw_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

__attribute__((target("avx512bf16,avx512vl"))) static uint16_t hw_bf16(float f) {
    __m128bh r = _mm_cvtneps_pbh(_mm_set1_ps(f));
    uint16_t out[8];
    memcpy(out, &r, sizeof out);
    return out[0];
}

/* 2^26 patterns: every 64th f32 pattern with varying low bits, so each exponent, both signs,
 * subnormals and the tie bits are all covered. The instructions keep NaN payloads where we
 * canonicalise, so NaN only has to stay NaN. vcvtneps2bf16 flushes f32 subnormals to zero (it
 * ignores MXCSR.DAZ but treats denormal inputs as zero by definition), so those are skipped. */
static void check_against_hardware(void) {
    if (!__builtin_cpu_supports("f16c")) {
        printf("test_half: no F16C on this CPU, hardware comparison skipped\n");
        return;
    }
    bool bf16 = __builtin_cpu_supports("avx512bf16");
    int bad16 = 0, badbf = 0;
    for (uint64_t hi = 0; hi < (1u << 26); hi++) {
        uint32_t u = (uint32_t)(hi << 6) | (uint32_t)((hi * 2654435761u) >> 24 & 0x3f);
        float f;
        memcpy(&f, &u, 4);
        bool nan = isnan(f);
        uint16_t a = amp_f32_to_f16_bits(f), b = hw_f16(f);
        if (nan ? !isnan(amp_f16_bits_to_f32(b)) || a != 0x7fff : a != b) {
            if (bad16++ < 5) fprintf(stderr, "f16 0x%08x: ours 0x%04x, hw 0x%04x\n", u, a, b);
        }
        if (bf16 && (u & 0x7f800000u) != 0) {
            uint16_t c = amp_f32_to_bf16_bits(f), d = hw_bf16(f);
            if (nan ? c != 0x7fff : c != d) {
                if (badbf++ < 5) fprintf(stderr, "bf16 0x%08x: ours 0x%04x, hw 0x%04x\n", u, c, d);
            }
        }
    }
    CHECK_MSG(bad16 == 0, "%d f16 mismatches against vcvtps2ph", bad16);
    CHECK_MSG(badbf == 0, "%d bf16 mismatches against vcvtneps2bf16", badbf);
    if (!bf16) printf("test_half: no AVX512-BF16, bf16 hardware comparison skipped\n");
}

/* The GEMM ReLU epilogue on half bits (kernels/math/relu.h, the CPU's half path) against the f32
 * epilogue applied to the widened value and rounded back, over every pattern of both types. */
static void check_relu_epilogue_bits(void) {
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t h = (uint16_t)b;
        uint16_t want_f16 = amp_f32_to_f16_bits(amp_relu_epilogue(amp_f16_bits_to_f32(h)));
        uint16_t want_bf16 = amp_f32_to_bf16_bits(amp_relu_epilogue(amp_bf16_bits_to_f32(h)));
        bad += amp_relu_epilogue_half_bits(h, 0x7c00) != want_f16;
        bad += amp_relu_epilogue_half_bits(h, 0x7f80) != want_bf16;
    }
    CHECK_MSG(bad == 0, "%d half ReLU-epilogue patterns differ from the f32 epilogue", bad);
}

/* ReLU forward over every pattern, and its backward over every y with dy patterns that show
 * pass-through and zeroing (+-0, NaN, a normal, a subnormal, inf), on half bits against the f32
 * functions between core/half.h's conversions (kernels/math/relu.h), bit for bit. */
static void check_relu_bits(void) {
    static const uint16_t dys[] = {0x0000, 0x8000, 0x3c00, 0xbc00, 0x0001, 0x7c00, 0x7e00, 0x7fc0};
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t h = (uint16_t)b;
        float f16 = amp_f16_bits_to_f32(h), bf16 = amp_bf16_bits_to_f32(h);
        bad += amp_relu_half_bits(h, 0x7c00) != amp_f32_to_f16_bits(amp_relu(f16));
        bad += amp_relu_half_bits(h, 0x7f80) != amp_f32_to_bf16_bits(amp_relu(bf16));
        for (size_t k = 0; k < sizeof dys / sizeof dys[0]; k++) {
            uint16_t g = dys[k];
            bad += amp_relu_bwd_half_bits(h, g, 0x7c00) !=
                   amp_f32_to_f16_bits(amp_relu_bwd(f16, amp_f16_bits_to_f32(g)));
            bad += amp_relu_bwd_half_bits(h, g, 0x7f80) !=
                   amp_f32_to_bf16_bits(amp_relu_bwd(bf16, amp_bf16_bits_to_f32(g)));
        }
    }
    CHECK_MSG(bad == 0, "%d half ReLU patterns differ from the f32 functions", bad);
}

int main(void) {
    check_relu_epilogue_bits();
    check_relu_bits();
    check_half_type("f16", ref_f16_value, w_f16, n_f16, 0x7bff);
    check_half_type("bf16", ref_bf16_value, w_bf16, n_bf16, 0x7f7f);
    check_specials();
    check_against_hardware();
    return test_summary("test_half");
}
