/* Where each parameter's unscaled gradient is once amp_unscale has run, for the step's own
 * passes (clipping) and for the user (amp_unscaled_grad_to_host): torch.amp hands back an
 * unscaled p.grad after unscale_, Apex's O2 an unscaled master .grad. Here the model's own
 * gradient keeps what backward wrote (scaled, and half at O2), so the unscaled values are read
 * where the step keeps them. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor_internal.h"
#include "kernels/math/scaler.h"
#include "optim/optimizer_internal.h"
#include "amp/state_internal.h"

static bool amp_is_half(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16; }

amp_grad_view amp_grad_view_of(amp_opt_state *os, int i) {
    amp_optimizer *opt = os->opt;
    amp_tensor *p = opt->params[i];
    int64_t n = amp_optimizer_piece_numel(opt, i);
    if (amp_optimizer_has_masters(opt))
        return (amp_grad_view){amp_optimizer_master_grad(opt, i), AMP_F32, 1.0f, n};
    if (os->in.grad_source && os->in.grad_source[i]) /* never sharded (amp_ddp_create) */
        return (amp_grad_view){os->in.grad_source[i], AMP_F32, 1.0f, n};
    amp_dtype dt = p->grad->dtype;
    void *piece = amp_optimizer_piece_ptr(opt, i, p->grad->data, dt);
    return (amp_grad_view){piece, dt, amp_is_half(dt) ? os->in.half_grad_scale : 1.0f, n};
}

amp_status amp_unscaled_grad_to_host(amp_optimizer *opt, const amp_tensor *param, float *host,
                                     size_t nbytes) {
    amp_state *st;
    amp_opt_state *os;
    AMP_TRY(amp_state_of(__func__, opt, &st, &os));
    AMP_CHECK_ARG(param);
    AMP_CHECK_ARG(host);
    AMP_TRY(amp_optimizer_check_unsharded(__func__, opt, "a whole unscaled gradient"));
    int i = 0;
    while (i < opt->n_params && opt->params[i] != param) i++;
    if (i == opt->n_params)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the tensor is not one of the optimizer's %d "
                        "parameters", __func__, opt->n_params);
    if (nbytes != (size_t)param->numel * sizeof(float))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: nbytes %zu, want %lld floats (%zu bytes)",
                        __func__, nbytes, (long long)param->numel,
                        (size_t)param->numel * sizeof(float));
    if (!os->unscaled)
        return amp_fail(AMP_ERR_STATE, "%s: the gradients are still scaled: call amp_unscale "
                        "(or amp_clip_grad_norm) after the backward first", __func__);
    if (!amp_optimizer_param_stepped(opt, &os->in, i))
        return amp_fail(AMP_ERR_STATE, "%s: parameter %d has no gradient since the last "
                        "zero_grad", __func__, i);
    const amp_backend *be = st->ctx->backend;
    amp_grad_view g = amp_grad_view_of(os, i);
    if (g.dtype == AMP_F32) return be->copy_to_host(be->dev, host, g.data, nbytes);
    /* O3: the half gradient times the factor the optimizer will apply, held on the device in
     * the device mode (a 4-byte read, as amp_step's `stepped` is). */
    float factor = g.factor;
    if (st->device_scaler)
        AMP_TRY(be->copy_to_host(be->dev, &factor, &st->scaler_dev[0].half_grad_scale,
                                 sizeof factor));
    uint16_t *bits = malloc((size_t)param->numel * sizeof *bits);
    if (!bits) return amp_fail(AMP_ERR_OOM, "%s: out of host memory", __func__);
    amp_status s = be->copy_to_host(be->dev, bits, g.data, (size_t)param->numel * sizeof *bits);
    for (int64_t k = 0; s == AMP_OK && k < param->numel; k++)
        host[k] = (g.dtype == AMP_F16 ? amp_f16_bits_to_f32(bits[k])
                                      : amp_bf16_bits_to_f32(bits[k])) * factor;
    free(bits);
    return s;
}
