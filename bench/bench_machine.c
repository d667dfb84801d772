/* bench_machine.h. */
#include <stdio.h>

#include "bench/bench_machine.h"
#include "core/cpu_info.h"

#ifndef AMP_BENCH_VERSION
#define AMP_BENCH_VERSION "unknown"
#endif

void bench_machine_describe(bench_run_header *h, int threads, bool gpu) {
    snprintf(h->cpu_model, sizeof h->cpu_model, "%s", amp_cpu_model());
    /* A capped run says so: its figures are another CPU's code paths on this one. */
    if (*amp_cpu_isa_cap())
        snprintf(h->isa, sizeof h->isa, "%s (AMP_CPU_ISA=%s)", amp_cpu_isa(), amp_cpu_isa_cap());
    else snprintf(h->isa, sizeof h->isa, "%s", amp_cpu_isa());
    /* The device's name is the CUDA backend's to tell; amp-bench does not open the device in
     * this process (each configuration runs in a child of its own). */
    snprintf(h->gpu_model, sizeof h->gpu_model, "%s", gpu ? "CUDA device 0" : "");
    h->threads = threads;
    snprintf(h->lib_version, sizeof h->lib_version, "%s", AMP_BENCH_VERSION);
}
