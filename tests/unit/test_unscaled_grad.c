/* amp_unscaled_grad_to_host: the gradient the optimizer steps with, unscaled, where torch.amp's
 * p.grad after unscale_ and Apex O2's master .grad are. With a static loss scale of 1024 (a
 * power of two, so unscaling is exact) on the two-layer MLP:
 *  - O1 (f32 gradients, unscaled in place): it equals amp_tensor_get_grad's values bit for bit;
 *  - O2 (half model, f32 masters) and O3 (half gradients, no masters): it equals the half
 *    gradient that amp_tensor_get_grad still returns scaled, widened, times 1/1024, bit for bit;
 *  - after amp_clip_grad_norm with a small max_norm, its norm is max_norm (to f32 rounding of
 *    the sum) at every level;
 *  - refused before amp_unscale (the values are still scaled), for a tensor that is not a
 *    parameter, a wrong size and an optimizer without amp; the refusals name the call. */
#include <math.h>
#include <string.h>

#include "amp_rig.h"

static void check_level(amp_opt_level level) {
    rig r;
    amp_options o = {.opt_level = level, .loss_scale = 1024.0f};
    if (!rig_make(&r, TINY, false, &o, 11)) return;
    amp_tensor *w = param(&r, 0);
    float buf[16 * 12];
    size_t nb = (size_t)w->numel * sizeof(float);
    if (!forward_backward(&r)) return;
    CHECK_FAILS(amp_unscaled_grad_to_host(r.opt, w, buf, nb), AMP_ERR_STATE,
                "amp_unscaled_grad_to_host: the gradients are still scaled");
    CHECK_OK(amp_unscale(r.opt));
    CHECK_FAILS(amp_unscaled_grad_to_host(r.opt, r.x, buf, nb), AMP_ERR_INVALID_ARG,
                "not one of the optimizer's");
    CHECK_FAILS(amp_unscaled_grad_to_host(r.opt, w, buf, nb - 4), AMP_ERR_INVALID_ARG, "nbytes");
    double sq = 0;
    for (int i = 0; i < n_params(&r); i++) {
        amp_tensor *p = param(&r, i), *g = NULL;
        int64_t n = p->numel;
        float *u = malloc((size_t)n * sizeof *u), *model = malloc((size_t)n * sizeof *model);
        CHECK_OK(amp_unscaled_grad_to_host(r.opt, p, u, (size_t)n * sizeof *u));
        CHECK_OK(amp_tensor_get_grad(p, &g));
        if (g) CHECK_OK(amp_tensor_to_host_f32(g, model, (size_t)n * sizeof *model));
        int64_t wrong = 0, nonzero = 0;
        for (int64_t k = 0; g && k < n; k++) {
            float want = g->dtype == AMP_F32 ? model[k] : model[k] * (1.0f / 1024.0f);
            wrong += memcmp(&want, &u[k], sizeof want) != 0;
            nonzero += u[k] != 0.0f;
            sq += (double)u[k] * u[k];
        }
        CHECK_MSG(g && wrong == 0 && nonzero > 0, "O%d parameter %d: %lld of %lld differ from "
                  "the model's gradient unscaled (%s)", (int)level, i, (long long)wrong,
                  (long long)n, g && g->dtype == AMP_F32 ? "f32" : "half");
        if (level >= AMP_O2 && g) CHECK(g->dtype == AMP_F16); /* still the half, scaled one */
        free(u);
        free(model);
    }
    /* Clipping to a tenth of the norm: the unscaled gradients are the clipped ones. */
    float norm = 0, max_norm = (float)sqrt(sq) / 10;
    CHECK_OK(amp_clip_grad_norm(r.opt, max_norm, &norm));
    CHECK_MSG(fabs(norm - sqrt(sq)) <= 1e-5 * sqrt(sq), "O%d: norm %g, sum of squares %g",
              (int)level, (double)norm, sq);
    double clipped = 0;
    for (int i = 0; i < n_params(&r); i++) {
        amp_tensor *p = param(&r, i);
        float *u = malloc((size_t)p->numel * sizeof *u);
        CHECK_OK(amp_unscaled_grad_to_host(r.opt, p, u, (size_t)p->numel * sizeof *u));
        for (int64_t k = 0; k < p->numel; k++) clipped += (double)u[k] * u[k];
        free(u);
    }
    CHECK_MSG(fabs(sqrt(clipped) - max_norm) <= 1e-5 * max_norm, "O%d: clipped norm %g, want %g",
              (int)level, sqrt(clipped), (double)max_norm);
    CHECK_OK(amp_step(r.opt, NULL));
    rig_free(&r);
}

int main(void) {
    check_level(AMP_O1);
    check_level(AMP_O2);
    check_level(AMP_O3);
    rig r;
    if (rig_make(&r, TINY, false, NULL, 3)) {
        float buf[16 * 12];
        CHECK_FAILS(amp_unscaled_grad_to_host(r.opt, param(&r, 0), buf, sizeof buf),
                    AMP_ERR_STATE, "amp_unscaled_grad_to_host");
        rig_free(&r);
    }
    return test_summary("test_unscaled_grad");
}
