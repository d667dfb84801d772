/* The language models' shared pieces (amp/models/lm.h). */
#include <math.h>
#include <stdlib.h>

#include "amp/models/lm.h"
#include "amp/status.h"

int64_t amp_lm_padded_vocab(int64_t vocab) { return (vocab + 63) / 64 * 64; }

amp_status amp_lm_loss(amp_tensor *logits, amp_tensor *targets, int64_t vocab, amp_tensor **loss) {
    if (!logits || !targets || !loss)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_loss: logits, targets and loss must not be "
                         "NULL");
    if (amp_tensor_ndim(logits) != 3)
        return amp_error(AMP_ERR_SHAPE, "amp_lm_loss: logits must be [batch, seq, vocab_padded], "
                         "got %d dims", amp_tensor_ndim(logits));
    int64_t rows = amp_tensor_dim(logits, 0) * amp_tensor_dim(logits, 1);
    if (amp_tensor_numel(targets) != rows)
        return amp_error(AMP_ERR_SHAPE, "amp_lm_loss: %lld targets for %lld positions of logits",
                         (long long)amp_tensor_numel(targets), (long long)rows);
    amp_tensor *flat_l, *flat_t;
    amp_status s = amp_reshape(logits, 2, (int64_t[]){rows, amp_tensor_dim(logits, 2)}, &flat_l);
    if (s == AMP_OK) s = amp_reshape(targets, 1, (int64_t[]){rows}, &flat_t);
    amp_xent_options o = amp_xent_defaults();
    o.classes = vocab;
    return s == AMP_OK ? amp_cross_entropy_ex(flat_l, flat_t, &o, loss) : s;
}

static bool below_2d(const char *name, const amp_tensor *p, void *user) {
    (void)name, (void)user;
    return amp_tensor_ndim(p) < 2;
}

amp_status amp_lm_adamw_create(amp_model *m, float lr, float weight_decay, amp_optimizer **opt) {
    amp_adam_opts ao = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = weight_decay, .decoupled = true, .exact = true};
    amp_status s = amp_adam_create(m, &ao, opt);
    if (s == AMP_OK)
        s = amp_optimizer_add_group(*opt, below_2d, NULL, &(amp_param_group_opts){lr, 0.0f},
                                    NULL);
    if (s != AMP_OK && opt && *opt) {
        amp_optimizer_free(*opt);
        *opt = NULL;
    }
    return s;
}

uint64_t amp_lm_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

amp_status amp_lm_draw(const float *logits, int64_t vocab, float temperature, int top_k,
                       uint64_t *state, int32_t *token) {
    if (!logits || !state || !token)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: logits, state and token must not be "
                         "NULL");
    if (vocab < 1 || vocab > INT32_MAX)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: vocab %lld is outside [1, 2^31 - 1]",
                         (long long)vocab);
    if (!(temperature > 0.0f) || !isfinite(temperature))
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: temperature %g, want a finite value "
                         "> 0", (double)temperature);
    if (top_k < 0)
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: top_k %d, want >= 0 (0: all)", top_k);
    for (int64_t i = 0; i < vocab; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: logits[%lld] is %g: the logits "
                             "hold a NaN or +inf, nothing can be drawn", (long long)i,
                             (double)logits[i]);
    float *p = malloc((size_t)vocab * sizeof *p);
    if (!p) return amp_error(AMP_ERR_OOM, "amp_lm_draw: out of host memory");
    float kth = -INFINITY;
    if (top_k > 0 && top_k < vocab) { /* the k-th largest logit: the cut */
        for (int64_t i = 0; i < vocab; i++) p[i] = logits[i];
        for (int k = 0; k < top_k; k++) {
            int64_t best = 0;
            for (int64_t i = 1; i < vocab; i++) best = p[i] > p[best] ? i : best;
            kth = p[best];
            p[best] = -INFINITY;
        }
    }
    double mx = -INFINITY, total = 0;
    for (int64_t i = 0; i < vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int64_t i = 0; i < vocab; i++) {
        p[i] = logits[i] >= kth ? (float)exp((logits[i] - mx) / temperature) : 0.0f;
        total += p[i];
    }
    if (!(total > 0.0) || !isfinite(total)) {
        free(p);
        return amp_error(AMP_ERR_INVALID_ARG, "amp_lm_draw: none of the logits is above -inf: "
                         "nothing can be drawn");
    }
    double u = (double)(amp_lm_rng_next(state) >> 11) * 0x1p-53 * total, acc = 0;
    *token = (int32_t)(vocab - 1);
    for (int64_t i = 0; i < vocab; i++)
        if ((acc += p[i]) > u) {
            *token = (int32_t)i;
            break;
        }
    free(p);
    return AMP_OK;
}
