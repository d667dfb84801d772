/* PyTorch's default initialisation, drawn from the context's RNG on the host:
 *  - Linear and Conv2d weights: kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in));
 *    biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch/nn/modules/linear.py, conv.py reset_parameters);
 *  - BatchNorm: weight 1, bias 0, running_mean 0, running_var 1. */
#include <math.h>
#include <stdlib.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"

static amp_status amp_init_uniform(amp_model *m, amp_tensor *t, float bound) {
    float *host = malloc((size_t)t->numel * sizeof *host);
    if (!host) return amp_fail(AMP_ERR_OOM, "init: out of memory");
    for (int64_t i = 0; i < t->numel; i++) host[i] = amp_rng_uniform(&m->ctx->rng, -bound, bound);
    amp_status s = amp_tensor_copy_from_host(t, host, (size_t)t->numel * sizeof *host);
    free(host);
    return s;
}

static amp_status amp_init_const(amp_tensor *t, float v) {
    return AMP_BE(t->backend, fill, t->data, t->dtype, t->numel, v);
}

amp_status amp_model_init_params(amp_model *m) {
    for (int i = 0; i < m->n_layers; i++) {
        const amp_layer *l = &m->layers[i];
        if (l->kind == AMP_LAYER_LINEAR || l->kind == AMP_LAYER_CONV2D) {
            int64_t fan_in = l->kind == AMP_LAYER_LINEAR ? l->in : l->in * l->kernel * l->kernel;
            float bound = 1.0f / sqrtf((float)fan_in);
            AMP_TRY(amp_init_uniform(m, m->params[l->weight].t, bound));
            if (l->bias_param >= 0) AMP_TRY(amp_init_uniform(m, m->params[l->bias_param].t, bound));
        } else if (l->kind == AMP_LAYER_BATCHNORM2D) {
            AMP_TRY(amp_init_const(m->params[l->weight].t, 1.0f));
            AMP_TRY(amp_init_const(m->params[l->bias_param].t, 0.0f));
            AMP_TRY(amp_init_const(m->buffers[l->running_mean].t, 0.0f));
            AMP_TRY(amp_init_const(m->buffers[l->running_var].t, 1.0f));
        }
    }
    return AMP_OK;
}
