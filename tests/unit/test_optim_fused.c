/* The fused step's calls (optim/fused_step.c): parameters whose updates differ (here an f32 and
 * an f16 gradient) go to separate backend calls, and every call's arguments are checked before
 * the first one runs, so a step refused by its second call leaves the first call's parameters,
 * the optimizer state and the step counts as they were; the same step with the cause gone then
 * updates both. */
#include <math.h>
#include <string.h>

#include "amp/optim.h"
#include "core/half.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"
#include "test_util.h"

enum { N_PARAMS = 2 };
static const int64_t g_numel[N_PARAMS] = {5, 3};
static const char *const g_names[N_PARAMS] = {"a.weight", "b.weight"};

/* Parameter i: f32 values, a gradient of dtype dts[i] holding 0.25 * (k + 1), written. */
static void make_params(amp_ctx *ctx, const amp_dtype dts[N_PARAMS], amp_tensor *p[N_PARAMS]) {
    for (int i = 0; i < N_PARAMS; i++) {
        float v[8];
        uint16_t bits[8];
        for (int k = 0; k < g_numel[i]; k++) v[k] = 1.0f + (float)(i * 10 + k);
        CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, &g_numel[i], v, &p[i]));
        if (!p[i]) continue;
        CHECK_OK(amp_tensor_create(ctx, dts[i], 1, &g_numel[i], &p[i]->grad));
        if (!p[i]->grad) continue;
        for (int k = 0; k < g_numel[i]; k++) {
            v[k] = 0.25f * (float)(k + 1);
            bits[k] = amp_f32_to_f16_bits(v[k]);
        }
        CHECK_OK(amp_tensor_copy_from_host(p[i]->grad, dts[i] == AMP_F32 ? (void *)v : bits,
                                           amp_tensor_nbytes(p[i]->grad)));
        p[i]->requires_grad = true;
        p[i]->grad_written = p[i]->grad->grad_written = true;
    }
}

/* Every parameter and state value, in order. */
static int snapshot(amp_optimizer *opt, amp_tensor *p[N_PARAMS], float *out) {
    int at = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        CHECK_OK(amp_tensor_to_host(p[i], out + at, amp_tensor_nbytes(p[i])));
        at += (int)g_numel[i];
        for (int j = 0; j < amp_optimizer_n_state(opt); j++) {
            amp_tensor *t = NULL;
            CHECK_OK(amp_optimizer_state_tensor(opt, i, amp_optimizer_state_name(opt, j), &t));
            if (t) CHECK_OK(amp_tensor_to_host(t, out + at, amp_tensor_nbytes(t)));
            at += (int)g_numel[i];
        }
    }
    return at;
}

static void test_second_call_refused(bool adam) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    if (!ctx) return;
    amp_tensor *p[N_PARAMS] = {0};
    make_params(ctx, (const amp_dtype[N_PARAMS]){AMP_F32, AMP_F16}, p);
    amp_optimizer *opt = NULL;
    if (adam)
        CHECK_OK(amp_adam_create_params(p, g_names, N_PARAMS, &(amp_adam_opts){.lr = 0.1f}, &opt));
    else
        CHECK_OK(amp_sgd_create_params(p, g_names, N_PARAMS,
                                       &(amp_sgd_opts){.lr = 0.1f, .momentum = 0.9f}, &opt));
    if (!opt) goto done;
    /* The f16 gradients' factor (what the amp layer sets for O3's still-scaled half gradients)
     * is one no backend takes: the f16 call, the second, is refused. */
    amp_optim_inputs in = AMP_OPTIM_INPUTS_NONE;
    in.half_grad_scale = INFINITY;
    float before[64], after[64];
    int n = snapshot(opt, p, before);
    CHECK_FAILS(amp_optimizer_apply(opt, &in), AMP_ERR_INVALID_ARG, "'b.weight'");
    snapshot(opt, p, after);
    CHECK_MSG(memcmp(before, after, (size_t)n * sizeof(float)) == 0,
              "%s: a step refused by its second fused call changed the first call's parameters "
              "or state", adam ? "Adam" : "SGD");
    CHECK(amp_optimizer_step_count(opt) == 0);
    CHECK(!amp_optimizer_has_state(opt, 0) && !amp_optimizer_has_state(opt, 1));
    CHECK_OK(amp_optimizer_step(opt)); /* AMP_OPTIM_INPUTS_NONE: the factor 1 */
    snapshot(opt, p, after);
    CHECK(after[0] != before[0] && after[g_numel[0] * (1 + amp_optimizer_n_state(opt))] !=
                                       before[g_numel[0] * (1 + amp_optimizer_n_state(opt))]);
    CHECK(amp_optimizer_step_count(opt) == 1);
    CHECK(amp_optimizer_has_state(opt, 0) && amp_optimizer_has_state(opt, 1));
done:
    amp_optimizer_free(opt);
    for (int i = 0; i < N_PARAMS; i++) amp_tensor_free(p[i]);
    amp_ctx_free(ctx);
}

int main(void) {
    test_second_call_refused(false);
    test_second_call_refused(true);
    return test_summary("test_optim_fused");
}
