/* sync_batchnorm2d: torch.nn.SyncBatchNorm (torch/nn/modules/_functions.py) over the ranks that
 * ctx->collective joins; with no collective, a world of one.
 *
 * Training forward: each rank sums its batch per channel (bn_channel_sums), the ranks all-reduce
 * the sums and the count of values (ranks may hold different batch sizes), and every rank forms
 * the same statistics (bn_sync_stats): sum(x) gives a provisional mean, the sums centred on it
 * give the mean and the biased variance of the global batch (kernels/math/sync_batchnorm.h says
 * why two rounds). The running statistics take the global unbiased variance with the momentum, as
 * PyTorch; y is batch norm's eval normalisation with the global mean and variance.
 * Backward: sum(dy) and sum(dy * (x - mean)) per channel; gamma's and beta's gradients are this
 * rank's (sum(dy * xhat), sum(dy): DDP averages them with the other parameters), and the two
 * sums, all-reduced, give dx (bn_bwd_elemt) over the global count. Both rounds are collective:
 * every rank runs the same layers in the same order (the same model), so the calls pair up.
 * Eval: plain batch norm with the running statistics. Cast category PASS, as batch norm: x keeps
 * its dtype, the statistics and parameters are f32. sync_batchnorm2d_relu applies the ReLU after
 * it in the normalising pass (amp_bn_desc.relu) and masks dy first in the backward. */
#include "core/error.h"
#include "nn/autocast.h"
#include "nn/norm_internal.h"

/* What the backward needs beyond the saved mean and invstd. */
typedef struct sync_bn_aux {
    amp_bn_desc d;
    int64_t count; /* values per channel over every rank */
    bool relu;     /* the ReLU fused into the forward */
} sync_bn_aux;

/* In-place sum over the ranks of n f32 in backend memory; a no-op in a world of one. */
static amp_status sync_allreduce(amp_ctx *ctx, float *p, int64_t n) {
    const amp_collective *c = ctx->collective;
    if (!c) return AMP_OK;
    return c->allreduce_sum_f32(ctx->collective_user, p, n);
}

/* The backward of a ReLU fused into the forward (amp_bn_desc.relu): *dz = dy masked by the
 * output node->out (relu's backward from its output), a step tensor; SyncBatchNorm's entries
 * take no y, as bn_bwd does. */
static amp_status amp_sync_bn_relu_mask(amp_tape_node *node, const amp_tensor *dy,
                                        const amp_tensor **dz) {
    amp_tensor *masked;
    AMP_TRY(amp_tensor_step_like(node->out, dy->dtype, &masked));
    AMP_TRY(AMP_BE(dy->backend, binary, AMP_BINARY_RELU_BWD, dy->dtype, dy->numel,
                   node->out->data, dy->data, masked->data));
    *dz = masked;
    return AMP_OK;
}

static amp_status amp_sync_bn_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
    amp_tensor *mean = node->saved[0], *invstd = node->saved[1];
    const sync_bn_aux *a = node->aux;
    const amp_bn_desc *d = &a->d; /* without relu: the backward entries refuse it */
    const amp_backend *be = dy->backend;
    if (a->relu) AMP_TRY(amp_sync_bn_relu_mask(node, dy, &dy));
    int64_t c = d->c;
    amp_tensor *sums; /* sum(dy) then sum(dy * (x - mean)): one all-reduce for both */
    AMP_TRY(amp_tensor_step(x->ctx, AMP_F32, 1, (int64_t[]){2 * c}, &sums));
    float *sum_dy = sums->data, *sum_dy_xmu = sum_dy + c;
    AMP_TRY(AMP_BE(be, bn_channel_sums, d, x->data, mean->data, dy->data, sum_dy, sum_dy_xmu));
    /* The parameters' gradients from this rank's sums, before the all-reduce overwrites them. */
    amp_grad_sink sg, sb;
    AMP_TRY(amp_grad_begin(gamma, &sg));
    if (sg.buf)
        AMP_TRY(AMP_BE(be, binary, AMP_BINARY_MUL, AMP_F32, c, sum_dy_xmu, invstd->data,
                       sg.buf->data));
    AMP_TRY(amp_grad_end(&sg));
    AMP_TRY(amp_grad_begin(beta, &sb));
    if (sb.buf) AMP_TRY(AMP_DEV(be, copy, sb.buf->data, sum_dy, (size_t)c * sizeof(float)));
    AMP_TRY(amp_grad_end(&sb));
    amp_grad_sink sx;
    AMP_TRY(amp_grad_begin(x, &sx));
    if (sx.buf) {
        AMP_TRY(sync_allreduce(x->ctx, sum_dy, 2 * c));
        AMP_TRY(AMP_BE(be, bn_bwd_elemt, d, a->count, x->data, dy->data, gamma->data, mean->data,
                       invstd->data, sum_dy, sum_dy_xmu, sx.buf->data));
    }
    return amp_grad_end(&sx);
}

static amp_status amp_sync_batchnorm2d_run(const char *op, bool relu, amp_tensor *x,
                                           amp_tensor *gamma, amp_tensor *beta,
                                           amp_tensor *running_mean, amp_tensor *running_var,
                                           bool training, float momentum, float eps,
                                           amp_tensor **out) {
    AMP_CHECK_ARG(out);
    if (!training) /* eval normalises with the running statistics: nothing to synchronise */
        return (relu ? amp_batchnorm2d_relu : amp_batchnorm2d)(x, gamma, beta, running_mean,
                                                               running_var, false, momentum, eps,
                                                               out);
    amp_bn_args a;
    /* One value per channel on this rank is fine when the ranks together have more. */
    AMP_TRY(amp_bn_prepare(op, x, gamma, beta, running_mean, running_var, false, momentum, eps,
                           &a));
    amp_ctx *ctx = x->ctx;
    const amp_bn_desc *d = &a.d;
    int64_t c = d->c, count = d->n * d->hw;
    if (ctx->collective)
        AMP_TRY(ctx->collective->allreduce_sum_i64(ctx->collective_user, &count, 1));
    if (count < 2)
        return amp_fail(AMP_ERR_SHAPE, "%s: training needs more than 1 value per channel over all "
                        "ranks; x %lldx%lldx%lldx%lld gives %lld", op, (long long)x->shape[0],
                        (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3],
                        (long long)count);
    const amp_backend *be = x->backend;
    amp_tensor *sums, *center, *mean, *var, *invstd, *y;
    AMP_TRY(amp_tensor_step(ctx, AMP_F32, 1, (int64_t[]){2 * c}, &sums));
    AMP_TRY(amp_tensor_step_like(a.gamma, AMP_F32, &center));
    AMP_TRY(amp_tensor_step_like(a.gamma, AMP_F32, &mean));
    AMP_TRY(amp_tensor_step_like(a.gamma, AMP_F32, &var));
    AMP_TRY(amp_tensor_step_like(a.gamma, AMP_F32, &invstd));
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    float *s1 = sums->data, *s2 = s1 + c;
    /* Round 1: the global sum of x, for a provisional mean to centre round 2 on. */
    AMP_TRY(AMP_BE(be, bn_channel_sums, d, x->data, NULL, NULL, s1, s2));
    AMP_TRY(sync_allreduce(ctx, s1, c));
    AMP_TRY(AMP_BE(be, bn_sync_stats, d, count, NULL, s1, NULL, center->data, NULL, NULL, NULL,
                   NULL));
    /* Round 2: the centred sums give the mean and the biased variance of the global batch. */
    AMP_TRY(AMP_BE(be, bn_channel_sums, d, x->data, center->data, NULL, s1, s2));
    AMP_TRY(sync_allreduce(ctx, s1, 2 * c));
    AMP_TRY(AMP_BE(be, bn_sync_stats, d, count, center->data, s1, s2, mean->data, var->data,
                   invstd->data, a.run_mean->data, a.run_var->data));
    amp_bn_desc apply = *d;
    apply.relu = relu;
    AMP_TRY(AMP_BE(be, bn_fwd_eval, &apply, x->data, a.gamma->data, a.beta->data, mean->data,
                   var->data, y->data));
    AMP_TRY(amp_bn_stats_write_back(a.run_mean, running_mean));
    AMP_TRY(amp_bn_stats_write_back(a.run_var, running_var));
    amp_tensor *in[3] = {x, a.gamma, a.beta};
    amp_tape_node *node;
    AMP_TRY(amp_record(y, relu ? "sync_batchnorm2d_relu" : "sync_batchnorm2d", "x gamma beta",
                       amp_sync_bn_bwd, 3, in, sizeof(sync_bn_aux), &node));
    amp_node_unread(node, 4u, !relu); /* as batch norm's: x, gamma, the statistics, y's mask */
    if (node) {
        *(sync_bn_aux *)node->aux = (sync_bn_aux){.d = *d, .count = count, .relu = relu};
        amp_node_save(node, 0, mean, "mean");
        amp_node_save(node, 1, invstd, "invstd");
    }
    *out = y;
    return AMP_OK;
}

amp_status amp_sync_batchnorm2d(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                                amp_tensor *running_mean, amp_tensor *running_var, bool training,
                                float momentum, float eps, amp_tensor **out) {
    return amp_sync_batchnorm2d_run("amp_sync_batchnorm2d", false, x, gamma, beta, running_mean,
                                    running_var, training, momentum, eps, out);
}

amp_status amp_sync_batchnorm2d_relu(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                                     amp_tensor *running_mean, amp_tensor *running_var,
                                     bool training, float momentum, float eps, amp_tensor **out) {
    return amp_sync_batchnorm2d_run("amp_sync_batchnorm2d_relu", true, x, gamma, beta,
                                    running_mean, running_var, training, momentum, eps, out);
}
