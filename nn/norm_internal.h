/* What batch norm (nn/ops_norm.c) shares with synchronised batch norm (nn/ops_sync_batchnorm.c): the
 * argument checks and the f32 views of half parameters and running statistics. */
#ifndef AMP_NN_NORM_INTERNAL_H
#define AMP_NN_NORM_INTERNAL_H

#include "nn/autograd.h"

/* The arguments of a batch norm, validated: gamma/beta as f32 (widened differentiably when half),
 * the running statistics as f32 (step copies when half: write them back after the update), and
 * the descriptor of x. */
typedef struct amp_bn_args {
    amp_tensor *gamma, *beta, *run_mean, *run_var;
    amp_bn_desc d;
} amp_bn_args;

/* Checks x (4-d, float), gamma/beta/running stats (one f32-able value per channel), eps > 0 and
 * momentum in [0, 1], each error naming op and the argument; with `training` also more than one
 * value per channel. */
amp_status amp_bn_prepare(const char *op, amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                          amp_tensor *running_mean, amp_tensor *running_var, bool training,
                          float momentum, float eps, amp_bn_args *a);
/* amp_sync_batchnorm2d with the ReLU after it in the same pass, as amp_batchnorm2d_relu is
 * amp_batchnorm2d's (the sequential model's fusion of a SyncBatchNorm layer and a ReLU). */
amp_status amp_sync_batchnorm2d_relu(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                                     amp_tensor *running_mean, amp_tensor *running_var,
                                     bool training, float momentum, float eps, amp_tensor **out);
/* Writes an f32 copy of a running statistic back into the buffer (nothing when it is the buffer). */
amp_status amp_bn_stats_write_back(const amp_tensor *f32, amp_tensor *stat);

#endif
