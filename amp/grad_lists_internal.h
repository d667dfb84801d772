/* The step's gradients as multi-tensor lists, one per dtype (amp/grad_lists.c): what the
 * backends' unscale_multi, nonfinite_multi and sum_squares_multi take, so that a pass over every
 * gradient is one fused call per dtype instead of a call per parameter. */
#ifndef AMP_AMP_GRAD_LISTS_INTERNAL_H
#define AMP_AMP_GRAD_LISTS_INTERNAL_H

#include "amp/tensor.h"

/* Lists of one dtype: n tensors, tensor j of numel[j] elements at src[j] (and dst[j], where the
 * pass writes). */
typedef struct amp_grad_list {
    amp_dtype dtype;
    int n;
    int64_t *numel;
    const void **src;
    float **dst;
} amp_grad_list;

/* Up to three lists (f32, f16, bf16), with room for `capacity` tensors each. */
typedef struct amp_grad_lists {
    amp_grad_list list[3];
} amp_grad_lists;

amp_status amp_grad_lists_init(amp_grad_lists *l, int capacity);
void amp_grad_lists_free(amp_grad_lists *l);
/* Appends a tensor to its dtype's list (f32, f16 or bf16; anything else is AMP_ERR_DTYPE). */
amp_status amp_grad_lists_add(amp_grad_lists *l, amp_dtype dt, int64_t numel, const void *src,
                              float *dst);

#endif
