/* The counting point behind amp/profile.h: AMP_BE (core/tensor_internal.h) calls the entry's
 * amp_prof_<entry> while a profile runs, which times the call (when asked), calls the backend
 * and adds the call's FLOPs to its category (core/backend_kernels.def says how each is counted).
 * Every entry of that list has one; the device's copy, upload_async and mark are written here. */
#ifndef AMP_CORE_PROFILE_H
#define AMP_CORE_PROFILE_H

#include "amp/profile.h"
#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a profile runs: read by AMP_BE on every call (one predictable branch; an atomic load
 * is a plain load on x86-64 and AArch64). The profile is the process's and its counters atomic
 * (core/profile_counts.c says why it cannot be a context's). C++ files (the CUDA kernels) only
 * report host waits and do not see the flag. */
#ifndef __cplusplus
extern _Atomic bool amp_profile_on;
#endif

/* A device backend calls it wherever the host waits for the device (a blocking copy, a stream
 * synchronisation): amp_op_profile.host_waits, unless it is this thread's timed profile waiting
 * (amp_profile_own_waits). */
void amp_profile_host_wait(void);

/* For the counting functions (core/profile.c): whether the running profile is timed; one call
 * of category cat done, with its FLOPs; seconds spent in calls of cat; and, around the timed
 * profile's own waits for the device on this thread, on = true then false. */
bool amp_profile_timed(void);
void amp_profile_count(amp_op_category cat, double flops);
void amp_profile_add_seconds(amp_op_category cat, double seconds);
void amp_profile_own_waits(bool on);

/* One counting function per entry of core/backend_kernels.def: amp_prof_<entry>(be, args...). */
#define AMP_KERNEL(name, category, flops, check, params, args) amp_status amp_prof_##name AMP_PREPEND_BE params;
#include "core/backend_kernels.def"
#undef AMP_KERNEL
/* The device's copy: counted as an elementwise call without FLOPs. */
amp_status amp_prof_copy(const amp_backend *be, void *dst, const void *src, size_t nbytes);
/* Not ops (an upload's queueing and a stream marker): passed through, not counted. */
amp_status amp_prof_upload_async(const amp_backend *be, void *dst, const void *host,
                                 size_t nbytes, void *after);
amp_status amp_prof_mark(const amp_backend *be, void **event);

#ifdef __cplusplus
}
#endif
#endif
