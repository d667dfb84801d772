/* Summary statistics of a sample of step times for amp-bench: mean, min, max and percentiles.
 *
 * Percentiles follow numpy.percentile's default method ("linear"): on the sorted sample x[0..n-1]
 * the q-th percentile sits at rank h = (n - 1) * q / 100 and is x[floor(h)] + (h - floor(h)) *
 * (x[floor(h) + 1] - x[floor(h)]), a linear interpolation between the two closest ranks; so the
 * 10th percentile of 1..10 is 1.9 and the median of an even sample is the mean of its middle two.
 *
 * No function modifies the caller's array. n == 0 gives NaN everywhere; a sample holding a NaN
 * gives NaN everywhere too (numpy does the same), so a broken timing cannot hide in a median. */
#ifndef AMP_BENCH_STATS_H
#define AMP_BENCH_STATS_H

#include "amp/status.h"

typedef struct bench_summary {
    int n; /* sample size */
    double mean, min, max;
    double median, p10, p90; /* percentiles 50, 10 and 90 */
} bench_summary;

/* The q-th percentile (0 <= q <= 100) of x[0..n-1], which must be sorted ascending. NaN when n is
 * 0, q is out of range or NaN, or x is NULL. Allocates nothing. */
double bench_percentile_sorted(const double *sorted, int n, double q);

/* The q-th percentile of x[0..n-1] in any order; sorts a copy. NaN as above, and when the copy
 * cannot be allocated. */
double bench_percentile(const double *x, int n, double q);

/* The median (50th percentile) of x[0..n-1] in any order. */
double bench_median(const double *x, int n);

/* Fills *out with the summary of x[0..n-1] (any order; x may be NULL when n == 0).
 * AMP_ERR_INVALID_ARG: out NULL, n < 0, or x NULL with n > 0 (*out is then left as is when NULL,
 * else set to n = 0 and NaN). AMP_ERR_OOM: the sorted copy could not be allocated. */
amp_status bench_summarize(const double *x, int n, bench_summary *out);

#endif
