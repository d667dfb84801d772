/* Shape rules of the ops on dims: PyTorch's broadcasting, dims counted from the end, and the
 * [outer, n, inner] split of a reduction. The ops of nn/ turn them into core/backend.h's strided
 * descriptors. */
#ifndef AMP_CORE_SHAPE_H
#define AMP_CORE_SHAPE_H

#include "core/tensor_internal.h"

/* The broadcast shape of a and b (PyTorch's rules: aligned at the last dim, each pair of extents
 * equal or one of them 1, a missing dim counting as 1), or AMP_ERR_SHAPE naming op and both
 * shapes. */
amp_status amp_broadcast_shape(const char *op, const amp_tensor *a, const amp_tensor *b,
                               int *ndim, int64_t *shape);
/* The broadcast of x (named name) into the shape[0..*ndim) so far, in place: for a third
 * operand (where's condition), or AMP_ERR_SHAPE naming op, x and the shape. */
amp_status amp_broadcast_shape_with(const char *op, const char *name, const amp_tensor *x,
                                    int *ndim, int64_t *shape);
/* x's dense strides seen in the broadcast shape[0..ndim) (aligned at the last dim): 0 along the
 * dims x repeats. */
void amp_broadcast_strides(const amp_tensor *x, int ndim, const int64_t *shape, int64_t *stride);
/* A dim index in [-ndim, ndim) made non-negative, or AMP_ERR_INVALID_ARG naming op. */
amp_status amp_dim_index(const char *op, int ndim, int dim, int *out);
/* x seen as [outer, shape[dim], inner] around dim. */
void amp_split_at_dim(const amp_tensor *x, int dim, int64_t *outer, int64_t *n, int64_t *inner);
/* Dense row-major strides of a shape. */
void amp_dense_strides(int ndim, const int64_t *shape, int64_t *stride);

#endif
