/* What the figures were measured on, for amp-bench's run header (bench_run_header_init set the
 * date): the CPU's model and instruction-set features (core/cpu_info.h), the threads, libamp's
 * version. */
#ifndef AMP_BENCH_MACHINE_H
#define AMP_BENCH_MACHINE_H

#include <stdbool.h>

#include "bench/bench_report.h"

void bench_machine_describe(bench_run_header *h, int threads, bool gpu);

#endif
