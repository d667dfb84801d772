/* O1's half copies of f32 parameters, kept from step to step.
 *
 * Autocast casts each f32 parameter to half once per step (PyTorch's weight cache), a pass that
 * reads the parameter and writes the copy. Here the copy lives on: autocast casts into it once
 * and hands it out (read-only) in every later step while it is current, and the optimizer, which
 * reads and writes the parameter anyway, writes the copy in the same pass (the kernels O2 uses to
 * write a half model from its masters), so it stays current without a cast. A copy records the
 * parameter's version (core/tensor_internal.h) it holds: any other write moves the version, and
 * the next cast redoes the copy; no writer needs to know the copies exist. Bits are those of a
 * fresh cast: the optimizer's half write rounds as the cast does. */
#ifndef AMP_CORE_CAST_SHADOW_H
#define AMP_CORE_CAST_SHADOW_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

typedef struct amp_cast_shadow {
    const amp_tensor *src; /* the f32 parameter; NULL: orphaned, freed when the step ends */
    void *data;            /* its half copy (backend memory, AMP_MEM_PARAMS) */
    amp_dtype dtype;
    bool filled;           /* data holds src rounded to dtype as of src's version `version` */
    uint64_t version;
    uint32_t read_in;      /* 1 + the step (ctx->step_gen) that last handed it out; 0: none */
} amp_cast_shadow;

/* src's copy in dt; NULL when it has none. */
amp_cast_shadow *amp_cast_shadow_find(amp_ctx *ctx, const amp_tensor *src, amp_dtype dt);
/* src's copy in dt, allocated (not current) when it has none. The pointer lasts until the next
 * add (the table grows). */
amp_status amp_cast_shadow_add(amp_ctx *ctx, const amp_tensor *src, amp_dtype dt,
                               amp_cast_shadow **out);
/* Whether the copy holds its parameter's values as they are now (same version). */
bool amp_cast_shadow_current(const amp_cast_shadow *sh);
/* The copy now holds its parameter's current values (it was just cast, or the update wrote both). */
void amp_cast_shadow_set_current(amp_cast_shadow *sh);
/* Whether the copy was handed out in the context's current step (its tape may hold it). */
bool amp_cast_shadow_in_use(const amp_ctx *ctx, const amp_cast_shadow *sh);
/* t is being freed: its copies go (orphaned until the step ends if the step handed them out). */
void amp_cast_shadow_forget(const amp_tensor *t);
/* Every copy goes, as in amp_cast_shadow_forget (amp_deinitialize: autocast ends). */
void amp_cast_shadows_release(amp_ctx *ctx);
/* The orphaned copies freed (amp_ctx_reset_step: no tape reads them any more). */
void amp_cast_shadows_reap(amp_ctx *ctx);
/* All copies freed (amp_ctx_free). */
void amp_cast_shadows_free(amp_ctx *ctx);

#endif
