/* GEMMs of row-major tensors for the ops (nn/gemm.c): linear, linear_relu, matmul,
 * linear_swiglu. */
#ifndef AMP_NN_GEMM_INTERNAL_H
#define AMP_NN_GEMM_INTERNAL_H

#include "nn/autograd.h"

/* C[m, n] = op(A) op(B) of row-major tensors, C overwritten, with the context's TF32 switch; the
 * caller adds a bias, an epilogue, a bias gradient or a batch. c: the output, or the tensor whose
 * gradient C is (amp_gemm_grad then points C at it). */
amp_gemm_desc amp_gemm_desc_of(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                               const amp_tensor *a, int64_t lda, const amp_tensor *b, int64_t ldb,
                               amp_tensor *c);
amp_status amp_gemm(const amp_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    const amp_tensor *a, int64_t lda, const amp_tensor *b, int64_t ldb,
                    amp_tensor *c);
/* C = the gradient of t from the GEMM d (its C unset), through t's sink or, for an f32 weight
 * (or autocast's half copy of one), in place in the f32 gradient; *wrote: whether t wanted one. */
amp_status amp_gemm_grad(const amp_backend *be, amp_gemm_desc d, amp_tensor *t, bool *wrote);

/* Selective recomputation of a GEMM's input (amp_linear_ex's and amp_linear_swiglu_ex's
 * recompute_input): whether x, which the op will not keep, can be written again by its producer
 * in backward (AMP_ERR_INVALID_ARG naming op otherwise: no producer that can, or x written in
 * place since it ran), and, in backward, x's values written again into a step temporary *xv
 * (release it with amp_tensor_step_release). */
amp_status amp_check_recompute_input(const char *op, const amp_tensor *x);
amp_status amp_regenerate_input(amp_tensor *x, amp_tensor **xv);

#endif
