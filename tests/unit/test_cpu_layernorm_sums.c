/* The CPU LayerNorm backward's column sums (dgamma, dbeta) in kernels/math/layernorm.h's order,
 * bit for bit: rows in chunks of AMP_LN_COL_CHUNK, each column summed in f64 in row order within
 * a chunk (dy xhat for dgamma, each product rounded to f32 first; dy for dbeta), the chunks'
 * sums added in chunk order, one rounding to f32. The CUDA kernel adds in the same order, and
 * the cross-backend table compares the two; this test holds the CPU to the order itself, with
 * data where another order gives other bits: dy is +L and -L (L near 2^40) in rows 5k and 5k + 3,
 * near 1 elsewhere. Also: dx alone and the sums alone give what the whole call gives, with 1, 2
 * and 3 threads; x and dy in f32, dy in bf16 beside an f32 x (O1's), both in bf16; RMSNorm. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/layernorm.h"
#include "test_data.h"
#include "test_util.h"

#define NAME "test_cpu_layernorm_sums"

static void store(void *p, amp_dtype dt, int64_t i, float v) {
    if (dt == AMP_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = amp_f32_to_bf16_bits(v);
}

/* One shape and dtype pair: returns the columns whose bits differ from the order's. */
static int check(int64_t rows, int64_t cols, amp_dtype dt, amp_dtype y_dt, bool rms, int threads) {
    int64_t n = rows * cols;
    size_t xs = dt == AMP_F32 ? 4 : 2, ys = y_dt == AMP_F32 ? 4 : 2;
    void *x = malloc((size_t)n * xs), *dy = malloc((size_t)n * ys);
    float *dx = malloc((size_t)n * sizeof *dx), *dx_alone = malloc((size_t)n * sizeof *dx);
    float *mean = malloc((size_t)rows * sizeof *mean), *rstd = malloc((size_t)rows * sizeof *rstd);
    float *gamma = malloc((size_t)cols * sizeof *gamma), *dg = malloc((size_t)cols * sizeof *dg);
    float *db = malloc((size_t)cols * sizeof *db), *dg2 = malloc((size_t)cols * sizeof *dg2);
    float *db2 = malloc((size_t)cols * sizeof *db2);
    for (int64_t i = 0; i < n; i++) {
        int64_t row = i / cols, col = i % cols;
        float big = ldexpf(1.0f + (float)((row / 5 * 31 + col * 17) % 64) / 64.0f, 40);
        float small = (float)((i * 7919) % 2001 - 1000) / 997.0f;
        store(x, dt, i, (float)((i * 104729) % 1999 - 999) / 333.0f);
        store(dy, y_dt, i, row % 5 == 0 ? big : row % 5 == 3 ? -big : small);
    }
    for (int64_t r = 0; r < rows; r++) {
        mean[r] = rms ? 0.0f : (float)(r % 7) * 0.01f;
        rstd[r] = 0.5f + (float)(r % 11) * 0.1f;
    }
    for (int64_t j = 0; j < cols; j++) gamma[j] = 1.0f + (float)(j % 13) * 0.05f;
    amp_ln_desc d = {.rows = rows, .cols = cols, .eps = 1e-5f, .dt = dt, .r_dt = dt,
                     .y_dt = y_dt, .rms = rms};
    if (dt != AMP_F32) d.dt = d.r_dt = AMP_BF16;
    omp_set_num_threads(threads);
    void *dxp = dt == AMP_F32 ? (void *)dx : malloc((size_t)n * 2);
    void *dxa = dt == AMP_F32 ? (void *)dx_alone : malloc((size_t)n * 2);
    CHECK_OK(amp_cpu_layernorm_bwd(amp_cpu_device(), &d, x, dy, gamma, rms ? NULL : mean, rstd,
                                   dxp, dg, rms ? NULL : db));
    CHECK_OK(amp_cpu_layernorm_bwd(amp_cpu_device(), &d, x, dy, gamma, rms ? NULL : mean, rstd,
                                   dxa, NULL, NULL));
    CHECK_OK(amp_cpu_layernorm_bwd(amp_cpu_device(), &d, x, dy, gamma, rms ? NULL : mean, rstd,
                                   NULL, dg2, rms ? NULL : db2));
    CHECK_MSG(memcmp(dxp, dxa, (size_t)n * xs) == 0, "[%lld, %lld]: dx alone differs",
              (long long)rows, (long long)cols);
    int bad = 0;
    for (int64_t j = 0; j < cols; j++) {
        double g_total = 0.0, b_total = 0.0;
        for (int64_t r0 = 0; r0 < rows; r0 += AMP_LN_COL_CHUNK) {
            double g = 0.0, b = 0.0;
            for (int64_t r = r0; r < rows && r < r0 + AMP_LN_COL_CHUNK; r++) {
                float e = test_load(dy, y_dt, r * cols + j);
                float xhat = amp_ln_xhat(test_load(x, d.dt, r * cols + j), mean[r], rstd[r]);
                g += (double)amp_mul_rn(e, xhat);
                b += (double)e;
            }
            g_total += g;
            b_total += b;
        }
        float want_g = (float)g_total, want_b = (float)b_total;
        bad += memcmp(&want_g, &dg[j], 4) != 0 || memcmp(&want_g, &dg2[j], 4) != 0;
        if (!rms) bad += memcmp(&want_b, &db[j], 4) != 0 || memcmp(&want_b, &db2[j], 4) != 0;
    }
    if (dxp != dx) free(dxp);
    if (dxa != dx_alone) free(dxa);
    free(x), free(dy), free(dx), free(dx_alone), free(mean), free(rstd);
    free(gamma), free(dg), free(db), free(dg2), free(db2);
    return bad;
}

int main(void) {
    const int64_t heights[] = {1, 31, 32, 33, 100, 257};
    const int64_t widths[] = {1, 7, 64, 255, 256, 300};
    const amp_dtype pairs[3][2] = {{AMP_F32, AMP_F32}, {AMP_F32, AMP_BF16}, {AMP_BF16, AMP_BF16}};
    int bad_cases = 0, cases = 0;
    for (int p = 0; p < 3; p++)
        for (int h = 0; h < 6; h++)
            for (int w = 0; w < 6; w++)
                for (int rms = 0; rms < 2; rms++) {
                    int threads = 1 + (h + w + rms) % 3;
                    int bad = check(heights[h], widths[w], pairs[p][0], pairs[p][1], rms, threads);
                    if (bad && bad_cases++ < 3)
                        fprintf(stderr, "  [%lld, %lld] x %s dy %s%s, %d threads: %d columns\n",
                                (long long)heights[h], (long long)widths[w],
                                amp_dtype_name(pairs[p][0]), amp_dtype_name(pairs[p][1]),
                                rms ? " rms" : "", threads, bad);
                    cases++;
                }
    CHECK_MSG(bad_cases == 0, "%d of %d cases leave the column sums' order", bad_cases, cases);
    return test_summary(NAME);
}
