/* The op profile's counts and switches (amp/profile.h), apart from the counting functions of
 * core/profile.c so that a device kernel file can report its host waits while linked alone
 * (the cudacpu kernel tests).
 *
 * One profile per process, its counters atomic. A profile per context would be the library's
 * rule (everything else a context does is its own), but nothing that counts can tell contexts
 * apart: amp_profile_begin/end/read name no context (the public contract, which amp-train and
 * amp-bench call), and the counting point, AMP_BE and AMP_DEV (core/tensor_internal.h), is handed
 * only the backend table, which every context on a device shares (amp_backend_cpu() is one
 * table), not the context an op runs on. So threads that drive contexts at once count into the
 * same counters: calls and host waits are atomic adds, FLOPs and seconds f64 adds by
 * compare-and-swap (FLOPs are whole numbers, which f64 adds exactly in any order below 2^53, so
 * their totals are exact whatever the threads' interleaving; the seconds' last bits may depend on
 * it). Relaxed order: a count needs no order with any other memory, and amp_profile_end is read
 * after the calls it should see have returned (the caller joins its threads first). */
#include <stdatomic.h>

#include "core/profile.h"

_Atomic bool amp_profile_on = false;
static _Atomic bool g_timed = false;

static struct {
    _Atomic uint64_t calls[AMP_OPCAT_N];
    _Atomic double flops[AMP_OPCAT_N];
    _Atomic double seconds[AMP_OPCAT_N];
    _Atomic uint64_t host_waits;
} g_counts;

/* Set while this thread's timed profile waits for the device: those waits are not the step's. */
static _Thread_local bool t_profiler_waits;

static void add_f64(_Atomic double *to, double v) {
    double old = atomic_load_explicit(to, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(to, &old, old + v, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

void amp_profile_begin(bool timed) {
    for (int c = 0; c < AMP_OPCAT_N; c++) {
        atomic_store_explicit(&g_counts.calls[c], 0, memory_order_relaxed);
        atomic_store_explicit(&g_counts.flops[c], 0.0, memory_order_relaxed);
        atomic_store_explicit(&g_counts.seconds[c], 0.0, memory_order_relaxed);
    }
    atomic_store_explicit(&g_counts.host_waits, 0, memory_order_relaxed);
    atomic_store(&g_timed, timed);
    atomic_store(&amp_profile_on, true);
}

void amp_profile_read(amp_op_profile *out) {
    if (!out) return;
    for (int c = 0; c < AMP_OPCAT_N; c++) {
        out->calls[c] = atomic_load_explicit(&g_counts.calls[c], memory_order_relaxed);
        out->flops[c] = atomic_load_explicit(&g_counts.flops[c], memory_order_relaxed);
        out->seconds[c] = atomic_load_explicit(&g_counts.seconds[c], memory_order_relaxed);
    }
    out->host_waits = atomic_load_explicit(&g_counts.host_waits, memory_order_relaxed);
}

void amp_profile_end(amp_op_profile *out) {
    atomic_store(&amp_profile_on, false);
    amp_profile_read(out);
}

bool amp_profile_timed(void) { return atomic_load_explicit(&g_timed, memory_order_relaxed); }

void amp_profile_count(amp_op_category cat, double flops) {
    atomic_fetch_add_explicit(&g_counts.calls[cat], 1, memory_order_relaxed);
    if (flops != 0.0) add_f64(&g_counts.flops[cat], flops);
}

void amp_profile_add_seconds(amp_op_category cat, double seconds) {
    add_f64(&g_counts.seconds[cat], seconds);
}

void amp_profile_own_waits(bool on) { t_profiler_waits = on; }

void amp_profile_host_wait(void) {
    if (atomic_load_explicit(&amp_profile_on, memory_order_relaxed) && !t_profiler_waits)
        atomic_fetch_add_explicit(&g_counts.host_waits, 1, memory_order_relaxed);
}

const char *amp_op_category_name(amp_op_category c) {
    static const char *const names[AMP_OPCAT_N] = {"gemm/conv", "norm", "elementwise", "cast",
                                                   "optimizer"};
    return c >= 0 && c < AMP_OPCAT_N ? names[c] : NULL;
}
