/* What the language models' parity tests share (test_gpt.c against PyTorch, test_llama.c
 * against transformers): reading a reference file's tensors, a one-element tensor's value, the
 * gradients of every parameter against the reference's "grad.<name>" norm-wise, and the
 * training steps whose losses are compared. The model's loss is the caller's (amp_gpt_loss,
 * amp_llama_loss). */
#ifndef AMP_TESTS_LM_PARITY_H
#define AMP_TESTS_LM_PARITY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "checkpoint/safetensors.h"
#include "test_util.h"

typedef amp_status (*lm_loss_fn)(amp_model *m, amp_tensor *idx, amp_tensor *targets,
                                  amp_tensor **loss);

/* A reference tensor's values (f32 or i32) copied out; n checked. */
static inline void *lm_ref_copy(const amp_st_reader *ref, const char *name, int64_t n) {
    amp_st_tensor t;
    if (amp_st_reader_find(ref, name, &t) != AMP_OK || t.numel != n) {
        CHECK_MSG(false, "reference %s: missing or not %lld elements", name, (long long)n);
        return NULL;
    }
    void *out = malloc(t.nbytes);
    if (out) memcpy(out, t.data, t.nbytes);
    return out;
}

static inline float lm_scalar(amp_tensor *t) {
    float v = NAN;
    amp_tensor *t32 = t;
    if (amp_tensor_dtype(t) != AMP_F32) CHECK_OK(amp_cast(t, AMP_F32, &t32));
    if (t32) CHECK_OK(amp_tensor_to_host(t32, &v, sizeof v));
    return v;
}

/* Every parameter's gradient within tol of the reference's in norm (||g - g_ref|| / ||g_ref||);
 * prints the worst under label. */
static inline void lm_check_grads(amp_model *m, const amp_st_reader *ref, double tol,
                                  const char *label) {
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < amp_model_n_params(m); i++) {
        amp_tensor *p = amp_model_param(m, i), *g = NULL;
        char name[160];
        snprintf(name, sizeof name, "grad.%s", amp_model_param_name(m, i));
        int64_t n = amp_tensor_numel(p);
        float *gw = lm_ref_copy(ref, name, n), *gg = malloc((size_t)n * sizeof *gg);
        CHECK_OK(amp_tensor_get_grad(p, &g));
        if (g && gw && gg) {
            CHECK_OK(amp_tensor_to_host(g, gg, (size_t)n * sizeof *gg));
            double d = 0, r = 0;
            for (int64_t j = 0; j < n; j++) {
                d += ((double)gg[j] - gw[j]) * ((double)gg[j] - gw[j]);
                r += (double)gw[j] * gw[j];
            }
            double rel = sqrt(d) / fmax(sqrt(r), 1e-30);
            if (rel > worst) worst = rel, worst_name = amp_model_param_name(m, i);
            CHECK_MSG(rel <= tol, "%s: %s's gradient off by %.3g relative", label,
                      amp_model_param_name(m, i), rel);
        }
        free(gw);
        free(gg);
    }
    printf("%s: %d gradients, the worst %.3g relative (%s)\n", label, amp_model_n_params(m), worst,
           worst_name);
}

/* steps training steps on one batch: the loss into got[s], backward, the step (amp_step under
 * amp, the optimizer's own at O0), zero_grad. */
static inline void lm_train_steps(amp_model *m, amp_optimizer *opt, bool amp, lm_loss_fn loss_of,
                                  amp_tensor *idx, amp_tensor *targets, int steps, float *got) {
    for (int s = 0; s < steps; s++) {
        amp_tensor *loss = NULL;
        CHECK_OK(loss_of(m, idx, targets, &loss));
        if (!loss) break;
        got[s] = lm_scalar(loss);
        CHECK_OK(amp_backward(loss));
        if (amp) {
            bool stepped;
            CHECK_OK(amp_step(opt, &stepped));
        } else {
            CHECK_OK(amp_optimizer_step(opt));
        }
        CHECK_OK(amp_zero_grad(opt));
    }
}

#endif
