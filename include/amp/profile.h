/* Op profile: what the backend was asked to compute, counted by the ops as they run.
 *
 *     amp_profile_begin(false);          // count calls and FLOPs (no timing)
 *     ... one training step ...
 *     amp_op_profile p;
 *     amp_profile_end(&p);               // p.flops[AMP_OPCAT_GEMM_CONV]: the step's matmul FLOPs
 *
 * Every backend call an op makes (GEMM, convolution, batch norm, elementwise kernels, casts,
 * optimizer and scaler kernels) passes through one counting point, so any model gets its FLOPs
 * and its model FLOP utilisation without a hand-written formula. Counts are per process: every
 * context's calls, from every thread, counted atomically, so threads that drive contexts at the
 * same time get exact totals of calls and FLOPs (not one count per context: the counting point
 * is reached through the backend, which the contexts on a device share). amp_profile_begin and
 * amp_profile_end start and stop the process's one profile: call them from one thread, before
 * and after the calls to count; amp_profile_read while other threads count sees each counter
 * as it is at that moment.
 *
 * FLOPs are counted from the call's sizes, as arithmetic operations of the op's formula:
 *  - GEMM: 2 m n k (a multiply and an add per product), plus m n for a bias, m n for a GELU
 *    epilogue (as the unary GELU counts it) and m k for a fused bias gradient; alpha, beta and
 *    the ReLU epilogue are not counted (cuBLAS's convention);
 *  - convolution (forward, data gradient, weight gradient): 2 N K C R S P Q for N images, K output
 *    and C input channels, an R x S kernel and a P x Q output; plus N K P Q for a bias (forward)
 *    or a bias gradient (weight gradient);
 *  - per element of the tensor: batch norm training forward 8 (two-pass statistics 4, normalise
 *    and affine 4), inference forward 4, backward 10, each + 1 with the ReLU fused in (its mask
 *    in the backward), channel sums 4, backward elementwise 6,
 *    synchronised statistics 4 per channel; relu, scale, add, sub, mul, relu
 *    backward, dropout (both ways), fill with a scale 1; axpy 2; sum 1; cross entropy forward 4
 *    per logit, backward 2; MSE forward 3, backward 2; max pooling forward one comparison per
 *    window element, backward 1 per output; cast and copy 0;
 *  - optimizers per element: SGD 3 (scale the gradient, the update) + 2 with weight decay + 2
 *    with momentum, Adam 12, LAMB 16; unscale 2, inf/NaN check 1, sum of squares 2; the loss
 *    scaler's one-thread updates 0.
 * Model FLOP utilisation uses the GEMM/convolution FLOPs only (the "model FLOPs" of PaLM's and
 * llm.c's MFU): everything else is memory-bound and a rounding error next to them.
 *
 * With `timed`, each call is also timed on the host clock; on a device backend the host then
 * waits for the device before and after every call, which serialises the step: a timed profile
 * says where the time goes, an untimed run says how fast the step is. */
#ifndef AMP_PROFILE_H
#define AMP_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_op_category {
    AMP_OPCAT_GEMM_CONV,   /* GEMM and convolution, forward and backward */
    AMP_OPCAT_NORM,        /* batch norm (plain and synchronised) */
    AMP_OPCAT_ELEMENTWISE, /* activations, pooling, losses, dropout, reductions, fills, copies */
    AMP_OPCAT_CAST,        /* dtype conversions (autocast, master copies) */
    AMP_OPCAT_OPTIMIZER,   /* optimizer updates, unscale, inf/NaN checks, the loss scaler */
    AMP_OPCAT_N
} amp_op_category;

typedef struct amp_op_profile {
    uint64_t calls[AMP_OPCAT_N];
    double flops[AMP_OPCAT_N];
    double seconds[AMP_OPCAT_N]; /* 0 unless timed */
    /* Times the host waited for the device (CUDA backend: blocking copies to or from the host,
     * stream synchronisations, the cross-entropy label check; not the timed profile's own
     * waits); 0 on the CPU backend, whose calls return when done. */
    uint64_t host_waits;
} amp_op_profile;

/* Resets the counts and starts counting (timed: also the time of each call, see above). */
void amp_profile_begin(bool timed);
/* Stops counting; out (may be NULL) gets what was counted since amp_profile_begin. */
void amp_profile_end(amp_op_profile *out);
/* What was counted so far, without stopping. */
void amp_profile_read(amp_op_profile *out);
/* "gemm/conv", "norm", "elementwise", "cast", "optimizer"; NULL out of range. */
const char *amp_op_category_name(amp_op_category c);

#ifdef __cplusplus
}
#endif
#endif
