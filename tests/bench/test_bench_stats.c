/* bench_stats: numpy's "linear" percentiles (the values below are numpy.percentile's, worked out
 * by hand as x[floor(h)] + frac(h) * (x[floor(h) + 1] - x[floor(h)]) with h = (n - 1) q / 100),
 * odd and even samples, the caller's array left as it was, n == 0 and n == 1, NaN in a sample. */
#include <string.h>

#include "bench/bench_stats.h"
#include "test_util.h"

static int near(double got, double want) {
    return fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want));
}

static void test_one_to_ten(void) {
    double x[10] = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6}, before[10];
    memcpy(before, x, sizeof x);
    bench_summary s;
    CHECK(bench_summarize(x, 10, &s) == AMP_OK);
    CHECK(s.n == 10);
    CHECK_MSG(near(s.p10, 1.9), "p10 %.17g, want 1.9 (h = 0.9)", s.p10);
    CHECK_MSG(near(s.median, 5.5), "median %.17g, want 5.5", s.median);
    CHECK_MSG(near(s.p90, 9.1), "p90 %.17g, want 9.1 (h = 8.1)", s.p90);
    CHECK(s.min == 1 && s.max == 10 && near(s.mean, 5.5));
    CHECK(near(bench_percentile(x, 10, 25.0), 3.25)); /* h = 2.25 */
    CHECK(bench_percentile(x, 10, 0.0) == 1 && bench_percentile(x, 10, 100.0) == 10);
    CHECK(memcmp(x, before, sizeof x) == 0);
}

static void test_odd_and_even(void) {
    double odd[3] = {5, 1, 3}; /* sorted 1 3 5 */
    CHECK(near(bench_median(odd, 3), 3.0));
    CHECK(near(bench_percentile(odd, 3, 10.0), 1.4)); /* h = 0.2: 1 + 0.2 * 2 */
    CHECK(near(bench_percentile(odd, 3, 90.0), 4.6)); /* h = 1.8: 3 + 0.8 * 2 */
    CHECK(odd[0] == 5 && odd[1] == 1 && odd[2] == 3);

    double even[4] = {4, 1, 3, 2}; /* sorted 1 2 3 4 */
    bench_summary s;
    CHECK(bench_summarize(even, 4, &s) == AMP_OK);
    CHECK(near(s.median, 2.5) && near(s.p10, 1.3) && near(s.p90, 3.7));
    CHECK(even[0] == 4 && even[1] == 1 && even[2] == 3 && even[3] == 2);

    /* Step times in ms, as amp-bench feeds them. */
    double ms[7] = {12.5, 11.0, 13.25, 10.75, 14.0, 11.5, 12.0};
    CHECK(bench_summarize(ms, 7, &s) == AMP_OK);
    CHECK(near(s.p10, 10.9) && near(s.median, 12.0) && near(s.p90, 13.55));
    CHECK(near(s.mean, 85.0 / 7.0) && s.min == 10.75 && s.max == 14.0);

    double sorted[5] = {1, 2, 4, 8, 16};
    CHECK(near(bench_percentile_sorted(sorted, 5, 60.0), 5.6)); /* h = 2.4: 4 + 0.4 * 4 */
}

static void test_edges(void) {
    bench_summary s;
    CHECK(bench_summarize(NULL, 0, &s) == AMP_OK);
    CHECK(s.n == 0 && isnan(s.mean) && isnan(s.median) && isnan(s.p10) && isnan(s.p90));
    CHECK(isnan(s.min) && isnan(s.max));
    CHECK(isnan(bench_median(NULL, 0)) && isnan(bench_percentile_sorted(NULL, 0, 50.0)));

    double one = 42.5;
    CHECK(bench_summarize(&one, 1, &s) == AMP_OK);
    CHECK(s.n == 1 && s.mean == one && s.min == one && s.max == one);
    CHECK(s.median == one && s.p10 == one && s.p90 == one);
    CHECK(bench_percentile(&one, 1, 37.0) == one);

    double x[3] = {1, 2, 3};
    CHECK(isnan(bench_percentile(x, 3, -1.0)) && isnan(bench_percentile(x, 3, 100.5)));
    CHECK(isnan(bench_percentile(x, 3, NAN)));

    double with_nan[3] = {1, NAN, 3};
    CHECK(bench_summarize(with_nan, 3, &s) == AMP_OK);
    CHECK(s.n == 3 && isnan(s.median) && isnan(s.mean) && isnan(s.min));
    CHECK(isnan(bench_median(with_nan, 3)));

    CHECK(bench_summarize(x, 3, NULL) == AMP_ERR_INVALID_ARG);
    CHECK(bench_summarize(NULL, 3, &s) == AMP_ERR_INVALID_ARG && s.n == 0 && isnan(s.median));
    CHECK(bench_summarize(x, -1, &s) == AMP_ERR_INVALID_ARG);
}

int main(void) {
    test_one_to_ten();
    test_odd_and_even();
    test_edges();
    return test_summary("test_bench_stats");
}
