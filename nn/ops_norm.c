/* batchnorm2d, with torch.nn.BatchNorm2d's conventions: biased variance to normalise, unbiased
 * variance in the running estimate, running = (1 - momentum) * running + momentum * batch; and
 * batchnorm2d_relu, the ReLU after it applied in the same pass (amp_bn_desc.relu). */
#include "core/error.h"
#include "nn/autocast.h"
#include "nn/norm_internal.h"

static amp_status amp_bn_bwd(amp_tape_node *node, const amp_tensor *dy) {
    amp_tensor *x = node->in[0], *gamma = node->in[1], *beta = node->in[2];
    amp_tensor *mean = node->saved[0], *invstd = node->saved[1];
    const amp_bn_desc *d = node->aux;
    /* The fused ReLU's backward (dy masked by the output y, as relu's own) runs in the kernel's
     * passes: no masked copy of dy. */
    const void *y = d->relu ? node->out->data : NULL;
    amp_grad_sink sx, sg, sb;
    AMP_TRY(amp_grad_begin(x, &sx));
    AMP_TRY(amp_grad_begin(gamma, &sg));
    AMP_TRY(amp_grad_begin(beta, &sb));
    /* The kernel writes all three; the ones nobody needs go to temporaries. */
    amp_tensor *dx = sx.buf, *dg = sg.buf, *db = sb.buf;
    if (!dx) AMP_TRY(amp_tensor_step_like(x, x->dtype, &dx));
    if (!dg) AMP_TRY(amp_tensor_step_like(gamma, AMP_F32, &dg));
    if (!db) AMP_TRY(amp_tensor_step_like(beta, AMP_F32, &db));
    AMP_TRY(AMP_BE(dy->backend, bn_bwd, d, x->data, dy->data, y, gamma->data, mean->data,
                   invstd->data, dx->data, dg->data, db->data));
    AMP_TRY(amp_grad_end(&sx));
    AMP_TRY(amp_grad_end(&sg));
    return amp_grad_end(&sb);
}

static amp_status amp_bn_eval_bwd(amp_tape_node *node, const amp_tensor *dy) {
    return amp_fail(AMP_ERR_UNSUPPORTED, "backward through eval-mode batch norm is not supported; "
                    "train in training mode (amp_model_train(m, true))");
}

/* A running statistic as f32: itself, or a step copy when it is half (not recorded: buffers). */
static amp_status amp_stats_to_f32(amp_tensor **t) {
    amp_tensor *src = *t;
    if (src->dtype == AMP_F32 || (src->dtype != AMP_F16 && src->dtype != AMP_BF16)) return AMP_OK;
    AMP_TRY(amp_tensor_step_like(src, AMP_F32, t));
    return AMP_BE(src->backend, cast, (*t)->data, AMP_F32, src->data, src->dtype, src->numel);
}

amp_status amp_bn_stats_write_back(const amp_tensor *f32, amp_tensor *stat) {
    if (f32 == stat) return AMP_OK;
    return AMP_BE(stat->backend, cast, stat->data, stat->dtype, f32->data, AMP_F32, f32->numel);
}

static amp_status amp_check_channel_vec(const char *op, const char *arg, const amp_tensor *v,
                                        int64_t c) {
    AMP_TRY(amp_check_tensor(op, arg, v, 1));
    if (v->shape[0] != c)
        return amp_fail(AMP_ERR_SHAPE, "%s: %s has %lld elements, want %lld (one per channel)", op,
                        arg, (long long)v->numel, (long long)c);
    if (v->dtype != AMP_F32)
        return amp_fail(AMP_ERR_DTYPE, "%s: %s has dtype %s, want f32", op, arg,
                        amp_dtype_name(v->dtype));
    return AMP_OK;
}

amp_status amp_bn_prepare(const char *op, amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                          amp_tensor *running_mean, amp_tensor *running_var, bool training,
                          float momentum, float eps, amp_bn_args *a) {
    AMP_TRY(amp_check_tensor(op, "x", x, 4));
    AMP_TRY(amp_check_float(op, "x", x));
    int64_t c = x->shape[1];
    /* A half model without keep_batchnorm_fp32 (O3) has half parameters and statistics: the
     * statistics are computed in f32 anyway, so the parameters are widened (differentiably) and
     * the running statistics go through f32 copies written back after the update. */
    AMP_TRY(amp_check_tensor(op, "gamma", gamma, 1));
    AMP_TRY(amp_check_tensor(op, "beta", beta, 1));
    AMP_TRY(amp_cast_to_f32(&gamma));
    AMP_TRY(amp_cast_to_f32(&beta));
    amp_tensor *run_mean = running_mean, *run_var = running_var;
    AMP_TRY(amp_check_tensor(op, "running_mean", running_mean, 1));
    AMP_TRY(amp_check_tensor(op, "running_var", running_var, 1));
    AMP_TRY(amp_stats_to_f32(&run_mean));
    AMP_TRY(amp_stats_to_f32(&run_var));
    AMP_TRY(amp_check_channel_vec(op, "gamma", gamma, c));
    AMP_TRY(amp_check_channel_vec(op, "beta", beta, c));
    AMP_TRY(amp_check_channel_vec(op, "running_mean", run_mean, c));
    AMP_TRY(amp_check_channel_vec(op, "running_var", run_var, c));
    if (!(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: eps %g must be > 0 and momentum %g in [0, 1]", op,
                        (double)eps, (double)momentum);
    amp_bn_desc d = {.n = x->shape[0], .c = c, .hw = x->shape[2] * x->shape[3], .eps = eps,
                     .momentum = momentum, .dtype = x->dtype};
    if (training && d.n * d.hw < 2)
        return amp_fail(AMP_ERR_SHAPE, "%s: training needs more than 1 value per channel", op);
    *a = (amp_bn_args){.gamma = gamma, .beta = beta, .run_mean = run_mean, .run_var = run_var,
                       .d = d};
    return AMP_OK;
}

/* batchnorm2d and batchnorm2d_relu: `op` names the entry in errors, `relu` fuses the ReLU. */
static amp_status amp_batchnorm2d_run(const char *op, bool relu, amp_tensor *x, amp_tensor *gamma,
                                      amp_tensor *beta, amp_tensor *running_mean,
                                      amp_tensor *running_var, bool training, float momentum,
                                      float eps, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    amp_bn_args a;
    AMP_TRY(amp_bn_prepare(op, x, gamma, beta, running_mean, running_var, training, momentum, eps,
                           &a));
    gamma = a.gamma;
    beta = a.beta;
    amp_tensor *run_mean = a.run_mean, *run_var = a.run_var;
    amp_bn_desc d = a.d;
    d.relu = relu;
    amp_tensor *y;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    const amp_backend *be = x->backend;
    amp_tensor *in[3] = {x, gamma, beta};
    amp_tape_node *node;
    if (!training) {
        AMP_TRY(AMP_BE(be, bn_fwd_eval, &d, x->data, gamma->data, beta->data, run_mean->data,
                       run_var->data, y->data));
        /* Recorded so that evaluating without amp_set_grad_enabled(ctx, false) works, as
         * model.eval() does in PyTorch; only a backward that reaches it fails. */
        AMP_TRY(amp_record(y, relu ? "batchnorm2d_relu (eval)" : "batchnorm2d (eval)",
                           "x gamma beta", amp_bn_eval_bwd, 3, in, 0, &node));
        *out = y;
        return AMP_OK;
    }
    amp_tensor *mean, *invstd;
    AMP_TRY(amp_tensor_step_like(gamma, AMP_F32, &mean));
    AMP_TRY(amp_tensor_step_like(gamma, AMP_F32, &invstd));
    AMP_TRY(AMP_BE(be, bn_fwd_train, &d, x->data, gamma->data, beta->data, y->data, mean->data,
                   invstd->data, run_mean->data, run_var->data));
    AMP_TRY(amp_bn_stats_write_back(run_mean, running_mean));
    AMP_TRY(amp_bn_stats_write_back(run_var, running_var));
    AMP_TRY(amp_record(y, relu ? "batchnorm2d_relu" : "batchnorm2d", "x gamma beta", amp_bn_bwd,
                       3, in, sizeof d, &node));
    /* It reads x, gamma, its statistics and (the fused ReLU's mask) y; beta's gradient is dy's
     * sum. The running statistics are no input: the training backward never reads them. */
    amp_node_unread(node, 4u, !relu);
    if (node) {
        *(amp_bn_desc *)node->aux = d;
        amp_node_save(node, 0, mean, "mean");
        amp_node_save(node, 1, invstd, "invstd");
    }
    *out = y;
    return AMP_OK;
}

amp_status amp_batchnorm2d(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                           amp_tensor *running_mean, amp_tensor *running_var, bool training,
                           float momentum, float eps, amp_tensor **out) {
    return amp_batchnorm2d_run("amp_batchnorm2d", false, x, gamma, beta, running_mean,
                               running_var, training, momentum, eps, out);
}

amp_status amp_batchnorm2d_relu(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                                amp_tensor *running_mean, amp_tensor *running_var, bool training,
                                float momentum, float eps, amp_tensor **out) {
    return amp_batchnorm2d_run("amp_batchnorm2d_relu", true, x, gamma, beta, running_mean,
                               running_var, training, momentum, eps, out);
}
