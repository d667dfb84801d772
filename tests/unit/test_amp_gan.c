/* Several models and optimizers under one amp_initialize (Apex's amp.initialize([G, D],
 * [optG, optD], num_losses=2)), the GAN loop that needs it, and amp_deinitialize.
 *
 * The GAN (least-squares GAN on a toy distribution) builds both losses in one forward:
 *   fake = G(z); d_fake = D(fake); d_real = D(real); fake' = G(z) without gradients
 *   lossG = mse(d_fake, 1)                        loss_id 1, back-propagated through D and G
 *   lossD = mse(d_real, 1) + mse(D(fake'), 0)     loss_id 0, through D only
 *   backward(lossG, retain_graph) -> step G -> clear D's gradients (optimizer_zero_grad: the graph
 *   stays) -> backward(lossD) -> step D -> zero_grad both.
 * fake' is PyTorch's fake.detach(): through d_fake, lossD's backward would reach G, whose weights
 * step G rewrote after the forward, and autograd refuses that (O0, O2: its linears read them) as
 * PyTorch does; the retained graph's G nodes stay on the tape unreached.
 * It must train at O1 and O2: the generated mean moves most of the way to the real one, every
 * value stays finite, and each loss's scaler counts its own backwards. */
#include <math.h>

#include "amp_rig.h"
#include "core/ctx.h"
#include "flaky_backend.h"
#include "core/tensor_internal.h"

#define ZDIM 4
#define XDIM 8
#define GAN_BATCH 32
#define REAL_MEAN 2.0f

typedef struct gan {
    amp_ctx *ctx;
    amp_model *g, *d;
    amp_optimizer *opt_g, *opt_d;
    amp_tensor *z, *real, *ones, *zeros;
} gan;

static void fill_normal(float *v, int n, float mean, float sd) {
    for (int i = 0; i < n; i += 2) { /* Box-Muller on the rig's generator */
        float u = rand_unit() * 0.999f + 0.0005f, w = rand_unit();
        float r = sqrtf(-2.0f * logf(u));
        v[i] = mean + sd * r * cosf(6.2831853f * w);
        if (i + 1 < n) v[i + 1] = mean + sd * r * sinf(6.2831853f * w);
    }
}

static bool gan_make(gan *n, uint64_t seed) {
    *n = (gan){0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = seed}, &n->ctx));
    if (!n->ctx) return false;
    CHECK_OK(amp_seq_create(n->ctx, &n->g));
    CHECK_OK(amp_seq_create(n->ctx, &n->d));
    if (!n->g || !n->d) return false;
    CHECK_OK(amp_seq_add_linear(n->g, "fc1", ZDIM, 32, true));
    CHECK_OK(amp_seq_add_relu(n->g, "relu"));
    CHECK_OK(amp_seq_add_linear(n->g, "fc2", 32, XDIM, true));
    CHECK_OK(amp_seq_add_linear(n->d, "fc1", XDIM, 32, true));
    CHECK_OK(amp_seq_add_relu(n->d, "relu"));
    CHECK_OK(amp_seq_add_linear(n->d, "fc2", 32, 1, true));
    amp_adam_opts ao = amp_adam_defaults(); /* the GAN betas (0.5, 0.999) */
    ao.lr = 2e-3f;
    ao.beta1 = 0.5f;
    CHECK_OK(amp_adam_create(n->g, &ao, &n->opt_g));
    CHECK_OK(amp_adam_create(n->d, &ao, &n->opt_d));
    int64_t zs[2] = {GAN_BATCH, ZDIM}, xs[2] = {GAN_BATCH, XDIM}, ys[2] = {GAN_BATCH, 1};
    CHECK_OK(amp_tensor_create(n->ctx, AMP_F32, 2, zs, &n->z));
    CHECK_OK(amp_tensor_create(n->ctx, AMP_F32, 2, xs, &n->real));
    float one[GAN_BATCH];
    for (int i = 0; i < GAN_BATCH; i++) one[i] = 1.0f;
    CHECK_OK(amp_tensor_from_host(n->ctx, AMP_F32, 2, ys, one, &n->ones));
    CHECK_OK(amp_tensor_create(n->ctx, AMP_F32, 2, ys, &n->zeros));
    g_lcg = (uint32_t)seed;
    return n->opt_g && n->opt_d && n->z && n->real && n->ones && n->zeros;
}

static void gan_free(gan *n) {
    amp_tensor_free(n->z);
    amp_tensor_free(n->real);
    amp_tensor_free(n->ones);
    amp_tensor_free(n->zeros);
    amp_optimizer_free(n->opt_g);
    amp_optimizer_free(n->opt_d);
    amp_model_free(n->g);
    amp_model_free(n->d);
    amp_ctx_free(n->ctx);
    *n = (gan){0};
}

/* One iteration; *fake_mean gets the mean of the generated batch. */
static bool gan_iteration(gan *n, float *fake_mean) {
    float zv[GAN_BATCH * ZDIM], xv[GAN_BATCH * XDIM];
    fill_normal(zv, GAN_BATCH * ZDIM, 0.0f, 1.0f);
    fill_normal(xv, GAN_BATCH * XDIM, REAL_MEAN, 0.3f);
    CHECK_OK(amp_tensor_copy_from_host(n->z, zv, sizeof zv));
    CHECK_OK(amp_tensor_copy_from_host(n->real, xv, sizeof xv));
    amp_tensor *fake, *fake_d, *d_fake, *d_fake_d, *d_real, *loss_g, *l_real, *l_fake, *loss_d, *m;
    amp_status s = amp_model_forward(n->g, n->z, &fake);
    bool grads = amp_set_grad_enabled(n->ctx, false); /* fake' = fake.detach() */
    if (s == AMP_OK) s = amp_model_forward(n->g, n->z, &fake_d);
    amp_set_grad_enabled(n->ctx, grads);
    if (s == AMP_OK) s = amp_model_forward(n->d, fake, &d_fake);
    if (s == AMP_OK) s = amp_model_forward(n->d, fake_d, &d_fake_d);
    if (s == AMP_OK) s = amp_model_forward(n->d, n->real, &d_real);
    if (s == AMP_OK) s = amp_mse_loss(d_fake, n->ones, &loss_g);
    if (s == AMP_OK) s = amp_mse_loss(d_real, n->ones, &l_real);
    if (s == AMP_OK) s = amp_mse_loss(d_fake_d, n->zeros, &l_fake);
    if (s == AMP_OK) s = amp_add(l_real, l_fake, &loss_d);
    if (s == AMP_OK) s = amp_mean(fake, &m);
    if (s == AMP_OK) s = amp_tensor_item(m, fake_mean);
    if (s == AMP_OK)
        s = amp_backward_with(loss_g, &(amp_backward_opts){.loss_id = 1, .retain_graph = true});
    if (s == AMP_OK) s = amp_step(n->opt_g, NULL);
    if (s == AMP_OK) s = amp_optimizer_zero_grad(n->opt_d); /* lossG's share of D's gradients */
    if (s == AMP_OK) s = amp_backward_with(loss_d, &(amp_backward_opts){.loss_id = 0});
    if (s == AMP_OK) s = amp_step(n->opt_d, NULL);
    if (s == AMP_OK) s = amp_zero_grad(n->opt_g);
    if (s == AMP_OK) s = amp_zero_grad(n->opt_d);
    CHECK_MSG(s == AMP_OK, "GAN iteration: %s", amp_last_error());
    return s == AMP_OK;
}

static void test_gan_trains(amp_opt_level level, amp_half_type half) {
    const int iters = 300;
    gan n;
    if (gan_make(&n, 21)) {
        amp_model *models[2] = {n.g, n.d};
        amp_optimizer *opts[2] = {n.opt_g, n.opt_d};
        amp_options o = {.opt_level = level, .half_type = half, .num_losses = 2, .quiet = true};
        CHECK_OK(amp_initialize_multi(models, 2, opts, 2, &o));
        float first = NAN, mean = NAN;
        bool ok = true;
        for (int it = 0; ok && it < iters; it++) {
            ok = gan_iteration(&n, &mean);
            if (it == 0) first = mean;
        }
        const char *h = half == AMP_HALF_BF16 ? "bf16" : "f16";
        printf("O%d %s: generated mean %.4f -> %.4f after %d iterations (real %.1f)\n",
               (int)level, h, (double)first, (double)mean, iters, (double)REAL_MEAN);
        CHECK_MSG(ok && isfinite(mean) && fabsf(mean - REAL_MEAN) < 0.3f * fabsf(first - REAL_MEAN),
                  "O%d %s: generated mean %g -> %g, real %g", (int)level, h, (double)first,
                  (double)mean, (double)REAL_MEAN);
        amp_scaler_state s0, s1;
        CHECK_OK(amp_scaler_get_state(n.opt_d, 0, &s0));
        CHECK_OK(amp_scaler_get_state(n.opt_g, 1, &s1));
        CHECK_MSG(s0.total_steps == iters && s1.total_steps == iters,
                  "O%d %s: scalers counted %lld and %lld backwards", (int)level, h,
                  (long long)s0.total_steps, (long long)s1.total_steps);
        CHECK(amp_optimizer_step_count(n.opt_g) == iters - s1.skipped_steps);
        CHECK(amp_optimizer_step_count(n.opt_d) == iters - s0.skipped_steps);
        CHECK(amp_model_param(n.g, 0)->dtype == (level == AMP_O2 ? (half == AMP_HALF_BF16
                                                                        ? AMP_BF16 : AMP_F16)
                                                                 : AMP_F32));
    }
    gan_free(&n);
}

/* Apex's list checks, each an error that names the culprit, with nothing changed. */
static void test_multi_errors(void) {
    gan n, other;
    if (gan_make(&n, 22) && gan_make(&other, 23)) {
        amp_options o = {.opt_level = AMP_O2, .quiet = true};
        amp_model *two[2] = {n.g, n.d}, *dup[2] = {n.g, n.g}, *mixed[2] = {n.g, other.d};
        amp_optimizer *opts[2] = {n.opt_g, n.opt_d}, *foreign[1] = {other.opt_g};
        CHECK_FAILS(amp_initialize_multi(two, 2, opts, 0, &o), AMP_ERR_INVALID_ARG, "0 optimizers");
        CHECK_FAILS(amp_initialize_multi(dup, 2, opts, 1, &o), AMP_ERR_INVALID_ARG,
                    "model #1 is also #0");
        CHECK_FAILS(amp_initialize_multi(mixed, 2, opts, 1, &o), AMP_ERR_INVALID_ARG,
                    "another context");
        CHECK_FAILS(amp_initialize_multi(two, 2, foreign, 1, &o), AMP_ERR_INVALID_ARG,
                    "not created for any of the models");
        amp_optimizer *twice[2] = {n.opt_g, n.opt_g};
        CHECK_FAILS(amp_initialize_multi(two, 2, twice, 2, &o), AMP_ERR_INVALID_ARG,
                    "optimizer #1 is also #0");
        CHECK(amp_model_param(n.g, 0)->dtype == AMP_F32 && !amp_optimizer_has_masters(n.opt_g));
        CHECK_OK(amp_initialize_multi(two, 2, opts, 2, &o));
        CHECK_FAILS(amp_initialize_multi(two, 2, opts, 2, &o), AMP_ERR_STATE, "amp_deinitialize");
        CHECK_FAILS(amp_step(other.opt_g, NULL), AMP_ERR_STATE, "amp_initialize was not called");
    }
    gan_free(&n);
    gan_free(&other);
}

/* amp_deinitialize at O2 gives back the exact f32 weights (the masters), drops the masters and
 * the hooks; the plain optimizer then steps the f32 model; amp_initialize works again. */
static void test_deinitialize(void) {
    gan n;
    if (gan_make(&n, 24)) {
        amp_model *models[2] = {n.g, n.d};
        amp_optimizer *opts[2] = {n.opt_g, n.opt_d};
        amp_options o = {.opt_level = AMP_O2, .num_losses = 2, .quiet = true};
        CHECK_OK(amp_initialize_multi(models, 2, opts, 2, &o));
        float mean;
        for (int it = 0; it < 3; it++) CHECK(gan_iteration(&n, &mean));
        int np = amp_model_n_params(n.g);
        float *masters[8] = {0};
        for (int i = 0; i < np && i < 8; i++) {
            amp_tensor *mw = amp_optimizer_master(n.opt_g, i);
            masters[i] = malloc(amp_tensor_nbytes(mw));
            memcpy(masters[i], mw->data, amp_tensor_nbytes(mw));
        }
        CHECK_OK(amp_deinitialize(n.ctx));
        CHECK_FAILS(amp_deinitialize(n.ctx), AMP_ERR_STATE, "not called");
        CHECK(!amp_optimizer_has_masters(n.opt_g) && !amp_optimizer_has_masters(n.opt_d));
        for (int i = 0; i < np && i < 8; i++) {
            amp_tensor *p = amp_model_param(n.g, i);
            CHECK_MSG(p->dtype == AMP_F32 && masters[i] &&
                          !memcmp(p->data, masters[i], amp_tensor_nbytes(p)),
                      "%s is not its master after amp_deinitialize", amp_model_param_name(n.g, i));
            free(masters[i]);
        }
        CHECK_FAILS(amp_step(n.opt_g, NULL), AMP_ERR_STATE, "amp_initialize was not called");
        amp_tensor *out, *loss;
        CHECK_OK(amp_model_forward(n.d, n.real, &out));
        CHECK(out && out->dtype == AMP_F32);
        CHECK_OK(amp_mse_loss(out, n.ones, &loss));
        CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_optimizer_step(n.opt_d)); /* plain: the hooks are gone */
        CHECK_OK(amp_zero_grad(n.opt_d));
        o.opt_level = AMP_O1;
        CHECK_OK(amp_initialize_multi(models, 2, opts, 2, &o));
        CHECK(gan_iteration(&n, &mean));
    }
    gan_free(&n);
}

/* Freeing an optimizer or a model under amp: the amp layer forgets it (no dangling pointer); the
 * other one keeps training; teardown in any order. */
static void test_free_under_amp(void) {
    gan n;
    if (gan_make(&n, 25)) {
        amp_model *models[2] = {n.g, n.d};
        amp_optimizer *opts[2] = {n.opt_g, n.opt_d};
        amp_options o = {.opt_level = AMP_O2, .num_losses = 2, .quiet = true};
        CHECK_OK(amp_initialize_multi(models, 2, opts, 2, &o));
        amp_optimizer_free(n.opt_g);
        n.opt_g = NULL;
        amp_tensor *out, *loss;
        CHECK_OK(amp_model_forward(n.d, n.real, &out));
        CHECK_OK(amp_mse_loss(out, n.ones, &loss));
        CHECK_OK(amp_backward_ex(loss, 0));
        bool stepped = false;
        CHECK_OK(amp_step(n.opt_d, &stepped));
        amp_scaler_state s0;
        CHECK_OK(amp_scaler_get_state(n.opt_d, 0, &s0));
        CHECK(s0.total_steps == 1 && amp_optimizer_step_count(n.opt_d) == (stepped ? 1 : 0));
        amp_model_free(n.g);
        n.g = NULL;
        CHECK_OK(amp_deinitialize(n.ctx));
        CHECK(amp_model_param(n.d, 0)->dtype == AMP_F32);
    }
    gan_free(&n);
}

/* Every allocation amp_initialize_multi makes through the context (scalers' flags, sums, the
 * models' half blocks; with O2's masters already made when they fail), made to fail in turn: each failure leaves both models' parameters f32 with
 * their bits, no masters, no amp state, every block given back; the first try that gets through
 * initialises. */
static void test_initialize_rolls_back(void) {
    const amp_opt_level levels[2] = {AMP_O2, AMP_O3};
    for (int l = 0; l < 2; l++) {
        gan n;
        if (!gan_make(&n, 26)) {
            gan_free(&n);
            continue;
        }
        amp_model *models[2] = {n.g, n.d};
        amp_optimizer *opts[2] = {n.opt_g, n.opt_d};
        amp_options o = {.opt_level = levels[l], .num_losses = 2, .quiet = true};
        size_t nbytes = 0;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < amp_model_n_params(models[k]); i++)
                nbytes += amp_tensor_nbytes(amp_model_param(models[k], i));
        uint8_t *before = malloc(nbytes);
        if (!before) break;
        size_t at = 0;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < amp_model_n_params(models[k]); i++) {
                amp_tensor *p = amp_model_param(models[k], i);
                memcpy(before + at, p->data, amp_tensor_nbytes(p));
                at += amp_tensor_nbytes(p);
            }
        amp_backend flaky = flaky_backend();
        const amp_backend *cpu = n.ctx->backend;
        n.ctx->backend = &flaky; /* the amp state's and the models' blocks (masters: the optimizers') */
        int failures = 0;
        amp_status s = AMP_ERR_OOM;
        for (int k = 1; k <= 64 && s != AMP_OK; k++) {
            g_flaky = (flaky_state){.fail_alloc_at = k};
            s = amp_initialize_multi(models, 2, opts, 2, &o);
            if (s == AMP_OK) break;
            failures++;
            at = 0;
            bool same = true;
            for (int m = 0; m < 2; m++)
                for (int i = 0; i < amp_model_n_params(models[m]); i++) {
                    amp_tensor *p = amp_model_param(models[m], i);
                    same &= p->dtype == AMP_F32 && !memcmp(before + at, p->data, amp_tensor_nbytes(p));
                    at += amp_tensor_nbytes(p);
                }
            CHECK_MSG(s == AMP_ERR_OOM && same && n.ctx->amp == NULL &&
                          !amp_optimizer_has_masters(n.opt_g) && !amp_optimizer_has_masters(n.opt_d) &&
                          g_flaky.n_alloc == g_flaky.n_free,
                      "O%d, allocation %d failing: status %d, models unchanged %d, amp state %p, "
                      "%d blocks taken, %d given back", (int)levels[l], k, (int)s, same,
                      n.ctx->amp, g_flaky.n_alloc, g_flaky.n_free);
        }
        CHECK_MSG(s == AMP_OK && failures >= 3, "O%d: %d failure points, then status %d",
                  (int)levels[l], failures, (int)s);
        CHECK(amp_model_param(n.g, 0)->dtype == AMP_F16);
        g_flaky = (flaky_state){0};
        CHECK_OK(amp_deinitialize(n.ctx));
        n.ctx->backend = cpu;
        free(before);
        gan_free(&n);
    }
}

int main(void) {
    test_initialize_rolls_back();
    test_gan_trains(AMP_O1, AMP_HALF_F16);
    test_gan_trains(AMP_O2, AMP_HALF_F16);
    test_gan_trains(AMP_O2, AMP_HALF_BF16);
    test_multi_errors();
    test_deinitialize();
    test_free_under_amp();
    return test_summary("test_amp_gan");
}
