/* Linked into a copy of amp-train (amp_train_syncs, tests/gpu/CMakeLists.txt) with the CUDA
 * runtime's waiting calls wrapped (sync_count.h): at exit it prints what the run waited for,
 * which amp_train_syncs.sh turns into waits per training step. */
#include <stdio.h>

#include "sync_count.h"

__attribute__((destructor)) static void sync_count_report(void) {
    fprintf(stderr, "sync_count: %ld host waits, %ld device reads, %ld cudaMalloc\n", g_syncs,
            g_d2h, g_mallocs);
}
