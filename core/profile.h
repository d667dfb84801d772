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

extern bool amp_profile_on; /* read by AMP_BE on every call: one predictable branch */
extern bool amp_profile_timed;
extern amp_op_profile amp_profile_counts;

/* A device backend calls it wherever the host waits for the device (a blocking copy, a stream
 * synchronisation): amp_op_profile.host_waits. */
void amp_profile_host_wait(void);

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
