/* The op profile (amp/profile.h): counts, FLOPs and (optionally) times of the backend calls ops
 * make through AMP_BE. Each amp_prof_<entry> is generated from the entry's line of
 * core/backend_kernels.def, which names its category and the FLOPs of one call as amp/profile.h
 * defines them; it runs the call between prof_begin and prof_end (timed when asked). */
#include <time.h>

#include "core/profile.h"
#include "core/backend_flops.h"
#include "core/tensor_internal.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The device idle: a wait that the step's count of host waits does not see. */
static amp_status prof_wait_device(const amp_backend *be) {
    if (be->device == AMP_DEVICE_CPU || !be->sync) return AMP_OK;
    amp_profile_own_waits(true);
    amp_status s = be->sync(be->dev);
    amp_profile_own_waits(false);
    return s;
}

/* A timed call starts and ends with the device idle, so that its time is its own: the host
 * waits before (for work queued by calls that are not counted, such as uploads) and after.
 * prof_begin's value is the start time, or -1 when the profile is not timed. */
static double prof_begin(const amp_backend *be) {
    if (!amp_profile_timed()) return -1.0;
    (void)prof_wait_device(be);
    return now_seconds();
}

static amp_status prof_end(const amp_backend *be, amp_status s, amp_op_category cat, double flops,
                           double t0) {
    if (t0 >= 0.0) {
        if (s == AMP_OK) s = prof_wait_device(be);
        amp_profile_add_seconds(cat, now_seconds() - t0);
    }
    if (s == AMP_OK) amp_profile_count(cat, flops);
    return s;
}

/* One counting function per line of core/backend_kernels.def: its category and FLOPs. */
#define AMP_KERNEL(name, category, flops, check, params, args)                                     \
    amp_status amp_prof_##name AMP_PREPEND_BE params {                                             \
        double t0_ = prof_begin(be);                                                               \
        amp_status s_ = be->k.name ? be->k.name(be->dev, AMP_UNPAREN args)                         \
                                   : amp_backend_missing(be, #name);                               \
        return prof_end(be, s_, AMP_OPCAT_##category, (double)(flops), t0_);                       \
    }
#include "core/backend_kernels.def"
#undef AMP_KERNEL

/* The device's copy, counted as an elementwise call without FLOPs (ops move data with it). */
amp_status amp_prof_copy(const amp_backend *be, void *dst, const void *src, size_t nbytes) {
    double t0 = prof_begin(be);
    amp_status s = be->copy ? be->copy(be->dev, dst, src, nbytes) : amp_backend_missing(be, "copy");
    return prof_end(be, s, AMP_OPCAT_ELEMENTWISE, 0.0, t0);
}

/* ---- Passed through ---- */

amp_status amp_prof_upload_async(const amp_backend *be, void *dst, const void *host,
                                 size_t nbytes, void *after) {
    return be->upload_async ? be->upload_async(be->dev, dst, host, nbytes, after)
                            : amp_backend_missing(be, "upload_async");
}

amp_status amp_prof_mark(const amp_backend *be, void **event) {
    return be->mark ? be->mark(be->dev, event) : amp_backend_missing(be, "mark");
}
