/* amp options (the level table, overrides, consistency checks, state errors, bf16 scaling, the
 * options log) and what they do to a step: an overflow step that skips, amp_unscale +
 * amp_clip_grad_norm + amp_step, and several losses with their own scales. (O2's master weights
 * and every tensor's dtype: test_opt_levels.c.)
 *
 * References: Apex apex/amp/frontend.py (the O0..O3 property table, the Properties setter checks,
 * initialize()'s defaults min_loss_scale None, max_loss_scale 2^24, num_losses 1; num_losses
 * with a scaler per loss_id), torch.amp.GradScaler (init 2^16, x2 every 2000 clean steps, x0.5
 * on overflow; unscale_ then clip then step unscales once) and torch.nn.utils.clip_grad_norm_
 * (coef = max_norm / (norm + 1e-6), clamped to 1). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp/amp.h"
#include "core/half.h"
#include "optim/optimizer_internal.h"
#include "amp/state_internal.h"
#include "test_util.h"

#include "amp_rig.h"

/* ---- part 1: options ---- */

/* Apex frontend.py, property for property. */
static void test_level_table(void) {
    static const struct {
        amp_cast_type cast;
        amp_opt_flag autocast, keep_bn, masters;
        float loss_scale;
    } apex[4] = {
        [AMP_O0] = {AMP_CAST_F32, AMP_OPT_FALSE, AMP_OPT_NONE, AMP_OPT_FALSE, 1.0f},
        [AMP_O1] = {AMP_CAST_NONE, AMP_OPT_TRUE, AMP_OPT_NONE, AMP_OPT_NONE, DYN},
        [AMP_O2] = {AMP_CAST_HALF, AMP_OPT_FALSE, AMP_OPT_TRUE, AMP_OPT_TRUE, DYN},
        [AMP_O3] = {AMP_CAST_HALF, AMP_OPT_FALSE, AMP_OPT_FALSE, AMP_OPT_FALSE, 1.0f},
    };
    for (int l = AMP_O0; l <= AMP_O3; l++) {
        amp_options preset = amp_options_for_level((amp_opt_level)l), o;
        /* The half type's defaults are settled when the options are applied, not in the preset. */
        CHECK(preset.half_type == AMP_HALF_DEFAULT && preset.loss_scale == 0.0f);
        CHECK_OK(amp_options_resolve(&preset, &o));
        CHECK_MSG(o.opt_level == (amp_opt_level)l && o.cast_model_type == apex[l].cast &&
                      o.autocast == apex[l].autocast && o.keep_batchnorm_fp32 == apex[l].keep_bn &&
                      o.master_weights == apex[l].masters && o.loss_scale == apex[l].loss_scale,
                  "O%d: cast %d autocast %d keep_bn %d masters %d loss_scale %g", l,
                  (int)o.cast_model_type, (int)o.autocast, (int)o.keep_batchnorm_fp32,
                  (int)o.master_weights, (double)o.loss_scale);
        /* initialize()'s defaults and GradScaler's. */
        CHECK(o.half_type == AMP_HALF_F16 && o.min_loss_scale == 0.0f &&
              o.max_loss_scale == 16777216.0f && o.num_losses == 1 && o.init_scale == 65536.0f &&
              o.growth_factor == 2.0f && o.backoff_factor == 0.5f && o.growth_interval == 2000 &&
              o.hysteresis == 1 && !o.quiet);
        /* Output cast: f32 for a half model (_initialize's output_caster), none for O1. O0's
         * cast_model_type float32 is truthy in Apex, so its output "cast" to f32 is a no-op:
         * either value says the same. */
        if (l == AMP_O1)
            CHECK(o.cast_model_outputs == AMP_CAST_NONE);
        else if (l != AMP_O0)
            CHECK(o.cast_model_outputs == AMP_CAST_F32);
        else
            CHECK(o.cast_model_outputs == AMP_CAST_NONE || o.cast_model_outputs == AMP_CAST_F32);
    }
}

/* The names of the fields where a and b differ, into buf ("" when none). */
static const char *options_diff(const amp_options *a, const amp_options *b, char *buf, size_t n) {
    buf[0] = 0;
#define DIFF(f) if (a->f != b->f) snprintf(buf + strlen(buf), n - strlen(buf), " " #f)
    DIFF(opt_level); DIFF(half_type); DIFF(cast_model_type); DIFF(autocast);
    DIFF(keep_batchnorm_fp32); DIFF(master_weights); DIFF(loss_scale); DIFF(min_loss_scale);
    DIFF(max_loss_scale); DIFF(cast_model_outputs); DIFF(num_losses); DIFF(init_scale);
    DIFF(growth_factor); DIFF(backoff_factor); DIFF(growth_interval); DIFF(hysteresis); DIFF(quiet);
#undef DIFF
    return buf;
}

/* One override per row, at the levels of its mask (bit l for Ol; the others are refused by
 * Apex: tested below). The resolved options must be the level's with the named fields changed
 * and nothing else, save two documented knock-on effects (want_for). */
typedef struct override_row {
    const char *name;
    unsigned levels;
    amp_options o; /* opt_level set per level; zero fields keep the level's (the header) */
} override_row;

#define ALL_LEVELS 0xfu
static const override_row g_overrides[] = {
    {"half_type bf16", ALL_LEVELS, {.half_type = AMP_HALF_BF16}},
    {"loss_scale 128", ALL_LEVELS, {.loss_scale = 128.0f}},
    {"loss_scale dynamic", ALL_LEVELS, {.loss_scale = DYN}},
    {"min_loss_scale 4", ALL_LEVELS, {.min_loss_scale = 4.0f}},
    {"max_loss_scale 2^20", ALL_LEVELS, {.max_loss_scale = 1048576.0f}},
    {"num_losses 3", ALL_LEVELS, {.num_losses = 3}},
    {"init_scale 1024", ALL_LEVELS, {.init_scale = 1024.0f}},
    {"growth_factor 4", ALL_LEVELS, {.growth_factor = 4.0f}},
    {"backoff_factor 0.25", ALL_LEVELS, {.backoff_factor = 0.25f}},
    {"growth_interval 100", ALL_LEVELS, {.growth_interval = 100}},
    {"hysteresis 2", ALL_LEVELS, {.hysteresis = 2}},
    {"cast_model_outputs f32", ALL_LEVELS, {.cast_model_outputs = AMP_CAST_F32}},
    {"keep_batchnorm_fp32 False", 1u << AMP_O0 | 1u << AMP_O2,
     {.keep_batchnorm_fp32 = AMP_OPT_FALSE}},
    {"keep_batchnorm_fp32 True", 1u << AMP_O0 | 1u << AMP_O3,
     {.keep_batchnorm_fp32 = AMP_OPT_TRUE}},
    {"keep_batchnorm_fp32 None", ALL_LEVELS, {.keep_batchnorm_fp32 = AMP_OPT_NONE}},
    {"master_weights False", 1u << AMP_O2 | 1u << AMP_O3, {.master_weights = AMP_OPT_FALSE}},
    {"master_weights True", 1u << AMP_O2 | 1u << AMP_O3, {.master_weights = AMP_OPT_TRUE}},
    {"autocast False", ALL_LEVELS, {.autocast = AMP_OPT_FALSE}}, /* O1 may turn it off */
    /* With O1 Apex refuses only a half cast_model_type. */
    {"cast_model_type f32", 1u << AMP_O0 | 1u << AMP_O1 | 1u << AMP_O3,
     {.cast_model_type = AMP_CAST_F32}},
    {"cast_model_type half", 1u << AMP_O0 | 1u << AMP_O2 | 1u << AMP_O3,
     {.cast_model_type = AMP_CAST_HALF}},
};
#define N_OVERRIDES ((int)(sizeof g_overrides / sizeof g_overrides[0]))

/* The level's options with every non-zero field of o copied in. */
static amp_options want_for(amp_opt_level l, const amp_options *o) {
    amp_options w;
    CHECK_OK(amp_options_resolve(&(amp_options){.opt_level = l}, &w));
#define TAKE(f) if (o->f) w.f = o->f
    TAKE(half_type); TAKE(cast_model_type); TAKE(autocast); TAKE(keep_batchnorm_fp32);
    TAKE(master_weights); TAKE(loss_scale); TAKE(min_loss_scale); TAKE(max_loss_scale);
    TAKE(cast_model_outputs); TAKE(num_losses); TAKE(init_scale); TAKE(growth_factor);
    TAKE(backoff_factor); TAKE(growth_interval); TAKE(hysteresis);
#undef TAKE
    /* bf16's default loss scale is 1 (the header). The output cast follows the model's type
     * unless named: f32 for a half model (Apex's output_caster); for an f32 model Apex "casts"
     * to f32 (float32 is truthy), no cast at all, which libamp resolves as none. */
    if (o->half_type == AMP_HALF_BF16 && o->loss_scale == 0.0f) w.loss_scale = 1.0f;
    if (o->cast_model_type && !o->cast_model_outputs)
        w.cast_model_outputs = o->cast_model_type == AMP_CAST_HALF ? AMP_CAST_F32 : AMP_CAST_NONE;
    return w;
}

static void test_overrides(void) {
    int n_cases = 0;
    for (int l = AMP_O0; l <= AMP_O3; l++)
        for (int k = 0; k < N_OVERRIDES; k++) {
            const override_row *ov = &g_overrides[k];
            if (!(ov->levels >> l & 1u)) continue;
            amp_options user = ov->o, want, got = {0};
            user.opt_level = (amp_opt_level)l;
            want = want_for((amp_opt_level)l, &user);
            want.quiet = true;
            n_cases++;
            rig r;
            if (!rig_make(&r, TINY, false, &user, 11)) {
                CHECK_MSG(false, "O%d %s: %s", l, ov->name, amp_last_error());
                rig_free(&r);
                continue;
            }
            CHECK_OK(amp_get_options(r.opt, &got));
            char diff[256];
            CHECK_MSG(!*options_diff(&got, &want, diff, sizeof diff), "O%d %s: differs in%s", l,
                      ov->name, diff);
            rig_free(&r);
        }
    CHECK(n_cases == 70);
}

/* The two ways of asking for a level in bf16, the preset with half_type changed and a zeroed
 * struct with both set, give the same options (bf16's loss scale of 1, no dynamic scaler) and the
 * same scaler after amp_initialize; likewise for an explicit loss scale, which both keep. */
static void test_half_defaults_either_way(void) {
    for (int l = AMP_O0; l <= AMP_O3; l++)
        for (int with_scale = 0; with_scale < 2; with_scale++) {
            amp_options a = amp_options_for_level((amp_opt_level)l);
            a.half_type = AMP_HALF_BF16;
            amp_options b = {.opt_level = (amp_opt_level)l, .half_type = AMP_HALF_BF16};
            if (with_scale) a.loss_scale = b.loss_scale = DYN;
            amp_options ra, rb;
            CHECK_OK(amp_options_resolve(&a, &ra));
            CHECK_OK(amp_options_resolve(&b, &rb));
            char diff[256];
            CHECK_MSG(!*options_diff(&ra, &rb, diff, sizeof diff), "O%d bf16%s: the preset way "
                      "and the struct way differ in%s", l, with_scale ? " dynamic" : "", diff);
            CHECK_MSG(ra.loss_scale == (with_scale ? DYN : 1.0f), "O%d bf16: loss_scale %g", l,
                      (double)ra.loss_scale);
            rig r1, r2;
            if (rig_make(&r1, TINY, false, &a, 21) && rig_make(&r2, TINY, false, &b, 21)) {
                amp_scaler_state s1, s2;
                CHECK_OK(amp_scaler_get_state(r1.opt, 0, &s1));
                CHECK_OK(amp_scaler_get_state(r2.opt, 0, &s2));
                CHECK_MSG(s1.scale == s2.scale && s1.scale == (with_scale ? 65536.0f : 1.0f),
                          "O%d bf16%s: scale %g the preset way, %g the struct way", l,
                          with_scale ? " dynamic" : "", (double)s1.scale, (double)s2.scale);
            }
            rig_free(&r1);
            rig_free(&r2);
        }
    /* f16 is what an unset half type means, on both ways. */
    amp_options f16;
    CHECK_OK(amp_options_resolve(&(amp_options){.opt_level = AMP_O1}, &f16));
    CHECK(f16.half_type == AMP_HALF_F16 && f16.loss_scale == DYN);
}

/* The options block names the half type only where the level uses one: None at O0. */
static void test_options_block_half(void) {
    const char *want[4] = {"None", "f16", "bf16", "bf16"};
    for (int l = AMP_O0; l <= AMP_O3; l++) {
        amp_options o;
        CHECK_OK(amp_options_resolve(&(amp_options){.opt_level = (amp_opt_level)l,
                                                     .half_type = l >= AMP_O2 ? AMP_HALF_BF16
                                                                              : AMP_HALF_DEFAULT},
                                     &o));
        char text[1024], line[64];
        amp_options_describe(&o, text, sizeof text);
        snprintf(line, sizeof line, "half_type            : %s\n", want[l]);
        CHECK_MSG(strstr(text, line) != NULL, "O%d: the options block lacks '%s':\n%s", l, want[l],
                  text);
    }
}

typedef struct bad_case {
    amp_options o;
    const char *needle;
} bad_case;

/* Each refused with AMP_ERR_INVALID_ARG and a message saying why; the model and optimizer are
 * left as they were, so that a correct amp_initialize then works. */
static void test_inconsistent(void) {
    static const bad_case cases[] = {
        {{.opt_level = AMP_O1, .cast_model_type = AMP_CAST_HALF}, "cast_model_type was half"},
        {{.opt_level = AMP_O2, .autocast = AMP_OPT_TRUE}, "only be set by selecting O1"},
        {{.opt_level = AMP_O3, .autocast = AMP_OPT_TRUE}, "only be set by selecting O1"},
        {{.opt_level = AMP_O1, .keep_batchnorm_fp32 = AMP_OPT_TRUE},
         "keep_batchnorm_fp32 should be left unset"},
        {{.opt_level = AMP_O1, .keep_batchnorm_fp32 = AMP_OPT_FALSE},
         "keep_batchnorm_fp32 should be left unset"},
        {{.opt_level = AMP_O1, .master_weights = AMP_OPT_TRUE},
         "master_weights make no sense with O1"},
        {{.opt_level = AMP_O1, .master_weights = AMP_OPT_FALSE},
         "master_weights make no sense with O1"},
        {{.opt_level = AMP_O0, .master_weights = AMP_OPT_TRUE}, "master_weights need a half model"},
        {{.opt_level = AMP_O2, .cast_model_type = AMP_CAST_F32},
         "master_weights need a half model"},
        {{.opt_level = AMP_O2, .loss_scale = -3.0f}, "loss_scale -3"},
        {{.opt_level = AMP_O1, .loss_scale = INFINITY}, "loss_scale inf"},
        {{.opt_level = AMP_O1, .min_loss_scale = 1024.0f, .max_loss_scale = 512.0f},
         "min_loss_scale 1024 and max_loss_scale 512"},
        {{.opt_level = AMP_O1, .max_loss_scale = -1.0f}, "max_loss_scale -1"},
        {{.opt_level = AMP_O1, .num_losses = -1}, "num_losses -1"},
        {{.opt_level = AMP_O1, .num_losses = 17}, "num_losses 17"},
        {{.opt_level = (amp_opt_level)7}, "unexpected optimization level 7"},
        {{.opt_level = (amp_opt_level)-1}, "unexpected optimization level -1"},
        {{.opt_level = AMP_O1, .half_type = (amp_half_type)5}, "half_type"},
        {{.opt_level = AMP_O1, .cast_model_type = (amp_cast_type)9}, "cast_model_type"},
        {{.opt_level = AMP_O1, .cast_model_outputs = (amp_cast_type)9}, "cast_model_outputs"},
        {{.opt_level = AMP_O1, .autocast = (amp_opt_flag)9}, "autocast"},
        {{.opt_level = AMP_O2, .keep_batchnorm_fp32 = (amp_opt_flag)-2}, "keep_batchnorm_fp32"},
        {{.opt_level = AMP_O2, .master_weights = (amp_opt_flag)4}, "master_weights"},
        {{.opt_level = AMP_O1, .init_scale = -1.0f}, "init_scale -1"},
        {{.opt_level = AMP_O1, .growth_factor = 1.0f}, "growth_factor 1"},
        {{.opt_level = AMP_O1, .backoff_factor = 1.5f}, "backoff_factor 1.5"},
        {{.opt_level = AMP_O1, .growth_interval = -5}, "growth_interval -5"},
        {{.opt_level = AMP_O1, .hysteresis = -1}, "hysteresis -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rig r;
        if (!rig_make(&r, CONVNET, false, NULL, 12)) {
            rig_free(&r);
            continue;
        }
        CHECK_FAILS(amp_initialize_ex(r.m, r.opt, &cases[i].o), AMP_ERR_INVALID_ARG,
                    cases[i].needle);
        for (int p = 0; p < n_params(&r); p++)
            CHECK(param(&r, p)->dtype == AMP_F32);
        CHECK(!amp_optimizer_has_masters(r.opt));
        CHECK_OK(amp_initialize_ex(r.m, r.opt, &(amp_options){.opt_level = AMP_O2, .quiet = true}));
        CHECK(param(&r, 0)->dtype == AMP_F16 && amp_optimizer_has_masters(r.opt));
        rig_free(&r);
    }
    /* Zero fields keep the defaults (the header's convention): num_losses 0 is 1. */
    rig r;
    if (rig_make(&r, TINY, false, &(amp_options){.opt_level = AMP_O1, .num_losses = 0}, 12)) {
        amp_options got;
        CHECK_OK(amp_get_options(r.opt, &got));
        CHECK(got.num_losses == 1);
    }
    rig_free(&r);
    if (rig_make(&r, TINY, false, NULL, 12)) {
        CHECK_FAILS(amp_initialize_ex(r.m, r.opt, NULL), AMP_ERR_INVALID_ARG, "opts");
        rig other;
        if (rig_make(&other, TINY, false, NULL, 13))
            CHECK_FAILS(amp_initialize(r.m, other.opt, AMP_O1), AMP_ERR_INVALID_ARG,
                        "not created for this model");
        rig_free(&other);
    }
    rig_free(&r);
}

static void test_state_errors(void) {
    rig r;
    if (rig_make(&r, TINY, false, NULL, 14)) {
        amp_scaler_state st = {0};
        amp_options o;
        bool stepped = true;
        float norm;
        CHECK_FAILS(amp_step(r.opt, &stepped), AMP_ERR_STATE, "amp_initialize was not called");
        CHECK_FAILS(amp_unscale(r.opt), AMP_ERR_STATE, "amp_initialize was not called");
        CHECK_FAILS(amp_clip_grad_norm(r.opt, 1.0f, &norm), AMP_ERR_STATE,
                    "amp_initialize was not called");
        CHECK_FAILS(amp_scaler_get_state(r.opt, 0, &st), AMP_ERR_STATE,
                    "amp_initialize was not called");
        CHECK_FAILS(amp_scaler_set_state(r.opt, 0, &st), AMP_ERR_STATE,
                    "amp_initialize was not called");
        CHECK_FAILS(amp_get_options(r.opt, &o), AMP_ERR_STATE, "amp_initialize was not called");
        amp_tensor *loss = NULL;
        CHECK_OK(forward_loss(&r, r.x, &loss));
        if (loss) CHECK_FAILS(amp_backward_ex(loss, 1), AMP_ERR_STATE, "without amp_initialize");
        if (loss) CHECK_OK(amp_backward(loss)); /* plain backward (documented) */
        CHECK_OK(amp_zero_grad(r.opt));
        CHECK_OK(amp_initialize_ex(r.m, r.opt, &(amp_options){.opt_level = AMP_O1, .quiet = true}));
        CHECK_FAILS(amp_initialize(r.m, r.opt, AMP_O1), AMP_ERR_STATE, "called a second time");
        CHECK_FAILS(amp_initialize(r.m, r.opt, AMP_O2), AMP_ERR_STATE, "called a second time");
        CHECK_FAILS(amp_scaler_get_state(r.opt, 1, &st), AMP_ERR_INVALID_ARG, "loss_id 1");
        loss = NULL;
        CHECK_OK(forward_loss(&r, r.x, &loss));
        if (loss) CHECK_FAILS(amp_backward_ex(loss, 1), AMP_ERR_INVALID_ARG, "loss_id 1");
        if (loss) CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_unscale(r.opt));
        loss = NULL;
        CHECK_OK(forward_loss(&r, r.x, &loss));
        if (loss) CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "unscaled already");
        CHECK_FAILS(amp_clip_grad_norm(r.opt, 0.0f, &norm), AMP_ERR_INVALID_ARG, "max_norm");
        CHECK_OK(amp_step(r.opt, &stepped));
    }
    rig_free(&r);
}

/* bf16 needs no scaling: scale 1, static, no overflow check; an explicit dynamic scale turns
 * dynamic scaling and its checks on. f16 keeps the level's dynamic scale. */
static void test_bf16_scaling(void) {
    static const struct {
        amp_options o;
        bool dynamic, check;
        float scale;
    } cases[] = {
        {{.opt_level = AMP_O1, .half_type = AMP_HALF_BF16}, false, false, 1.0f},
        {{.opt_level = AMP_O2, .half_type = AMP_HALF_BF16}, false, false, 1.0f},
        {{.opt_level = AMP_O1, .half_type = AMP_HALF_BF16, .loss_scale = DYN},
         true, true, 65536.0f},
        {{.opt_level = AMP_O2, .half_type = AMP_HALF_BF16, .loss_scale = DYN, .init_scale = 256.0f},
         true, true, 256.0f},
        {{.opt_level = AMP_O2, .half_type = AMP_HALF_F16}, true, true, 65536.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rig r;
        if (rig_make(&r, TINY, false, &cases[i].o, 15)) {
            amp_scaler_state st;
            CHECK_OK(amp_scaler_get_state(r.opt, 0, &st));
            CHECK_MSG(st.dynamic == cases[i].dynamic && st.check_overflow == cases[i].check &&
                          st.scale == cases[i].scale,
                      "case %zu: dynamic %d check %d scale %g", i, (int)st.dynamic,
                      (int)st.check_overflow, (double)st.scale);
        }
        rig_free(&r);
    }
}

/* Reads what the test wrote to stderr (fd 2) between begin and end. */
static int g_saved_fd = -1;
static FILE *g_capture;
static void capture_begin(void) {
    fflush(stderr);
    g_capture = tmpfile();
    g_saved_fd = dup(2);
    if (g_capture) dup2(fileno(g_capture), 2);
}
static int capture_end_count(const char *needle) {
    fflush(stderr);
    if (g_saved_fd >= 0) {
        dup2(g_saved_fd, 2);
        close(g_saved_fd);
    }
    int n = 0;
    if (!g_capture) return -1;
    char line[512];
    rewind(g_capture);
    while (fgets(line, sizeof line, g_capture))
        n += strstr(line, needle) != NULL;
    fclose(g_capture);
    return n;
}

/* Apex prints its options once, at initialize; quiet (verbosity 0) prints nothing. */
static void test_options_logged_once(void) {
    const char *lvl = getenv("AMP_LOG_LEVEL");
    if (lvl && strcmp(lvl, "info") && strcmp(lvl, "debug")) return; /* info lines filtered */
    for (int quiet = 0; quiet < 2; quiet++) {
        rig r;
        if (!rig_make(&r, TINY, false, NULL, 16)) {
            rig_free(&r);
            continue;
        }
        capture_begin();
        amp_status s =
            amp_initialize_ex(r.m, r.opt, &(amp_options){.opt_level = AMP_O2, .quiet = quiet});
        bool ok = s == AMP_OK && forward_backward(&r) && amp_step(r.opt, NULL) == AMP_OK &&
                  amp_zero_grad(r.opt) == AMP_OK && forward_backward(&r) &&
                  amp_step(r.opt, NULL) == AMP_OK;
        int n_blocks = capture_end_count("Selected optimization level O2");
        CHECK(ok);
        CHECK_MSG(n_blocks == (quiet ? 0 : 1), "quiet %d: options block printed %d times", quiet,
                  n_blocks);
        rig_free(&r);
    }
}

/* ---- part 2: what the options do to a step ---- */

static int64_t count_nonfinite_grads(const rig *r) {
    int64_t n = 0;
    for (int i = 0; i < n_params(r); i++) {
        const amp_tensor *g = param(r, i)->grad;
        for (int64_t k = 0; g && k < g->numel; k++)
            n += !isfinite(elem_f32(g, k));
    }
    return n;
}

/* A loss scale of 2^24 (the default ceiling) makes the scaled gradients overflow f16: the
 * logits' gradient is scale * (softmax - onehot) / batch, near 2^24 / 4 > 65504 at the label.
 * The step is skipped with every parameter, master and optimizer state bit for bit as it was,
 * the step count not advanced, the scale halved and the skip counted (torch.amp.GradScaler,
 * Apex's "Gradient overflow. Skipping step"); clip_first clips before the step, as torch's
 * recipe does, which reports a non-finite norm and changes nothing either. */
static void test_overflow_skip(amp_opt_level level, bool clip_first) {
    rig r;
    /* O3 asks for a dynamic scale (its default is a static 1). */
    amp_options o = {.opt_level = level, .init_scale = 1024.0f, .loss_scale = DYN};
    if (!rig_make(&r, CONVNET, true, &o, 22)) {
        rig_free(&r);
        return;
    }
    bool stepped = false;
    if (forward_backward(&r)) CHECK_OK(amp_step(r.opt, &stepped));
    CHECK_MSG(stepped, "O%d: the first step did not step", (int)level);
    CHECK_OK(amp_zero_grad(r.opt));
    amp_scaler_state st, before, after;
    CHECK_OK(amp_scaler_get_state(r.opt, 0, &st));
    st.scale = 16777216.0f;
    CHECK_OK(amp_scaler_set_state(r.opt, 0, &st));
    CHECK_OK(amp_scaler_get_state(r.opt, 0, &before));
    if (!forward_backward(&r)) {
        rig_free(&r);
        return;
    }
    CHECK_MSG(count_nonfinite_grads(&r) > 0, "O%d: no gradient overflowed at scale 2^24",
              (int)level);
    size_t n0 = 0, n1 = 0;
    uint8_t *s0 = snapshot(&r, &n0);
    int64_t steps0 = amp_optimizer_step_count(r.opt);
    if (clip_first) { /* torch: the norm is inf/NaN, the gradients are left, the step skipped */
        float norm = 0;
        CHECK_OK(amp_clip_grad_norm(r.opt, 1.0f, &norm));
        CHECK_MSG(!isfinite(norm), "O%d: norm %g of overflowed gradients", (int)level,
                  (double)norm);
    }
    stepped = true;
    CHECK_OK(amp_step(r.opt, &stepped));
    uint8_t *s1 = snapshot(&r, &n1);
    CHECK_MSG(!stepped, "O%d: an overflow step stepped", (int)level);
    CHECK_MSG(s0 && s1 && n0 == n1 && memcmp(s0, s1, n0) == 0,
              "O%d: parameters, masters or optimizer state changed on a skipped step", (int)level);
    CHECK(amp_optimizer_step_count(r.opt) == steps0 && steps0 == 1);
    CHECK_OK(amp_scaler_get_state(r.opt, 0, &after));
    CHECK_MSG(after.scale == 8388608.0f && after.skipped_steps == before.skipped_steps + 1 &&
                  after.total_steps == before.total_steps + 1 && after.growth_tracker == 0,
              "O%d: scale %g skipped %lld total %lld", (int)level, (double)after.scale,
              (long long)after.skipped_steps, (long long)after.total_steps);
    free(s0);
    free(s1);
    /* The next clean step goes through. */
    CHECK_OK(amp_zero_grad(r.opt));
    after.scale = 1024.0f;
    CHECK_OK(amp_scaler_set_state(r.opt, 0, &after));
    stepped = false;
    if (forward_backward(&r)) CHECK_OK(amp_step(r.opt, &stepped));
    CHECK(stepped && amp_optimizer_step_count(r.opt) == 2);
    rig_free(&r);
}

/* Where parameter i's unscaled f32 gradient is: its master gradient, or its own (f32) .grad. */
static float *unscaled_grad(rig *r, int i) {
    float *g = amp_optimizer_master_grad(r->opt, i);
    return g ? g : (float *)param(r, i)->grad->data;
}

/* torch's order: scaler.unscale_(opt); clip_grad_norm_; scaler.step(opt) unscales once. Run A
 * unscales (twice: the second is a no-op), clips with a bound it does not reach and steps; run
 * B steps directly: same bits. The unscaled gradients are the scaled ones times 1/scale. */
static void test_unscale_clip_step(amp_opt_level level) {
    amp_options o = {.opt_level = level, .init_scale = 1024.0f};
    rig a, b;
    bool ok = rig_make(&a, CONVNET, false, &o, 23);
    ok = rig_make(&b, CONVNET, false, &o, 23) && ok;
    if (ok && forward_backward(&a) && forward_backward(&b)) {
        int n = n_params(&a);
        int64_t bad = 0;
        float **scaled = calloc((size_t)n, sizeof *scaled);
        for (int i = 0; scaled && i < n; i++) {
            const amp_tensor *g = param(&a, i)->grad;
            scaled[i] = malloc((size_t)g->numel * sizeof(float));
            for (int64_t k = 0; scaled[i] && k < g->numel; k++)
                scaled[i][k] = elem_f32(g, k);
        }
        CHECK_OK(amp_unscale(a.opt));
        CHECK_OK(amp_unscale(a.opt));
        const float inv = 1.0f / 1024.0f;
        for (int i = 0; scaled && i < n; i++)
            for (int64_t k = 0; scaled[i] && k < param(&a, i)->numel; k++)
                bad += unscaled_grad(&a, i)[k] != scaled[i][k] * inv;
        CHECK_MSG(bad == 0, "O%d: %lld gradients are not scaled * 1/scale after amp_unscale x2",
                  (int)level, (long long)bad);
        float norm = 0;
        CHECK_OK(amp_clip_grad_norm(a.opt, 1e30f, &norm));
        CHECK(isfinite(norm) && norm > 0);
        bool sa = false, sb = false;
        CHECK_OK(amp_step(a.opt, &sa));
        CHECK_OK(amp_step(b.opt, &sb));
        CHECK(sa && sb);
        size_t na = 0, nb = 0;
        uint8_t *pa = snapshot(&a, &na), *pb = snapshot(&b, &nb);
        CHECK_MSG(pa && pb && na == nb && memcmp(pa, pb, na) == 0,
                  "O%d: unscale + clip + step differs from step", (int)level);
        free(pa);
        free(pb);
        for (int i = 0; scaled && i < n; i++)
            free(scaled[i]);
        free(scaled);
    }
    rig_free(&a);
    rig_free(&b);
}

/* torch.nn.utils.clip_grad_norm_ by hand: gradients {3, 0, 0, 4} have norm 5; max_norm 1 scales
 * them by 1 / (5 + 1e-6) (f32 arithmetic, as torch's f32 tensors), max_norm 10 leaves them; the
 * step (SGD lr 1) then uses the clipped gradients: w - g, not unscaled again. */
static void test_clip_by_hand(void) {
    rig r = {0};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 24}, &r.ctx));
    if (r.ctx) CHECK_OK(amp_seq_create(r.ctx, &r.m));
    if (r.m) CHECK_OK(amp_seq_add_linear(r.m, "fc", 2, 2, false));
    if (r.m) CHECK_OK(amp_sgd_create(r.m, &(amp_sgd_opts){.lr = 1.0f}, &r.opt));
    if (r.opt)
        CHECK_OK(amp_initialize_ex(r.m, r.opt, &(amp_options){.opt_level = AMP_O1, .quiet = true}));
    const float xs[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    const int32_t ys[2] = {1, 0};
    if (r.ctx) CHECK_OK(amp_tensor_from_host(r.ctx, AMP_F32, 2, (int64_t[]){2, 2}, xs, &r.x));
    if (r.ctx) CHECK_OK(amp_tensor_from_host(r.ctx, AMP_I32, 1, (int64_t[]){2}, ys, &r.y));
    for (int pass = 0; pass < 2 && r.x && r.y; pass++) {
        float max_norm = pass == 0 ? 1.0f : 10.0f, w0[4], w1[4], g[4], norm = 0;
        amp_tensor *w = param(&r, 0);
        CHECK_OK(amp_tensor_to_host(w, w0, sizeof w0));
        if (!forward_backward(&r)) break;
        CHECK_OK(amp_unscale(r.opt));
        CHECK_OK(amp_tensor_copy_from_host(w->grad, (float[]){3, 0, 0, 4}, 4 * sizeof(float)));
        CHECK_OK(amp_clip_grad_norm(r.opt, max_norm, &norm));
        CHECK_MSG(norm == 5.0f, "norm %.9g, want 5", (double)norm);
        CHECK_OK(amp_tensor_to_host(w->grad, g, sizeof g));
        float coef = pass == 0 ? max_norm / (5.0f + 1e-6f) : 1.0f;
        CHECK_MSG(g[0] == 3.0f * coef && g[1] == 0.0f && g[2] == 0.0f && g[3] == 4.0f * coef,
                  "max_norm %g: clipped to %.9g %.9g %.9g %.9g", (double)max_norm, (double)g[0],
                  (double)g[1], (double)g[2], (double)g[3]);
        bool stepped = false;
        CHECK_OK(amp_step(r.opt, &stepped));
        CHECK(stepped);
        CHECK_OK(amp_tensor_to_host(w, w1, sizeof w1));
        for (int k = 0; k < 4; k++)
            CHECK_MSG(w1[k] == w0[k] - g[k], "max_norm %g: w[%d] %.9g, want %.9g", (double)max_norm,
                      k, (double)w1[k], (double)(w0[k] - g[k]));
        CHECK_OK(amp_zero_grad(r.opt));
    }
    rig_free(&r);
}

/* On the ConvNet: the norm of the unscaled gradients (f32 master gradients in O2, the f32 .grad
 * in O1) computed here in double, and the clipped gradients g * max_norm / (norm + 1e-6). */
static void test_clip_convnet(amp_opt_level level) {
    rig r;
    amp_options o = {.opt_level = level, .init_scale = 1024.0f};
    if (rig_make(&r, CONVNET, false, &o, 25) && forward_backward(&r)) {
        CHECK_OK(amp_unscale(r.opt));
        int n = n_params(&r);
        double sq = 0;
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < param(&r, i)->numel; k++)
                sq += (double)unscaled_grad(&r, i)[k] * unscaled_grad(&r, i)[k];
        double ref = sqrt(sq);
        float **g0 = n > 0 ? calloc((size_t)n, sizeof *g0) : NULL;
        for (int i = 0; g0 && i < n; i++) {
            g0[i] = malloc((size_t)param(&r, i)->numel * sizeof(float));
            if (g0[i])
                memcpy(g0[i], unscaled_grad(&r, i), (size_t)param(&r, i)->numel * sizeof(float));
        }
        float max_norm = (float)(ref / 2), norm = 0;
        CHECK_OK(amp_clip_grad_norm(r.opt, max_norm, &norm));
        CHECK_MSG(fabs(norm - ref) <= 1e-5 * ref, "O%d: norm %.9g, reference %.9g", (int)level,
                  (double)norm, ref);
        double coef = max_norm / (ref + 1e-6), worst = 0;
        for (int i = 0; g0 && i < n; i++)
            for (int64_t k = 0; g0[i] && k < param(&r, i)->numel; k++) {
                double want = g0[i][k] * coef, got = unscaled_grad(&r, i)[k];
                double err = fabs(got - want) / (fabs(want) + 1e-30);
                if (want != 0 && err > worst) worst = err;
                if (want == 0 && got != 0) worst = 1;
            }
        CHECK_MSG(worst <= 1e-5, "O%d: clipped gradients off by %.3g relative", (int)level, worst);
        bool stepped = false;
        CHECK_OK(amp_step(r.opt, &stepped));
        CHECK(stepped);
        for (int i = 0; g0 && i < n; i++)
            free(g0[i]);
        free(g0);
    }
    rig_free(&r);
}

/* Apex's num_losses: loss 0 at scale 4096 and loss 1 at scale 16, each backward unscaled with
 * its own scale, give the update of one backward of loss0 + loss1 at scale 1, within what f16
 * gradients allow (their rounding differs with the scale). */
static void test_two_losses(amp_opt_level level) {
    rig a, b;
    amp_options oa = {.opt_level = level, .num_losses = 2};
    amp_options ob = {.opt_level = level, .loss_scale = 1.0f};
    bool ok = rig_make(&a, TINY, false, &oa, 26);
    ok = rig_make(&b, TINY, false, &ob, 26) && ok;
    float xs[BATCH * 16];
    for (int i = 0; i < BATCH * 16; i++)
        xs[i] = 2 * rand_unit() - 1;
    amp_tensor *xa = NULL, *xb = NULL;
    if (ok) CHECK_OK(amp_tensor_from_host(a.ctx, AMP_F32, 2, (int64_t[]){BATCH, 16}, xs, &xa));
    if (ok) CHECK_OK(amp_tensor_from_host(b.ctx, AMP_F32, 2, (int64_t[]){BATCH, 16}, xs, &xb));
    if (ok && xa && xb) {
        const float scales[2] = {4096.0f, 16.0f};
        for (int id = 0; id < 2; id++) {
            amp_scaler_state st;
            CHECK_OK(amp_scaler_get_state(a.opt, id, &st));
            st.scale = scales[id];
            CHECK_OK(amp_scaler_set_state(a.opt, id, &st));
        }
        int n = n_params(&a);
        float *w0[4] = {0}; /* the f32 weights: masters in O2, the weights in O1 */
        for (int i = 0; i < n && i < 4; i++) {
            const amp_tensor *p = amp_optimizer_master(a.opt, i);
            if (!p) p = param(&a, i);
            CHECK(p->dtype == AMP_F32);
            w0[i] = malloc(amp_tensor_nbytes(p));
            if (w0[i]) CHECK_OK(amp_tensor_to_host(p, w0[i], amp_tensor_nbytes(p)));
        }
        amp_tensor *l0 = NULL, *l1 = NULL, *m0 = NULL, *m1 = NULL, *sum = NULL;
        CHECK_OK(forward_loss(&a, a.x, &l0));
        if (l0) CHECK_OK(amp_backward_ex(l0, 0));
        CHECK_OK(forward_loss(&a, xa, &l1));
        if (l1) CHECK_OK(amp_backward_ex(l1, 1));
        CHECK_OK(forward_loss(&b, b.x, &m0));
        CHECK_OK(forward_loss(&b, xb, &m1));
        if (m0 && m1) CHECK_OK(amp_add(m0, m1, &sum));
        if (sum) CHECK_OK(amp_backward(sum));
        bool sa = false, sb = false;
        CHECK_OK(amp_step(a.opt, &sa));
        CHECK_OK(amp_step(b.opt, &sb));
        CHECK(sa && sb);
        double worst = 0;
        for (int i = 0; i < n && i < 4 && w0[i]; i++) {
            const amp_tensor *pa = amp_optimizer_master(a.opt, i),
                             *pb = amp_optimizer_master(b.opt, i);
            if (!pa) pa = param(&a, i);
            if (!pb) pb = param(&b, i);
            double dmax = 0;
            for (int64_t k = 0; k < pa->numel; k++)
                dmax = fmax(dmax, fabs((double)((const float *)pb->data)[k] - w0[i][k]));
            for (int64_t k = 0; k < pa->numel; k++) {
                double da = (double)((const float *)pa->data)[k] - w0[i][k];
                double db = (double)((const float *)pb->data)[k] - w0[i][k];
                worst = fmax(worst, fabs(da - db) / (dmax + 1e-30));
            }
            CHECK(dmax > 0);
        }
        CHECK_MSG(worst <= 2e-3, "O%d: two scaled losses vs their sum: updates differ by %.3g of "
                  "the largest", (int)level, worst);
        for (int id = 0; id < 2; id++) {
            amp_scaler_state st;
            CHECK_OK(amp_scaler_get_state(a.opt, id, &st));
            CHECK(st.scale == scales[id] && st.total_steps == 1 && st.skipped_steps == 0);
        }
        for (int i = 0; i < 4; i++)
            free(w0[i]);
    }
    amp_tensor_free(xa);
    amp_tensor_free(xb);
    rig_free(&a);
    rig_free(&b);
}

int main(void) {
    test_level_table();
    test_overrides();
    test_half_defaults_either_way();
    test_options_block_half();
    test_inconsistent();
    test_state_errors();
    test_bf16_scaling();
    test_options_logged_once();
    for (int clip = 0; clip < 2; clip++)
        for (int l = AMP_O1; l <= AMP_O3; l++) test_overflow_skip((amp_opt_level)l, clip);
    test_unscale_clip_step(AMP_O1);
    test_unscale_clip_step(AMP_O2);
    test_clip_by_hand();
    test_clip_convnet(AMP_O1);
    test_clip_convnet(AMP_O2);
    test_two_losses(AMP_O1);
    test_two_losses(AMP_O2);
    return test_summary("test_amp_options");
}
