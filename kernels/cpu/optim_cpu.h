/* What the CPU optimizer files share (optim.c: SGD and Adam; optim_lamb.c: LAMB; both over
 * lists, run by multi_tensor_apply.h): the gradient loads, the build attribute of the element
 * loops, the chunk's f32 values and its half copy, and the checks of a multi-tensor list. */
#ifndef AMP_KERNELS_CPU_OPTIM_CPU_H
#define AMP_KERNELS_CPU_OPTIM_CPU_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/half.h"
#include "kernels/cpu/multi_tensor_apply.h"

/* The element loops are built per level (cpu_clones.h's AMP_CPU_CLONED): with FMA, fmaf
 * inlines instead of calling libm and the loop vectorises; the file is built with
 * -fno-math-errno (sqrtf's errno path otherwise blocks vectorisation) (figures: bench/RESULTS.md,
 * "Figures behind decisions in the code", optim_cpu.h). fmaf, sqrtf and division are exactly
 * rounded in every build, so all builds give the same bits. */
#include "kernels/cpu/cpu_clones.h"

/* Elements per range call: long enough to vectorise, short enough to share evenly among threads
 * and for the chunk's f32 values to be still in L1 when the half copy is written. It is also the
 * multi-tensor launcher's piece (multi_tensor_apply.h): a piece is one range call. */
#define AMP_CPU_OPTIM_CHUNK AMP_CPU_MT_PIECE

static inline float amp_ld_f32(const void *g, int64_t i) { return ((const float *)g)[i]; }
static inline float amp_ld_f16(const void *g, int64_t i) {
    return amp_f16_bits_to_f32(((const uint16_t *)g)[i]);
}
static inline float amp_ld_bf16(const void *g, int64_t i) {
    return amp_bf16_bits_to_f32(((const uint16_t *)g)[i]);
}

/* The f32 values one chunk of len <= AMP_CPU_OPTIM_CHUNK elements updates: the parameter's own,
 * or (no f32 parameter: O3's half model) the half values widened exactly into `local`. A chunk
 * is below AMP_CPU_PARALLEL_MIN, so the cast runs on the calling thread. It cannot fail: its
 * arguments were checked. Pointers start at the chunk. */
static inline float *amp_optim_chunk_values(float *param, const void *half, amp_dtype half_dt,
                                            int64_t len, float *local) {
    if (param) return param;
    amp_status s = amp_cpu_convert(local, AMP_F32, half, half_dt, len);
    assert(s == AMP_OK);
    (void)s;
    return local;
}

/* The chunk's gradient as the update loop reads it: f16 gradients widened (exactly) into
 * `local` by the backend's cast, whose F16C path converts 8 values an instruction (a widening
 * load per element inside the update loop is core/half.h's bit arithmetic, which the compiler
 * does not vectorise: 8x slower at O3 fp16); other dtypes as they are. */
static inline const void *amp_optim_chunk_grad(const void *grad, bool widen_f16, int64_t len,
                                               float *local) {
    if (!widen_f16) return grad;
    amp_status s = amp_cpu_convert(local, AMP_F32, grad, AMP_F16, len);
    assert(s == AMP_OK);
    (void)s;
    return local;
}

/* half[0, len) = round-to-nearest-even of the chunk's updated values (no half: nothing). */
static inline void amp_optim_write_half(void *half, amp_dtype half_dt, const float *values,
                                        int64_t len) {
    if (!half) return;
    amp_status s = amp_cpu_convert(half, half_dt, values, AMP_F32, len);
    assert(s == AMP_OK);
    (void)s;
}

/* Where each array of an amp_opt_tensors sits among the planner's lists (-1: not used), and the
 * lists' dtypes. The gradient is list 0. */
typedef struct amp_cpu_opt_lists {
    int depth;
    int grad, param, half, state1, state2;
    amp_dtype dtype[AMP_MT_MAX_DEPTH];
} amp_cpu_opt_lists;

/* Checks a list for fn (which names the entry in every message): t set; n >= 0; grad_dtype
 * f32/f16/bf16; half_dtype f16/bf16 when half is given; param or half given; numel and grad
 * given when n > 0, and state1/state2 when wanted (named state1_name/state2_name); each
 * numel >= 0, each non-empty tensor's pointers non-NULL and, with step counts, its count in
 * 0 .. INT64_MAX - 1. Fills *lists with the arrays used. */
amp_status amp_cpu_opt_check(const char *fn, const amp_opt_tensors *t, const char *state1_name,
                             const char *state2_name, amp_cpu_opt_lists *lists);

/* After an update that ran (not skipped): steps[i] = steps[i] + 1 for every non-empty tensor,
 * when the list has step counts (amp_opt_tensors.steps). */
void amp_cpu_opt_steps_advance(const amp_opt_tensors *t);

/* The planner's table for t (t->n >= 1) per `lists`. */
void amp_cpu_opt_table_fill(const amp_opt_tensors *t, const amp_cpu_opt_lists *lists,
                            amp_mt_tensor *table);

/* The half copy a multi-tensor entry writes comes from t->half: a descriptor's half_copy (a
 * per-tensor pointer) there is a mistake, refused naming fn. */
amp_status amp_cpu_opt_check_no_desc_half(const char *fn, const void *desc_half_copy);

#endif
