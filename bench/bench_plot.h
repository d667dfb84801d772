/* amp-bench --plot: one PNG of a run's rows, drawn by gnuplot (Debian: gnuplot-nox).
 *
 * Two panels, one above the other:
 *   - samples/s per configuration as bars, libamp's and PyTorch's side by side where a PyTorch
 *     row matches the libamp row (bench_find_pytorch_match); a PyTorch row with no libamp match
 *     is a configuration of its own;
 *   - peak memory per row (rows with any memory figure) as bars stacked by kind, in MiB, with the
 *     host peak RSS as a point above each. A row with a total but no split stacks the total as
 *     "unsplit".
 *
 * The data and the gnuplot script go to a fresh directory under $TMPDIR (else /tmp), removed on
 * success and kept on failure (its path is in the message). gnuplot picks the pngcairo terminal
 * when it has one, else png. The program run is $AMP_BENCH_GNUPLOT when set, else "gnuplot" on
 * PATH.
 *
 * Errors (message in bench_last_error()): AMP_ERR_INVALID_ARG for a NULL path, header or rows, or
 * nothing to plot (no samples/s and no memory figure in any row); AMP_ERR_IO when the temporary
 * files cannot be written; AMP_ERR_UNSUPPORTED when gnuplot is not installed; AMP_ERR_BACKEND
 * when it fails or writes no PNG (its stderr is in the message). Prints nothing. */
#ifndef AMP_BENCH_PLOT_H
#define AMP_BENCH_PLOT_H

#include "bench/bench_report.h"

amp_status bench_plot_png(const char *png_path, const bench_run_header *run, const bench_row *rows,
                          int n_rows);

#endif
