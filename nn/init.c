/* Initial values of a model's parameters and buffers, each by its registration's amp_init (the
 * kinds in amp/nn.h), drawn on the host from the context's RNG in the flat order (torch's
 * named_parameters order, then buffers). PyTorch's defaults for the library's modules:
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

/* A weight's fan_in: every dimension but the first (out features or out channels). */
static int64_t amp_init_fan_in(const amp_named_tensor *e) {
    if (e->init.fan_in > 0) return e->init.fan_in;
    int64_t n = 1;
    for (int d = 1; d < e->ndim; d++) n *= e->shape[d];
    return n;
}

static amp_status amp_init_drawn(amp_model *m, const amp_named_tensor *e) {
    amp_tensor *t = e->t;
    float *host = malloc((size_t)t->numel * sizeof *host);
    if (!host) return amp_fail(AMP_ERR_OOM, "amp_model_build: out of memory initialising '%s'",
                               e->name);
    amp_rng_state *rng = &m->ctx->rng;
    float bound = e->init.kind == AMP_INIT_TORCH_DEFAULT
                      ? 1.0f / sqrtf((float)amp_init_fan_in(e)) : 0.0f;
    for (int64_t i = 0; i < t->numel; i++) {
        switch (e->init.kind) {
        case AMP_INIT_TORCH_DEFAULT: host[i] = amp_rng_uniform(rng, -bound, bound); break;
        case AMP_INIT_UNIFORM: host[i] = amp_rng_uniform(rng, e->init.a, e->init.b); break;
        default: host[i] = amp_rng_normal(rng, e->init.a, e->init.b); break;
        }
    }
    amp_status s = amp_tensor_copy_from_host(t, host, (size_t)t->numel * sizeof *host);
    free(host);
    return s;
}

static amp_status amp_init_entry(amp_model *m, const amp_named_tensor *e) {
    amp_tensor *t = e->t;
    switch (e->init.kind) {
    case AMP_INIT_ZEROS:
    case AMP_INIT_CALLER: return AMP_OK; /* the blocks start zeroed */
    case AMP_INIT_ONES: return AMP_BE(t->backend, fill, t->data, t->dtype, t->numel, 1.0f);
    case AMP_INIT_TORCH_DEFAULT:
    case AMP_INIT_NORMAL:
    case AMP_INIT_UNIFORM: return amp_init_drawn(m, e);
    }
    return amp_fail(AMP_ERR_STATE, "amp_model_build: '%s' has initialiser kind %d", e->name,
                    (int)e->init.kind);
}

amp_status amp_model_init_params(amp_model *m) {
    for (int i = 0; i < m->n_params; i++) AMP_TRY(amp_init_entry(m, &m->params[i]));
    for (int i = 0; i < m->n_buffers; i++) AMP_TRY(amp_init_entry(m, &m->buffers[i]));
    return AMP_OK;
}
