/* CPU backend reductions and MSE (reduce.c, loss.c): sum, sum_rows and MSE against plain
 * references computed here in double (long double sums), on random data in f32, f16 and bf16
 * storage; bit-identical results with 1 and 2 threads (cross-entropy's: test_xent.c). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "test_data.h"
#include "test_util.h"

static int rel_close(double got, double want, double rel, double abs_tol) {
    return fabs(got - want) <= rel * fabs(want) + abs_tol;
}

/* Half the spacing of the dtype's subnormals: the absolute error of any rounding to it. */
static double subnormal_floor(amp_dtype dt) {
    return dt == AMP_F16 ? 0x1p-25 : dt == AMP_BF16 ? 0x1p-134 : 0x1p-150;
}

static const amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16};

static void test_sum(void) {
    int64_t ns[] = {0, 1, 4095, 4097, 300001, 3000000};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 6; k++) {
            amp_dtype dt = dts[d];
            int64_t n = ns[k];
            void *x = test_random_tensor(dt, n, -1.0, 3.0);
            long double ref = 0;
            for (int64_t i = 0; i < n; i++) ref += test_load(x, dt, i);
            float got = -1.0f;
            CHECK_OK(amp_cpu_sum(amp_cpu_device(), dt, n, x, -0.5f, &got));
            /* Double accumulation: only the final f32 rounding is left. */
            double want = (double)(-0.5L * ref);
            CHECK_MSG(rel_close(got, want, 0x1p-23, 1e-30), "sum %s n=%lld: %.9g vs %.9g",
                      amp_dtype_name(dt), (long long)n, (double)got, want);
            free(x);
        }
    float inf_nan[3] = {1.0f, INFINITY, 2.0f}, got;
    CHECK_OK(amp_cpu_sum(amp_cpu_device(), AMP_F32, 3, inf_nan, 1.0f, &got));
    CHECK(got == INFINITY);
    inf_nan[0] = NAN;
    CHECK_OK(amp_cpu_sum(amp_cpu_device(), AMP_F32, 3, inf_nan, 1.0f, &got));
    CHECK(isnan(got));
    CHECK_FAILS(amp_cpu_sum(amp_cpu_device(), AMP_I32, 3, inf_nan, 1.0f, &got), AMP_ERR_DTYPE,
                "i32");
}

static void test_sum_rows(void) {
    int64_t shapes[][2] = {{1, 1},    {7, 3},     {64, 10}, {5000, 3},
                           {3, 700},  {300, 257}, {0, 4},   {20000, 2}};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 8; k++) {
            amp_dtype dt = dts[d];
            int64_t rows = shapes[k][0], cols = shapes[k][1];
            void *x = test_random_tensor(dt, rows * cols, -2.0, 2.0);
            float *out = malloc((size_t)cols * sizeof *out);
            CHECK_OK(amp_cpu_sum_rows(amp_cpu_device(), dt, rows, cols, x, out));
            int bad = 0;
            for (int64_t j = 0; j < cols; j++) {
                long double ref = 0;
                for (int64_t i = 0; i < rows; i++) ref += test_load(x, dt, i * cols + j);
                bad += !rel_close(out[j], (double)ref, 0x1p-23, 1e-30);
            }
            CHECK_MSG(bad == 0, "sum_rows %s [%lld, %lld]: %d columns wrong", amp_dtype_name(dt),
                      (long long)rows, (long long)cols, bad);
            free(x);
            free(out);
        }
}

/* sum_rows' order, which the bits depend on: rows cut into chunks of AMP_CPU_REDUCE_CHUNK /
 * min(cols, 256) rows, each column summed in double in row order within a chunk, the chunks'
 * sums added in chunk order, one rounding to f32. f32 and bf16 data with large terms that
 * cancel, so that another order gives other bits; widths around the kernel's 64-column register
 * blocks and 256-column tasks, heights around its chunks. */
static void test_sum_rows_order(void) {
    const int64_t widths[] = {1, 37, 63, 64, 65, 130, 256, 257, 700};
    const int64_t heights[] = {1, 15, 16, 17, 100, 2049};
    int bad_shapes = 0, shapes = 0;
    for (int d = 0; d < 3; d++)
        for (int wi = 0; wi < 9; wi++)
            for (int hi = 0; hi < 6; hi++) {
                amp_dtype dt = dts[d];
                int64_t rows = heights[hi], cols = widths[wi], n = rows * cols;
                void *x = test_random_tensor(dt, n, -1.0, 1.0);
                /* Rows 5k and 5k + 3 hold +L and -L, L near 2^40, between values near 1:
                 * those are rounded to L's spacing while it is in the sum, so the result
                 * depends on the order (f16 has no such range) */
                for (int64_t i = 0; dt != AMP_F16 && i < n; i++) {
                    int64_t row = i / cols, col = i % cols;
                    float big = ldexpf(1.0f + (float)((row / 5 * 31 + col * 17) % 64) / 64.0f, 40);
                    float v = row % 5 == 0 ? big : row % 5 == 3 ? -big : test_load(x, dt, i);
                    if (dt == AMP_F32)
                        ((float *)x)[i] = v;
                    else
                        ((uint16_t *)x)[i] = amp_f32_to_bf16_bits(v);
                }
                float *out = malloc((size_t)cols * sizeof *out);
                CHECK_OK(amp_cpu_sum_rows(amp_cpu_device(), dt, rows, cols, x, out));
                int64_t chunk_rows = AMP_CPU_REDUCE_CHUNK / (cols < 256 ? cols : 256);
                int bad = 0;
                for (int64_t j = 0; j < cols; j++) {
                    double total = 0.0;
                    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
                        double chunk = 0.0;
                        for (int64_t i = r0; i < rows && i < r0 + chunk_rows; i++)
                            chunk += (double)test_load(x, dt, i * cols + j);
                        total += chunk;
                    }
                    float want = (float)total;
                    bad += memcmp(&want, &out[j], sizeof want) != 0;
                }
                if (bad && bad_shapes++ < 3)
                    fprintf(stderr, "  sum_rows %s [%lld, %lld]: %d columns differ in bits\n",
                            amp_dtype_name(dt), (long long)rows, (long long)cols, bad);
                shapes++;
                free(x);
                free(out);
            }
    CHECK_MSG(bad_shapes == 0, "sum_rows: %d of %d shapes leave the documented order",
              bad_shapes, shapes);
}

static void test_mse(void) {
    int64_t ns[] = {1, 1000, 70001};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++) {
            amp_dtype dt = dts[d];
            int64_t n = ns[k];
            void *a = test_random_tensor(dt, n, -1.0, 1.0),
                 *b = test_random_tensor(dt, n, -1.0, 1.0);
            void *da = malloc((size_t)n * test_dtype_size(dt));
            long double ref = 0;
            for (int64_t i = 0; i < n; i++) {
                double diff = (double)test_load(a, dt, i) - test_load(b, dt, i);
                ref += diff * diff;
            }
            float loss, dloss = 1.5f;
            CHECK_OK(amp_cpu_mse_fwd(amp_cpu_device(), dt, n, a, b, &loss));
            /* Each square is rounded to f32 before the double sum: a few f32 ulps. */
            double want_loss = (double)(ref / n);
            CHECK_MSG(rel_close(loss, want_loss, 4 * 0x1p-23, 0), "mse %s n=%lld: %.9g vs %.9g",
                      amp_dtype_name(dt), (long long)n, (double)loss, want_loss);
            CHECK_OK(amp_cpu_mse_bwd(amp_cpu_device(), dt, n, a, b, &dloss, da));
            double ulp = dt == AMP_F32 ? 0x1p-22 : dt == AMP_F16 ? 0x1p-10 : 0x1p-7;
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                double want =
                    2.0 * ((double)test_load(a, dt, i) - test_load(b, dt, i)) * dloss / (double)n;
                bad += !rel_close(test_load(da, dt, i), want, 2 * ulp, subnormal_floor(dt));
            }
            CHECK_MSG(bad == 0, "mse_bwd %s n=%lld: %d wrong", amp_dtype_name(dt), (long long)n,
                      bad);
            free(a);
            free(b);
            free(da);
        }
    float a[2] = {1.0f, NAN}, b[2] = {0.0f, 0.0f}, loss;
    CHECK_OK(amp_cpu_mse_fwd(amp_cpu_device(), AMP_F32, 2, a, b, &loss));
    CHECK(isnan(loss));
    CHECK_OK(amp_cpu_mse_fwd(amp_cpu_device(), AMP_F32, 0, NULL, NULL, &loss));
    CHECK(isnan(loss)); /* torch: mean over no elements */
}

/* The same inputs give the same bits with 1 and 2 threads (sizes past AMP_CPU_PARALLEL_MIN). */
static void test_thread_determinism(void) {
    const int64_t n = 1 << 20, rows = 4096, cols = 256;
    void *x = test_random_tensor(AMP_F32, n, -1.0, 1.0),
         *y = test_random_tensor(AMP_F32, n, -1.0, 1.0);
    void *h = test_random_tensor(AMP_BF16, n, -1.0, 1.0);
    static float out[2][2048];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        float *o = out[t];
        CHECK_OK(amp_cpu_sum(amp_cpu_device(), AMP_F32, n, x, 1.0f, &o[0]));
        CHECK_OK(amp_cpu_sum(amp_cpu_device(), AMP_BF16, n, h, 1.0f, &o[1]));
        CHECK_OK(amp_cpu_mse_fwd(amp_cpu_device(), AMP_F32, n, x, y, &o[2]));
        CHECK_OK(amp_cpu_sum_rows(amp_cpu_device(), AMP_F32, rows, cols, x, &o[3]));
        CHECK_OK(amp_cpu_sum_rows(amp_cpu_device(), AMP_BF16, n / 3, 3, h, &o[300]));
        CHECK_OK(amp_cpu_sum_rows(amp_cpu_device(), AMP_F32, 1024, 1000, y, &o[310]));
    }
    CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
    free(x);
    free(y);
    free(h);
}

int main(void) {
    test_rng_seed(0x13198a2e03707344ull);
    test_sum();
    test_sum_rows();
    test_sum_rows_order();
    test_mse();
    test_thread_determinism();
    return test_summary("test_cpu_reduce");
}
