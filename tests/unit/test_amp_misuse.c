/* The uses of the amp API that used to train nothing, or the wrong thing, while returning OK, and
 * the gaps around them. Each case compares against a twin run that does the same training the
 * plain way (same seed, same weights, same batch), or checks for an error that says what to do:
 *  1. a forward with gradients off before the training forward of the same step (O1's weight
 *     casts must not be reused without their tape nodes);
 *  2. a tensor of a step that was reset (amp_zero_grad) used afterwards;
 *  3. amp_optimizer_step after amp_initialize (Apex patches optimizer.step: it is amp_step);
 *  4. amp_zero_grad resets amp's per-step state (discarded backwards, overflows and unscales);
 *  5. two losses of one forward (retain_graph);
 *  6. an f16 loss of one element under the default scale of 65536 (f16 max: 65504);
 *  7. skip_nonfinite at every level and half type;
 * 10. a failing optimizer step leaves parameters, state and scaler as they were;
 * 11. amp_scaler_set_state between a backward and its step;
 * 12. amp_step with nothing to step on (no backward since the last step or zero_grad: torch's
 *     GradScaler raises), and a second amp_step on one backward's gradients, which would apply
 *     them twice: both refused with a message, nothing changed, the step count kept; one loss
 *     and two (Apex's order), and with gradient accumulation (several backwards, one step);
 * 13. a loss that is not one (several elements) is named so at O1 as without amp, also where the
 *     amp layer's own checks would otherwise speak first (a second backward seeded with another
 *     scale, a backward after amp_unscale). */
#include <math.h>

#include "amp_rig.h"
#include "nn/autograd.h"

static amp_options level(amp_opt_level l) { return (amp_options){.opt_level = l}; }

/* Parameters of two rigs equal bit for bit (dtype and data). */
static bool same_params(const rig *a, const rig *b) {
    for (int i = 0; i < n_params(a); i++) {
        const amp_tensor *x = param(a, i), *y = param(b, i);
        if (x->dtype != y->dtype || memcmp(x->data, y->data, amp_tensor_nbytes(x))) return false;
    }
    return true;
}

static bool params_finite(const rig *r) {
    for (int i = 0; i < n_params(r); i++)
        for (int64_t k = 0; k < param(r, i)->numel; k++)
            if (!isfinite(elem_f32(param(r, i), k))) return false;
    return true;
}

/* One plain amp step on a rig: forward, backward, amp_step, zero_grad. */
static bool plain_step(rig *r, bool *stepped) {
    if (!forward_backward(r)) return false;
    amp_status s = amp_step(r->opt, stepped);
    CHECK_OK(s);
    CHECK_OK(amp_zero_grad(r->opt));
    return s == AMP_OK;
}

/* 1. An eval forward under amp_set_grad_enabled(false), then the training forward: every weight
 * must get its gradient, and the step must equal a step without the eval forward. */
static void test_nograd_forward_first(void) {
    for (int half = 0; half < 2; half++) {
        amp_options o = level(AMP_O1);
        o.half_type = half ? AMP_HALF_BF16 : AMP_HALF_F16;
        rig a, b;
        if (rig_make(&a, TINY, false, &o, 3) && rig_make(&b, TINY, false, &o, 3)) {
            amp_tensor *logits = NULL;
            bool prev = amp_set_grad_enabled(a.ctx, false);
            CHECK_OK(amp_model_forward(a.m, a.x, &logits));
            amp_set_grad_enabled(a.ctx, prev);
            CHECK(forward_backward(&a));
            for (int i = 0; i < n_params(&a); i++) {
                amp_tensor *g = NULL;
                CHECK_MSG(amp_tensor_get_grad(param(&a, i), &g) == AMP_OK,
                          "%s: parameter %s got no gradient after a no-grad forward",
                          o.half_type == AMP_HALF_BF16 ? "bf16" : "f16",
                          amp_model_param_name(a.m, i));
            }
            bool sa = false, sb = false;
            CHECK_OK(amp_step(a.opt, &sa));
            CHECK(plain_step(&b, &sb));
            CHECK(sa && sb && same_params(&a, &b));
        }
        rig_free(&a);
        rig_free(&b);
    }
}

/* 2. forward -> zero_grad -> backward/step: an error naming the reset, nothing counted. Also a
 * loss kept across a reset and a new forward, and a copy of it. */
static void test_stale_step_tensor(void) {
    rig r;
    amp_options o = level(AMP_O1);
    if (rig_make(&r, TINY, false, &o, 4)) {
        amp_tensor *loss = NULL;
        CHECK_OK(forward_loss(&r, r.x, &loss));
        CHECK_OK(amp_zero_grad(r.opt));
        CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "step that has ended");
        float v;
        CHECK_FAILS(amp_tensor_item(loss, &v), AMP_ERR_STATE, "step that has ended");
        amp_tensor *fresh = NULL, *sum = NULL;
        CHECK_OK(forward_loss(&r, r.x, &fresh));
        CHECK_FAILS(amp_add(loss, fresh, &sum), AMP_ERR_STATE, "recompute it");
        CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "step that has ended");
        amp_scaler_state sc;
        CHECK_OK(amp_scaler_get_state(r.opt, 0, &sc));
        CHECK(sc.total_steps == 0 && amp_optimizer_step_count(r.opt) == 0);
        CHECK_OK(amp_backward(fresh)); /* this step's loss still works */
    }
    rig_free(&r);
}

/* 3. amp_optimizer_step after amp_initialize is amp_step: same parameters as the twin's. */
static void test_plain_optimizer_step(void) {
    const amp_opt_level levels[] = {AMP_O1, AMP_O2, AMP_O3};
    for (int l = 0; l < 3; l++) {
        amp_options o = level(levels[l]);
        o.loss_scale = levels[l] == AMP_O3 ? 128.0f : 0.0f; /* O3 scaled too: unscaled in the update */
        rig a, b;
        if (rig_make(&a, CONVNET, false, &o, 5) && rig_make(&b, CONVNET, false, &o, 5)) {
            for (int s = 0; s < 3; s++) {
                CHECK(forward_backward(&a));
                CHECK_OK(amp_optimizer_step(a.opt));
                CHECK_OK(amp_zero_grad(a.opt));
                bool stepped;
                CHECK(plain_step(&b, &stepped));
            }
            CHECK_MSG(same_params(&a, &b), "O%d: amp_optimizer_step differs from amp_step",
                      (int)levels[l]);
            amp_scaler_state sa, sb;
            CHECK_OK(amp_scaler_get_state(a.opt, 0, &sa));
            CHECK_OK(amp_scaler_get_state(b.opt, 0, &sb));
            CHECK_MSG(amp_optimizer_step_count(a.opt) == 3 - sa.skipped_steps && params_finite(&a),
                      "O%d: %lld steps, %lld skipped", (int)levels[l],
                      (long long)amp_optimizer_step_count(a.opt), (long long)sa.skipped_steps);
            CHECK(sa.total_steps == 3 && sa.scale == sb.scale && sa.skipped_steps < 3);
        }
        rig_free(&a);
        rig_free(&b);
    }
}

/* 4a. A backward discarded by amp_zero_grad leaves nothing behind: with two losses, the next
 * step equals the twin's that never ran it. */
static void test_zero_grad_discards_backward(void) {
    amp_options o = level(AMP_O1);
    o.num_losses = 2;
    rig a, b;
    if (rig_make(&a, TINY, false, &o, 6) && rig_make(&b, TINY, false, &o, 6)) {
        amp_tensor *loss = NULL;
        CHECK_OK(forward_loss(&a, a.x, &loss));
        CHECK_OK(amp_backward_ex(loss, 1));
        CHECK_OK(amp_zero_grad(a.opt));
        bool sa = false, sb = false;
        CHECK(plain_step(&a, &sa));
        CHECK(plain_step(&b, &sb));
        CHECK_MSG(sa && sb && same_params(&a, &b), "a discarded backward leaked into the step");
    }
    rig_free(&a);
    rig_free(&b);
}

/* 4b. An overflow in a discarded batch does not skip the next clean step (one loss and two). */
static void test_zero_grad_discards_overflow(void) {
    for (int losses = 1; losses <= 2; losses++) {
        amp_options o = level(AMP_O1);
        o.num_losses = losses;
        rig r;
        if (rig_make(&r, TINY, false, &o, 7)) {
            float bad[BATCH * 16];
            for (int i = 0; i < BATCH * 16; i++) bad[i] = INFINITY;
            amp_tensor *xbad = NULL, *loss = NULL;
            CHECK_OK(amp_tensor_from_host(r.ctx, AMP_F32, 2, (int64_t[]){BATCH, 16}, bad, &xbad));
            CHECK_OK(forward_loss(&r, xbad, &loss));
            CHECK_OK(amp_backward(loss));
            if (losses == 1) CHECK_OK(amp_unscale(r.opt)); /* the flag is raised here */
            CHECK_OK(amp_zero_grad(r.opt));
            bool stepped = false;
            CHECK(plain_step(&r, &stepped));
            CHECK_MSG(stepped, "num_losses %d: a discarded overflow skipped a clean step", losses);
            amp_tensor_free(xbad);
        }
        rig_free(&r);
    }
}

/* 4c. amp_unscale (or clipping) then amp_zero_grad: the next backward works. */
static void test_zero_grad_after_unscale(void) {
    rig r;
    if (rig_make(&r, TINY, false, &(amp_options){.opt_level = AMP_O2}, 8)) {
        CHECK(forward_backward(&r));
        float norm;
        CHECK_OK(amp_clip_grad_norm(r.opt, 1.0f, &norm));
        CHECK_OK(amp_zero_grad(r.opt));
        bool stepped = false;
        CHECK(plain_step(&r, &stepped));
        CHECK(stepped);
        /* Without zero_grad a second backward after an unscale still says what to do. */
        CHECK(forward_backward(&r));
        CHECK_OK(amp_unscale(r.opt));
        amp_tensor *loss = NULL;
        CHECK_OK(forward_loss(&r, r.x, &loss));
        CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "amp_zero_grad");
    }
    rig_free(&r);
}

/* 5. Two losses of one forward: backward(a, retain_graph) then backward(b) gives the gradients
 * of a + b (up to rounding); without retain_graph the second is an error that names it. */
static void test_retain_graph(void) {
    rig a, b;
    if (rig_make(&a, TINY, false, NULL, 9) && rig_make(&b, TINY, false, NULL, 9)) {
        amp_tensor *la, *lb, *logits, *sq, *sum;
        CHECK_OK(amp_model_forward(a.m, a.x, &logits));
        CHECK_OK(amp_cross_entropy(logits, a.y, &la));
        CHECK_OK(amp_mul(logits, logits, &sq));
        CHECK_OK(amp_mean(sq, &lb));
        CHECK_OK(amp_backward_with(la, &(amp_backward_opts){.retain_graph = true}));
        CHECK_OK(amp_backward(lb));
        CHECK_FAILS(amp_backward(lb), AMP_ERR_STATE, "retain_graph");
        CHECK_OK(amp_model_forward(b.m, b.x, &logits));
        CHECK_OK(amp_cross_entropy(logits, b.y, &la));
        CHECK_OK(amp_mul(logits, logits, &sq));
        CHECK_OK(amp_mean(sq, &lb));
        CHECK_OK(amp_add(la, lb, &sum));
        CHECK_OK(amp_backward(sum));
        double worst = 0;
        for (int i = 0; i < n_params(&a); i++) {
            amp_tensor *ga = NULL, *gb = NULL;
            CHECK_OK(amp_tensor_get_grad(param(&a, i), &ga));
            CHECK_OK(amp_tensor_get_grad(param(&b, i), &gb));
            for (int64_t k = 0; ga && gb && k < ga->numel; k++) {
                double x = elem_f32(ga, k), y = elem_f32(gb, k);
                worst = fmax(worst, fabs(x - y) / (fabs(y) + 1e-4));
            }
        }
        CHECK_MSG(worst < 1e-5, "retained backward differs from backward of the sum: %.3g", worst);
    }
    rig_free(&a);
    rig_free(&b);
}

/* 6. An f16 loss of one element at the default scale: the first step is taken, and its update is
 * the f32 loss's within f16 rounding of the loss gradient's path. */
static void test_half_loss_seed(void) {
    rig a, b;
    amp_options o = level(AMP_O1);
    if (rig_make(&a, TINY, false, &o, 10) && rig_make(&b, TINY, false, &o, 10)) {
        amp_tensor *loss = NULL, *loss16 = NULL;
        CHECK_OK(forward_loss(&a, a.x, &loss));
        CHECK_OK(amp_cast(loss, AMP_F16, &loss16));
        CHECK_OK(amp_backward(loss16));
        bool stepped = false, sb = false;
        CHECK_OK(amp_step(a.opt, &stepped));
        CHECK_MSG(stepped, "an f16 loss skipped its first step (seed overflowed)");
        CHECK(plain_step(&b, &sb));
        double worst = 0;
        for (int i = 0; i < n_params(&a); i++)
            for (int64_t k = 0; k < param(&a, i)->numel; k++) {
                double x = elem_f32(param(&a, i), k), y = elem_f32(param(&b, i), k);
                worst = fmax(worst, fabs(x - y));
            }
        CHECK_MSG(worst < 1e-6, "f16-loss step differs from the f32-loss step by %.3g", worst);
        amp_scaler_state sc;
        CHECK_OK(amp_scaler_get_state(a.opt, 0, &sc));
        CHECK(sc.scale == 65536.0f && sc.skipped_steps == 0);
    }
    rig_free(&a);
    rig_free(&b);
}

/* 7. A NaN gradient with nothing scaled (bf16 at scale 1, O3 at scale 1, O2 bf16, O0 asked):
 * skipped, parameters and state untouched. O0's default (Apex and PyTorch: no check) lets it in,
 * which the header documents. */
static void test_skip_nonfinite(void) {
    struct { amp_opt_level l; amp_half_type h; amp_opt_flag skip; bool want_skip; } rows[] = {
        {AMP_O1, AMP_HALF_BF16, AMP_OPT_DEFAULT, true},  {AMP_O2, AMP_HALF_BF16, AMP_OPT_DEFAULT, true},
        {AMP_O3, AMP_HALF_F16, AMP_OPT_DEFAULT, true},   {AMP_O3, AMP_HALF_BF16, AMP_OPT_DEFAULT, true},
        {AMP_O0, AMP_HALF_F16, AMP_OPT_TRUE, true},      {AMP_O0, AMP_HALF_F16, AMP_OPT_DEFAULT, false},
        {AMP_O1, AMP_HALF_BF16, AMP_OPT_FALSE, false},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        amp_options o = {.opt_level = rows[k].l, .half_type = rows[k].h,
                         .skip_nonfinite = rows[k].skip};
        rig r;
        if (rig_make(&r, TINY, true, &o, 11)) {
            float xs[BATCH * 16] = {0};
            xs[5] = NAN;
            CHECK_OK(amp_tensor_copy_from_host(r.x, xs, sizeof xs));
            size_t n0, n1;
            uint8_t *s0 = snapshot(&r, &n0);
            bool stepped = true;
            CHECK(plain_step(&r, &stepped));
            uint8_t *s1 = snapshot(&r, &n1);
            bool same = s0 && s1 && n0 == n1 && !memcmp(s0, s1, n0);
            CHECK_MSG(stepped == !rows[k].want_skip && same == rows[k].want_skip,
                      "row %zu (O%d %s skip_nonfinite %d): stepped %d, state untouched %d", k,
                      (int)rows[k].l, rows[k].h == AMP_HALF_BF16 ? "bf16" : "f16",
                      (int)rows[k].skip, stepped, same);
            if (!rows[k].want_skip) CHECK(!params_finite(&r));
            free(s0);
            free(s1);
            amp_scaler_state sc;
            CHECK_OK(amp_scaler_get_state(r.opt, 0, &sc));
            CHECK(sc.skipped_steps == (rows[k].want_skip ? 1 : 0));
        }
        rig_free(&r);
    }
}

/* 10. A step whose optimizer fails (a parameter it cannot update) changes nothing: parameters,
 * state, the scaler; after the cause is gone the same step goes through. */
static void test_failing_step_rolls_back(void) {
    rig r;
    amp_options o = level(AMP_O1);
    if (rig_make(&r, TINY, false, &o, 12)) {
        CHECK(forward_backward(&r));
        size_t n0, n1;
        uint8_t *s0 = snapshot(&r, &n0);
        amp_scaler_state before, after;
        CHECK_OK(amp_scaler_get_state(r.opt, 0, &before));
        amp_tensor *p = param(&r, 2); /* fc2.weight [4, 12] seen as [12, 4]: not its grad's */
        p->shape[0] = 12, p->shape[1] = 4;
        CHECK_FAILS(amp_step(r.opt, NULL), AMP_ERR_SHAPE, "'fc2.weight' is [12, 4]");
        p->shape[0] = 4, p->shape[1] = 12;
        uint8_t *s1 = snapshot(&r, &n1);
        CHECK_OK(amp_scaler_get_state(r.opt, 0, &after));
        CHECK(s0 && s1 && n0 == n1 && !memcmp(s0, s1, n0));
        CHECK(after.total_steps == before.total_steps && after.scale == before.scale);
        bool stepped = false;
        CHECK_OK(amp_step(r.opt, &stepped));
        CHECK(stepped && amp_optimizer_step_count(r.opt) == 1);
        CHECK_OK(amp_scaler_get_state(r.opt, 0, &after));
        CHECK(after.total_steps == 1);
        free(s0);
        free(s1);
    }
    rig_free(&r);
}

/* 11. amp_scaler_set_state between a backward and its step is refused, saying when to call it:
 * taken, the step would unscale with the new scale instead of the one its backward used. The
 * step then equals a plain one; between steps the state is taken. */
static void test_set_state_inside_step(void) {
    rig a = {0}, b = {0};
    amp_options o = level(AMP_O1);
    if (rig_make(&a, TINY, false, &o, 13) && rig_make(&b, TINY, false, &o, 13)) {
        amp_scaler_state st, halved, got;
        CHECK_OK(amp_scaler_get_state(a.opt, 0, &st));
        halved = st;
        halved.scale = st.scale / 2;
        CHECK(forward_backward(&a));
        CHECK_FAILS(amp_scaler_set_state(a.opt, 0, &halved), AMP_ERR_STATE,
                    "before amp_backward, or after amp_step or amp_zero_grad");
        bool sa = false, sb = false;
        CHECK_OK(amp_step(a.opt, &sa));
        CHECK_OK(amp_zero_grad(a.opt));
        CHECK(plain_step(&b, &sb));
        CHECK_MSG(sa && sb && same_params(&a, &b), "a scaler state set inside the step changed "
                  "what the step did");
        CHECK_OK(amp_scaler_get_state(a.opt, 0, &st)); /* between steps: taken */
        halved = st;
        halved.scale = st.scale / 2;
        CHECK_OK(amp_scaler_set_state(a.opt, 0, &halved));
        CHECK_OK(amp_scaler_get_state(a.opt, 0, &got));
        CHECK(got.scale == halved.scale && got.total_steps == st.total_steps);
    }
    rig_free(&a);
    rig_free(&b);
}

/* 12. Nothing to step on, or stepping twice on one backward: refused, nothing changes. */
static void test_step_needs_backward(void) {
    for (int losses = 1; losses <= 2; losses++) {
        amp_options o = level(AMP_O2);
        o.num_losses = losses;
        o.loss_scale = 128.0f; /* no overflow in the f16 sums of two backwards */
        rig r;
        if (rig_make(&r, TINY, true, &o, 14)) {
            size_t n0, n1;
            uint8_t *before = snapshot(&r, &n0);
            bool stepped = true;
            CHECK_FAILS(amp_step(r.opt, &stepped), AMP_ERR_STATE, "No inf checks were recorded");
            CHECK_FAILS(amp_optimizer_step(r.opt), AMP_ERR_STATE, "no gradient to step on");
            uint8_t *after = snapshot(&r, &n1);
            CHECK_MSG(!stepped && n0 == n1 && memcmp(before, after, n0) == 0 &&
                      amp_optimizer_step_count(r.opt) == 0,
                      "num_losses %d: a refused step without a backward changed something", losses);
            free(before);
            free(after);

            /* Accumulation: two backwards, one step; a second step on them is refused. */
            CHECK(forward_backward(&r));
            CHECK(forward_backward(&r));
            CHECK_OK(amp_step(r.opt, &stepped));
            CHECK_MSG(stepped && amp_optimizer_step_count(r.opt) == 1, "stepped %d, count %lld",
                      stepped, (long long)amp_optimizer_step_count(r.opt));
            before = snapshot(&r, &n0);
            CHECK_FAILS(amp_step(r.opt, &stepped), AMP_ERR_STATE, "apply them twice");
            after = snapshot(&r, &n1);
            CHECK_MSG(n0 == n1 && memcmp(before, after, n0) == 0 &&
                      amp_optimizer_step_count(r.opt) == 1,
                      "num_losses %d: a second step on one backward changed something", losses);
            free(before);
            free(after);

            /* After amp_zero_grad there is nothing to step on again; a backward makes it right. */
            CHECK_OK(amp_zero_grad(r.opt));
            CHECK_FAILS(amp_step(r.opt, &stepped), AMP_ERR_STATE, "no gradient to step on");
            CHECK(plain_step(&r, &stepped));
            CHECK(stepped && amp_optimizer_step_count(r.opt) == 2);
        }
        rig_free(&r);
    }
}

/* 13. A non-scalar loss gets the message it gets without amp, whatever else is wrong. */
static void test_nonscalar_loss_message(void) {
    rig r;
    if (rig_make(&r, TINY, false, &(amp_options){.opt_level = AMP_O1}, 15)) {
        amp_tensor *logits = NULL, *half = NULL, *loss = NULL;
        /* The logits as an f16 "loss" after an f32 loss's backward: another seed cap. */
        CHECK(forward_backward(&r));
        CHECK_OK(amp_model_forward(r.m, r.x, &logits));
        CHECK_OK(amp_cast(logits, AMP_F16, &half));
        CHECK_FAILS(amp_backward(half), AMP_ERR_SHAPE, "loss has 16 elements, want 1");
        CHECK_FAILS(amp_backward(logits), AMP_ERR_SHAPE, "loss has 16 elements, want 1");
        /* After an unscale the shape still speaks first. */
        CHECK_OK(amp_unscale(r.opt));
        CHECK_FAILS(amp_backward(logits), AMP_ERR_SHAPE, "loss has 16 elements, want 1");
        CHECK_OK(forward_loss(&r, r.x, &loss));
        CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "unscaled already");
    }
    rig_free(&r);
}

int main(void) {
    test_nograd_forward_first();
    test_stale_step_tensor();
    test_plain_optimizer_step();
    test_zero_grad_discards_backward();
    test_zero_grad_discards_overflow();
    test_zero_grad_after_unscale();
    test_retain_graph();
    test_half_loss_seed();
    test_skip_nonfinite();
    test_failing_step_rolls_back();
    test_set_state_inside_step();
    test_step_needs_backward();
    test_nonscalar_loss_message();
    return test_summary("test_amp_misuse");
}
