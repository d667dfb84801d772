/* Summary statistics for amp-bench (bench_stats.h): numpy's "linear" percentile on a sorted copy,
 * so the figures match what a reader recomputes with numpy from the per-step times. */
#include "bench/bench_stats.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static bool bench_has_nan(const double *x, int n) {
    for (int i = 0; i < n; i++)
        if (isnan(x[i])) return true;
    return false;
}

/* A sorted copy of x[0..n-1] (n >= 1), or NULL when out of memory. */
static double *bench_sorted_copy(const double *x, int n) {
    double *copy = malloc((size_t)n * sizeof *copy);
    if (!copy) return NULL;
    memcpy(copy, x, (size_t)n * sizeof *copy);
    qsort(copy, (size_t)n, sizeof *copy, bench_cmp_double);
    return copy;
}

double bench_percentile_sorted(const double *sorted, int n, double q) {
    if (!sorted || n <= 0 || !(q >= 0.0 && q <= 100.0)) return NAN;
    if (bench_has_nan(sorted, n)) return NAN;
    double rank = (double)(n - 1) * (q / 100.0); /* numpy: (n - 1) * quantile */
    int lo = (int)floor(rank);
    if (lo >= n - 1) return sorted[n - 1];
    double t = rank - (double)lo, a = sorted[lo], b = sorted[lo + 1];
    /* numpy's _lerp, term for term: from a below the midpoint, from b above it, so both ends are
     * exact and the result matches numpy's to the bit. */
    return t >= 0.5 ? b - (b - a) * (1.0 - t) : a + (b - a) * t;
}

double bench_percentile(const double *x, int n, double q) {
    if (!x || n <= 0) return NAN;
    double *sorted = bench_sorted_copy(x, n);
    if (!sorted) return NAN;
    double p = bench_percentile_sorted(sorted, n, q);
    free(sorted);
    return p;
}

double bench_median(const double *x, int n) { return bench_percentile(x, n, 50.0); }

static void bench_summary_set_nan(bench_summary *out, int n) {
    out->n = n;
    out->mean = out->min = out->max = NAN;
    out->median = out->p10 = out->p90 = NAN;
}

amp_status bench_summarize(const double *x, int n, bench_summary *out) {
    if (!out) return AMP_ERR_INVALID_ARG;
    if (n < 0 || (!x && n > 0)) {
        bench_summary_set_nan(out, 0);
        return AMP_ERR_INVALID_ARG;
    }
    bench_summary_set_nan(out, n);
    if (n == 0 || bench_has_nan(x, n)) return AMP_OK;
    double *sorted = bench_sorted_copy(x, n);
    if (!sorted) return AMP_ERR_OOM;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += sorted[i]; /* ascending order: small terms first */
    out->mean = sum / (double)n;
    out->min = sorted[0];
    out->max = sorted[n - 1];
    out->median = bench_percentile_sorted(sorted, n, 50.0);
    out->p10 = bench_percentile_sorted(sorted, n, 10.0);
    out->p90 = bench_percentile_sorted(sorted, n, 90.0);
    free(sorted);
    return AMP_OK;
}
