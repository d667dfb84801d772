/* The loss scaler (amp/scaler.c) against torch and against hand-computed sequences.
 *
 *  - torch replay: tests/ref/scaler_ref.h holds torch.amp.GradScaler("cpu") + SGD(momentum 0.9)
 *    trajectories (tests/ref/gen_scaler_ref.py); the same 25 steps run here through
 *    amp_scaler_update + amp_cpu_unscale + SGD per parameter (tests/one_tensor.h). The scale
 *    before and after each step, the growth tracker and every skip decision must match exactly,
 *    the final weights and momentum buffers to 1 ulp, and a skipped step must leave weights and
 *    momentum bit-identical.
 *  - hysteresis: DeepSpeed's DynamicLossScaler.update_scale (delayed_shift, consecutive_hysteresis
 *    off) worked by hand below, with torch's growth count;
 *  - min/max clamps, torch's "never grow to inf", the 2^-126 floor, static scales with and
 *    without overflow checks, multi-loss counters;
 *  - state get/set round trip and every rejected state and config, with its message;
 *  - the overflow log line (Apex's wording) and its rate limit, and the line of an overflow read
 *    lazily from the device struct after clean steps grew the scale again. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp/scaler_internal.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/scaler.h"
#include "one_tensor.h"
#include "ref/scaler_ref.h"
#include "test_data.h"
#include "test_util.h"

static amp_scaler *make(amp_scaler_config c) {
    amp_scaler *s = NULL;
    amp_status st = amp_scaler_create(&c, &s);
    CHECK_MSG(st == AMP_OK && s, "amp_scaler_create: %s", amp_last_error());
    return s;
}

static void replay_torch_case(const scaler_ref_case *rc) {
    amp_scaler *s = make((amp_scaler_config){
        .dynamic = true,
        .scale = rc->init_scale,
        .growth_factor = rc->growth_factor,
        .backoff_factor = rc->backoff_factor,
        .growth_interval = rc->growth_interval,
        .max_scale = INFINITY, /* torch has no ceiling */
        .quiet = true,
    });
    if (!s) return;
    float params[SCALER_REF_NUMEL], mom[SCALER_REF_NUMEL], grad[SCALER_REF_NUMEL];
    memcpy(params, scaler_ref_init, sizeof params);
    memset(mom, 0, sizeof mom);
    bool have_buf = false; /* torch creates the buffers at the first step that is not skipped */
    int bad_scale = 0, bad_skip = 0, bad_tracker = 0, moved_on_skip = 0;
    for (int step = 0; step < SCALER_REF_N_STEPS; step++) {
        float scale = amp_scaler_scale(s);
        bad_scale += amp_f32_bits(scale) != amp_f32_bits(rc->scale_before[step]);
        /* The scaled backward: torch multiplies each f32 gradient by its f32 scale tensor. */
        for (int i = 0; i < SCALER_REF_NUMEL; i++) grad[i] = scaler_ref_grad[step][i] * scale;
        int off[SCALER_REF_N_PARAMS + 1] = {0};
        for (int p = 0; p < SCALER_REF_N_PARAMS; p++) off[p + 1] = off[p] + scaler_ref_param_numel[p];
        for (int k = 0; k < SCALER_REF_N_INJECT; k++)
            if (scaler_ref_inject[k].step == step)
                grad[off[scaler_ref_inject[k].param] + scaler_ref_inject[k].elem] =
                    scaler_ref_inject[k].value;
        float params_before[SCALER_REF_NUMEL], mom_before[SCALER_REF_NUMEL];
        memcpy(params_before, params, sizeof params);
        memcpy(mom_before, mom, sizeof mom);

        float found_inf = 0.0f, inv = amp_scaler_inv_scale(s);
        for (int p = 0; p < SCALER_REF_N_PARAMS; p++)
            CHECK_OK(amp_cpu_unscale(amp_cpu_device(), AMP_F32, scaler_ref_param_numel[p],
                                     grad + off[p], inv, grad + off[p], &found_inf));
        bool skip = amp_scaler_update(s, found_inf != 0.0f, false);
        bad_skip += skip != (rc->skipped[step] != 0);
        if (!skip) {
            amp_sgd_desc d = {.lr = scaler_ref_lr, .momentum = scaler_ref_momentum,
                              .first_step = !have_buf};
            for (int p = 0; p < SCALER_REF_N_PARAMS; p++)
                CHECK_OK(one_tensor_sgd(&d, scaler_ref_param_numel[p], params + off[p],
                                            grad + off[p], AMP_F32, mom + off[p]));
            have_buf = true;
        } else {
            moved_on_skip += memcmp(params_before, params, sizeof params) != 0 ||
                             memcmp(mom_before, mom, sizeof mom) != 0;
        }
        amp_scaler_state st;
        amp_scaler_get(s, &st);
        bad_scale += amp_f32_bits(st.scale) != amp_f32_bits(rc->scale_after[step]);
        bad_tracker += st.growth_tracker != rc->growth_tracker[step];
    }
    CHECK_MSG(bad_scale == 0, "%s: %d scales differ from torch", rc->name, bad_scale);
    CHECK_MSG(bad_skip == 0, "%s: %d skip decisions differ from torch", rc->name, bad_skip);
    CHECK_MSG(bad_tracker == 0, "%s: %d growth trackers differ from torch", rc->name, bad_tracker);
    CHECK_MSG(moved_on_skip == 0, "%s: %d skipped steps changed weights or momentum", rc->name,
              moved_on_skip);
    int n_skipped = 0;
    for (int step = 0; step < SCALER_REF_N_STEPS; step++) n_skipped += rc->skipped[step];
    amp_scaler_state st;
    amp_scaler_get(s, &st);
    CHECK(st.total_steps == SCALER_REF_N_STEPS && st.skipped_steps == n_skipped && n_skipped >= 4);
    int64_t worst = 0;
    int exact = 0;
    for (int i = 0; i < SCALER_REF_NUMEL; i++) {
        int64_t dp = test_ulp_diff(params[i], rc->params[i]),
                dm = test_ulp_diff(mom[i], rc->momentum[i]);
        worst = dp > worst ? dp : worst;
        worst = dm > worst ? dm : worst;
        exact += (dp == 0) + (dm == 0);
    }
    printf("torch replay %s: %d skipped of %d, weights and momentum: %d of %d bit-exact, worst "
           "%lld ulp\n", rc->name, n_skipped, SCALER_REF_N_STEPS, exact, 2 * SCALER_REF_NUMEL,
           (long long)worst);
    CHECK_MSG(worst <= 1, "%s: final weights/momentum %lld ulp from torch", rc->name,
              (long long)worst);
    amp_scaler_free(s);
}

/* Feeds found_inf[i] and checks the scale after each step, the skip decision and
 * hysteresis_left. */
static void run_sequence(const char *name, amp_scaler *s, int n, const int *found,
                         const float *want_scale, const int *want_hyst) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bool skip = amp_scaler_update(s, found[i] != 0, false);
        amp_scaler_state st;
        amp_scaler_get(s, &st);
        bool ok = skip == (found[i] != 0) && st.scale == want_scale[i] &&
                  (!want_hyst || st.hysteresis_left == want_hyst[i]);
        if (!ok && bad++ < 5)
            fprintf(stderr, "  %s step %d: skip %d scale %g hysteresis_left %d, want %d %g %d\n",
                    name, i, skip, (double)st.scale, st.hysteresis_left, found[i],
                    (double)want_scale[i], want_hyst ? want_hyst[i] : -1);
    }
    CHECK_MSG(bad == 0, "%s: %d steps wrong", name, bad);
}

/* DeepSpeed's update_scale with delayed_shift = 2 (consecutive_hysteresis off), worked by hand:
 * an overflow with cur_hysteresis > 1 only decrements it; with 1 it backs off and cur_hysteresis
 * stays 1; only a growth refills it (a clean step does not). Growth after 3 clean steps, counted
 * torch's way (DeepSpeed's own counter would grow one step later). */
static void test_hysteresis(void) {
    amp_scaler *s = make((amp_scaler_config){
        .dynamic = true, .scale = 1024.0f, .growth_interval = 3, .hysteresis = 2, .quiet = true});
    if (!s) return;
    const int found[] = {1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 1};
    const float scale[] = {1024, 512, 256, 256, 256, 512, 512, 512, 256, 256, 256, 512, 512, 256};
    const int hyst[] = {1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 2, 1, 1};
    run_sequence("hysteresis 2", s, 14, found, scale, hyst);
    amp_scaler_free(s);

    /* hysteresis 3: two overflows absorbed, the third backs off. */
    s = make((amp_scaler_config){
        .dynamic = true, .scale = 64.0f, .growth_interval = 2, .hysteresis = 3, .quiet = true});
    if (!s) return;
    const int found3[] = {1, 1, 1, 0, 0, 1, 0, 1, 1};
    const float scale3[] = {64, 64, 32, 32, 64, 64, 64, 64, 32};
    const int hyst3[] = {2, 1, 1, 1, 3, 2, 2, 1, 1};
    run_sequence("hysteresis 3", s, 9, found3, scale3, hyst3);
    amp_scaler_free(s);
}

static void test_clamps(void) {
    /* Apex's floor and ceiling. */
    amp_scaler *s = make((amp_scaler_config){.dynamic = true, .scale = 1024.0f, .growth_interval = 1,
                                             .min_scale = 256.0f, .max_scale = 4096.0f, .quiet = true});
    if (!s) return;
    const int found[] = {1, 1, 1, 0, 0, 0, 0, 0};
    const float scale[] = {512, 256, 256, 512, 1024, 2048, 4096, 4096};
    run_sequence("min/max", s, 8, found, scale, NULL);
    amp_scaler_free(s);

    /* A non-power-of-two max is reached exactly. */
    s = make((amp_scaler_config){.dynamic = true, .scale = 1000.0f, .growth_interval = 1,
                                 .max_scale = 3000.0f, .quiet = true});
    if (!s) return;
    const int found2[] = {0, 0, 0};
    const float scale2[] = {2000, 3000, 3000};
    run_sequence("max 3000", s, 3, found2, scale2, NULL);
    amp_scaler_free(s);

    /* Without a ceiling, torch keeps the scale when the product would be inf. */
    s = make((amp_scaler_config){.dynamic = true, .scale = 0x1p126f, .growth_interval = 1,
                                 .max_scale = INFINITY, .quiet = true});
    if (!s) return;
    const int found3[] = {0, 0, 0, 1};
    const float scale3[] = {0x1p127f, 0x1p127f, 0x1p127f, 0x1p126f};
    run_sequence("no ceiling", s, 4, found3, scale3, NULL);
    amp_scaler_free(s);

    /* Without a floor, never below 2^-126: 1/scale stays finite. */
    s = make((amp_scaler_config){.dynamic = true, .scale = 0x1p-124f, .quiet = true});
    if (!s) return;
    const int found4[] = {1, 1, 1, 1};
    const float scale4[] = {0x1p-125f, 0x1p-126f, 0x1p-126f, 0x1p-126f};
    run_sequence("floor 2^-126", s, 4, found4, scale4, NULL);
    CHECK(isfinite(amp_scaler_inv_scale(s)) && amp_scaler_inv_scale(s) == 0x1p126f);
    amp_scaler_free(s);

    /* Apex clamps the initial scale to max (and ours to min). */
    s = make((amp_scaler_config){.dynamic = true, .scale = 1e9f, .quiet = true});
    if (s) CHECK(amp_scaler_scale(s) == 16777216.0f); /* default max 2^24 */
    amp_scaler_free(s);
    s = make((amp_scaler_config){.dynamic = true, .scale = 2.0f, .min_scale = 8.0f, .quiet = true});
    if (s) CHECK(amp_scaler_scale(s) == 8.0f);
    amp_scaler_free(s);
}

static void test_defaults_and_inv_scale(void) {
    amp_scaler *s = make((amp_scaler_config){.dynamic = true, .quiet = true});
    if (!s) return;
    amp_scaler_state st;
    amp_scaler_get(s, &st);
    CHECK(st.scale == 65536.0f && st.growth_tracker == 0 && st.hysteresis_left == 1);
    CHECK(st.dynamic && st.check_overflow && st.skipped_steps == 0 && st.total_steps == 0);
    CHECK(amp_scaler_checks_overflow(s));
    /* torch grows after growth_interval (2000) clean steps, not before. */
    for (int i = 0; i < 1999; i++) amp_scaler_update(s, false, false);
    CHECK(amp_scaler_scale(s) == 65536.0f);
    amp_scaler_update(s, false, false);
    CHECK(amp_scaler_scale(s) == 131072.0f);
    amp_scaler_free(s);

    /* 1/scale in double rounded once: 1/3 is not the f32 division's 1.0f/3.0f in every case, and
     * this is what torch uses. */
    s = make((amp_scaler_config){.dynamic = true, .scale = 3.0f, .quiet = true});
    if (s) CHECK(amp_f32_bits(amp_scaler_inv_scale(s)) == amp_f32_bits((float)(1.0 / 3.0)));
    amp_scaler_free(s);
}

static void test_static(void) {
    /* Apex's static scale: no check, never skips, never moves. */
    amp_scaler *s = make((amp_scaler_config){.scale = 128.0f, .quiet = true});
    if (!s) return;
    CHECK(!amp_scaler_checks_overflow(s));
    bool any_skip = false;
    for (int i = 0; i < 5000; i++) any_skip |= amp_scaler_update(s, i % 3 == 0, false);
    amp_scaler_state st;
    amp_scaler_get(s, &st);
    CHECK(!any_skip && st.scale == 128.0f && st.skipped_steps == 0 && st.total_steps == 5000);
    CHECK(!st.dynamic && !st.check_overflow);
    amp_scaler_free(s);

    /* Static with check_overflow: skips, the scale stays. */
    s = make((amp_scaler_config){.scale = 128.0f, .check_overflow = true, .quiet = true});
    if (!s) return;
    CHECK(amp_scaler_checks_overflow(s));
    CHECK(amp_scaler_update(s, true, false));
    CHECK(!amp_scaler_update(s, false, false));
    for (int i = 0; i < 3000; i++) amp_scaler_update(s, false, false);
    amp_scaler_get(s, &st);
    CHECK(st.scale == 128.0f && st.skipped_steps == 1 && st.total_steps == 3002);
    amp_scaler_free(s);

    /* A static scale of 0 is the default 1.0 (O0/O3). */
    s = make((amp_scaler_config){.quiet = true});
    if (s) CHECK(amp_scaler_scale(s) == 1.0f && amp_scaler_inv_scale(s) == 1.0f);
    amp_scaler_free(s);
}

/* Two losses: a clean loss's scaler still counts the step as skipped when the other overflowed,
 * and grows on its own clean record (Apex: each loss's scaler sees its own overflow). */
static void test_step_skipped_by_other_loss(void) {
    amp_scaler *s = make((amp_scaler_config){.dynamic = true, .scale = 16.0f, .growth_interval = 2,
                                             .quiet = true});
    if (!s) return;
    CHECK(!amp_scaler_update(s, false, true));
    CHECK(!amp_scaler_update(s, false, true));
    amp_scaler_state st;
    amp_scaler_get(s, &st);
    CHECK(st.scale == 32.0f && st.skipped_steps == 2 && st.total_steps == 2);
    amp_scaler_free(s);
}

static void test_state_round_trip(void) {
    amp_scaler_config c = {.dynamic = true, .scale = 4096.0f, .growth_interval = 5,
                           .hysteresis = 3, .min_scale = 1.0f, .quiet = true};
    amp_scaler *a = make(c), *b = make(c);
    if (!a || !b) return;
    const int pattern[] = {0, 0, 1, 0, 0, 0, 1, 1, 0, 0};
    for (int i = 0; i < 10; i++) amp_scaler_update(a, pattern[i], false);
    amp_scaler_state sa, sb;
    amp_scaler_get(a, &sa);
    CHECK(sa.hysteresis_left == 1 && sa.skipped_steps == 3 && sa.total_steps == 10);
    CHECK_OK(amp_scaler_set(b, &sa));
    amp_scaler_get(b, &sb);
    CHECK(memcmp(&sa, &sb, sizeof sa) == 0);
    /* Both continue alike. */
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        bool f = (i * 7) % 11 == 0;
        differ += amp_scaler_update(a, f, false) != amp_scaler_update(b, f, false);
    }
    amp_scaler_get(a, &sa);
    amp_scaler_get(b, &sb);
    CHECK(differ == 0 && memcmp(&sa, &sb, sizeof sa) == 0);

    /* Switching a static scaler to dynamic through the state. */
    amp_scaler *st = make((amp_scaler_config){.scale = 2.0f, .quiet = true});
    if (st) {
        amp_scaler_state d = {.scale = 512.0f, .hysteresis_left = 1, .dynamic = true,
                              .check_overflow = true};
        CHECK_OK(amp_scaler_set(st, &d));
        CHECK(amp_scaler_update(st, true, false) && amp_scaler_scale(st) == 256.0f);
    }
    amp_scaler_free(st);
    amp_scaler_free(a);
    amp_scaler_free(b);
}

static void test_bad_states(void) {
    amp_scaler *s = make((amp_scaler_config){.dynamic = true, .growth_interval = 10,
                                             .hysteresis = 2, .min_scale = 1.0f, .quiet = true});
    if (!s) return;
    amp_scaler_state good, before, after;
    amp_scaler_get(s, &good);
    before = good;
    struct {
        amp_scaler_state st;
        const char *needle;
    } bad[12];
    int n = 0;
    for (int i = 0; i < 12; i++) bad[i].st = good;
    bad[n].st.scale = 0.0f, bad[n++].needle = "scale = 0, want a finite value";
    bad[n].st.scale = -1.0f, bad[n++].needle = "scale = -1";
    bad[n].st.scale = INFINITY, bad[n++].needle = "scale = inf";
    bad[n].st.scale = NAN, bad[n++].needle = "scale = nan";
    bad[n].st.scale = 0.5f, bad[n++].needle = "outside this scaler's [min_scale, max_scale] = [1,";
    bad[n].st.scale = 3e7f, bad[n++].needle = "outside this scaler's";
    bad[n].st.growth_tracker = -1, bad[n++].needle = "growth_tracker = -1";
    bad[n].st.growth_tracker = 10, bad[n++].needle = "growth_tracker = 10, want 0 <= tracker < growth_interval 10";
    bad[n].st.hysteresis_left = 0, bad[n++].needle = "hysteresis_left = 0";
    bad[n].st.hysteresis_left = 3, bad[n++].needle = "hysteresis_left = 3, want 1 <= left <= hysteresis 2";
    bad[n].st.skipped_steps = 5, bad[n].st.total_steps = 4, bad[n++].needle = "skipped_steps = 5, total_steps = 4";
    bad[n].st.check_overflow = false, bad[n++].needle = "dynamic = true with check_overflow = false";
    for (int i = 0; i < n; i++) {
        CHECK_FAILS(amp_scaler_set(s, &bad[i].st), AMP_ERR_INVALID_ARG, bad[i].needle);
        CHECK(strstr(amp_last_error(), "amp_scaler_set_state") != NULL);
    }
    amp_scaler_get(s, &after);
    CHECK(memcmp(&before, &after, sizeof before) == 0); /* untouched by the failures */
    /* A static state may hold a scale outside the dynamic bounds. */
    amp_scaler_state stat = good;
    stat.dynamic = false, stat.check_overflow = false, stat.scale = 0.25f;
    CHECK_OK(amp_scaler_set(s, &stat));
    CHECK_FAILS(amp_scaler_set(s, NULL), AMP_ERR_INVALID_ARG, "'state'");
    amp_scaler_free(s);
}

static void test_bad_configs(void) {
    struct {
        amp_scaler_config c;
        const char *needle;
    } bad[] = {
        {{.dynamic = true, .scale = -2.0f}, "scale = -2, want a finite value >= 2^-126"},
        {{.dynamic = true, .scale = NAN}, "scale = nan"},
        {{.scale = INFINITY}, "scale = inf"},
        {{.scale = 1e-40f}, "want a finite value >= 2^-126"},
        {{.dynamic = true, .growth_factor = 1.0f}, "growth_factor = 1, want a finite value > 1"},
        {{.dynamic = true, .growth_factor = INFINITY}, "growth_factor = inf"},
        {{.dynamic = true, .backoff_factor = 1.0f}, "backoff_factor = 1, want 0 < backoff < 1"},
        {{.dynamic = true, .backoff_factor = -0.5f}, "backoff_factor = -0.5"},
        {{.dynamic = true, .growth_interval = -3}, "growth_interval = -3, want >= 1"},
        {{.dynamic = true, .min_scale = -1.0f}, "min_scale = -1"},
        {{.dynamic = true, .min_scale = NAN}, "min_scale = nan"},
        {{.dynamic = true, .min_scale = 100.0f, .max_scale = 10.0f}, "max_scale = 10, want > 0 and >= min_scale 100"},
        {{.dynamic = true, .max_scale = -1.0f}, "max_scale = -1"},
        {{.dynamic = true, .hysteresis = -1}, "hysteresis = -1, want >= 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        amp_scaler *s = (amp_scaler *)&bad; /* must be reset to NULL on failure */
        CHECK_FAILS(amp_scaler_create(&bad[i].c, &s), AMP_ERR_INVALID_ARG, bad[i].needle);
        CHECK(s == NULL);
    }
    amp_scaler *s;
    CHECK_FAILS(amp_scaler_create(NULL, &s), AMP_ERR_INVALID_ARG, "'c'");
    amp_scaler_free(NULL);
}

/* Runs n overflows on a fresh scaler with stderr sent to a temporary file; returns the file's
 * text (malloc'd). */
static char *capture_overflow_lines(amp_scaler_config c, int n) {
    amp_scaler *s = make(c);
    if (!s) return NULL;
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    for (int i = 0; i < n; i++) {
        amp_scaler_update(s, true, false);
        if (i % 7 == 0) amp_scaler_update(s, false, false);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long size = ftell(tmp);
    char *text = calloc(1, (size_t)size + 1);
    rewind(tmp);
    size_t got = fread(text, 1, (size_t)size, tmp);
    text[got] = '\0';
    fclose(tmp);
    amp_scaler_free(s);
    return text;
}

static int count_lines(const char *text, const char *needle) {
    int k = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++) k++;
    return k;
}

static void test_log(void) {
    amp_scaler_config c = {.dynamic = true, .min_scale = 1.0f, .loss_id = 3};
    char *text = capture_overflow_lines(c, 250);
    if (!text) return;
    /* First 10, then the 100th and the 200th. */
    CHECK_MSG(count_lines(text, "Gradient overflow.  Skipping step") == 12, "log:\n%s", text);
    CHECK(strstr(text, "libamp: Gradient overflow.  Skipping step, loss scaler 3 reducing loss "
                       "scale to 32768.0\n") == text);
    CHECK(strstr(text, "(further overflows: every 100th)") != NULL);
    CHECK(strstr(text, "(overflow 100)") != NULL && strstr(text, "(overflow 200)") != NULL);
    CHECK(strstr(text, "reducing loss scale to 1.0") != NULL); /* at the floor */
    free(text);

    c.quiet = true;
    text = capture_overflow_lines(c, 50);
    if (text) CHECK_MSG(text[0] == '\0', "quiet scaler logged: %s", text);
    free(text);

    c = (amp_scaler_config){.dynamic = true, .scale = 1024.0f, .hysteresis = 2};
    text = capture_overflow_lines(c, 1);
    if (text)
        CHECK_MSG(strstr(text, "loss scaler 0 keeping loss scale at 1024.0 (hysteresis reduced "
                               "to 1)") != NULL, "log: %s", text);
    free(text);

    c = (amp_scaler_config){.scale = 0.375f, .check_overflow = true};
    text = capture_overflow_lines(c, 1);
    if (text) CHECK_MSG(strstr(text, "keeping static loss scale 0.375\n") != NULL, "log: %s", text);
    free(text);
}

/* The lazy read of the sync-free step: one overflow, then enough clean steps to grow the scale
 * again, all on the device struct; the host reads it once afterwards. The line must state what
 * the overflow did, not the state after the growth. Returns the log text (malloc'd). */
static char *capture_lazy_overflow(amp_scaler_config c, int clean_after) {
    amp_scaler *s = make(c);
    if (!s) return NULL;
    amp_scaler_params p = amp_scaler_params_of(s);
    amp_scaler_dev d;
    amp_scaler_to_dev(s, &d);
    amp_scaler_dev_update(&d, &p, 1, 1, 0);
    for (int i = 0; i < clean_after; i++) amp_scaler_dev_update(&d, &p, 0, 1, 0);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    amp_scaler_from_dev(s, &d);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long size = ftell(tmp);
    char *text = calloc(1, (size_t)size + 1);
    rewind(tmp);
    size_t got = fread(text, 1, (size_t)size, tmp);
    text[got] = '\0';
    fclose(tmp);
    CHECK(amp_scaler_scale(s) == d.scale);
    amp_scaler_free(s);
    return text;
}

static void test_log_lazy(void) {
    /* 65536 -> 32768 on the overflow, back to 65536 after 3 clean steps. */
    amp_scaler_config c = {.dynamic = true, .growth_interval = 3};
    char *text = capture_lazy_overflow(c, 3);
    if (text)
        CHECK_MSG(strstr(text, "loss scaler 0 reducing loss scale to 32768.0; the scale has grown "
                               "to 65536.0 since\n") != NULL, "log: %s", text);
    free(text);
    text = capture_lazy_overflow(c, 2); /* read before the growth: the eager words exactly */
    if (text)
        CHECK_MSG(strstr(text, "loss scaler 0 reducing loss scale to 32768.0\n") != NULL,
                  "log: %s", text);
    free(text);
    /* Hysteresis 2: the overflow keeps 1024 (left 1); the growth doubles it and refills. */
    c = (amp_scaler_config){.dynamic = true, .scale = 1024.0f, .hysteresis = 2,
                            .growth_interval = 2};
    text = capture_lazy_overflow(c, 2);
    if (text)
        CHECK_MSG(strstr(text, "keeping loss scale at 1024.0 (hysteresis reduced to 1); the scale "
                               "has grown to 2048.0 since\n") != NULL, "log: %s", text);
    free(text);
}

/* Two clips in one step (torch: the second, under max_norm, multiplies by 1): the f32
 * gradients are scaled in place by each call's own coefficient, so the second must not carry the
 * first one's; the half gradients' factor takes the product. */
static void test_clip_twice(void) {
    amp_scaler_dev d = {.scale = 1024.0f};
    amp_scaler_dev_seed(&d, 0x1p127f);
    float inv = d.inv_used_scale;
    amp_scaler_dev_clip(&d, 4.0f, 0.0f, 1.0f); /* norm 2: coefficient 1 / (2 + 1e-6) */
    float first = d.clip_coef;
    CHECK_MSG(first < 1.0f && first > 0.49f, "first clip coefficient %g", (double)first);
    CHECK(d.half_grad_scale == inv * first);
    amp_scaler_dev_clip(&d, 0.25f, 0.0f, 1.0f); /* norm 0.5 after the first clip: none */
    CHECK_MSG(d.clip_coef == 1.0f, "a clip under max_norm kept coefficient %g",
              (double)d.clip_coef);
    CHECK(d.grad_norm == 0.5f && d.half_grad_scale == inv * first);
}

/* An infinite norm gives coefficient 0 (torch's too; the step is then skipped), which the CPU's
 * unscale_multi must take from the device scalar as it is and apply. */
static void test_clip_inf_norm(void) {
    amp_scaler_dev d = {.scale = 1.0f};
    amp_scaler_dev_seed(&d, 0x1p127f);
    amp_scaler_dev_clip(&d, INFINITY, 0.0f, 1.0f);
    CHECK(isinf(d.grad_norm) && d.clip_coef == 0.0f);
    float g[3] = {1.0f, -2.0f, INFINITY}, flag = 0.0f;
    const void *src[1] = {g};
    float *dst[1] = {g};
    int64_t numel[1] = {2};
    amp_step_scalars sc = {.grad_scale = &d.clip_coef};
    CHECK_OK(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_F32, 1, numel, src, 1.0f, dst, &flag, &sc));
    CHECK(g[0] == 0.0f && g[1] == 0.0f && flag == 0.0f);
    float bad = -1.0f;
    sc.grad_scale = &bad;
    CHECK_FAILS(
            amp_cpu_unscale_multi(amp_cpu_device(), AMP_F32, 1, numel, src, 1.0f, dst, &flag, &sc),
            AMP_ERR_INVALID_ARG, "grad_scale");
}

int main(void) {
    setenv("AMP_LOG_LEVEL", "info", 1); /* read once, at the first log line */
    for (int i = 0; i < SCALER_REF_N_CASES; i++) replay_torch_case(&scaler_ref_cases[i]);
    test_hysteresis();
    test_clamps();
    test_defaults_and_inv_scale();
    test_static();
    test_step_skipped_by_other_loss();
    test_state_round_trip();
    test_bad_states();
    test_bad_configs();
    test_log();
    test_log_lazy();
    test_clip_twice();
    test_clip_inf_norm();
    return test_summary("test_scaler");
}
