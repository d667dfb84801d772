/* Checkpoints (include/amp/checkpoint.h) in one process: resume equals an uninterrupted run bit for
 * bit at each opt level (the ConvNet, whose batch norms carry num_batches_tracked); the master
 * weight rules (O2 -> O2 exact, O0 -> O2 masters from the weights, O2 -> O0 weights from the
 * masters); loads that do not fit (another model, optimizer kind, number of losses, loader) fail
 * naming the culprits and change nothing; corrupt files and pointers are refused; keep, latest,
 * a second save of one step, user metadata; weights-only files; a load between a backward and its
 * step is refused with nothing changed, the step then the same as a twin's that never tried it.
 * (Across processes and under SIGKILL: tests/e2e.) */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp_rig.h"
#include "nn/model_internal.h"

static char g_dir[1024];

/* A fresh directory under $AMP_TEST_TMP. */
static const char *fresh_dir(const char *name) {
    const char *tmp = getenv("AMP_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/ckpt-%s", tmp ? tmp : "/tmp", name);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not clear %s\n", g_dir);
    return g_dir;
}

static bool file_exists(const char *dir, const char *leaf) {
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, leaf);
    return stat(p, &st) == 0;
}

static bool train_steps(rig *r, int n) {
    for (int i = 0; i < n; i++) {
        if (!forward_backward(r)) return false;
        CHECK_OK(amp_step(r->opt, NULL));
        CHECK_OK(amp_zero_grad(r->opt));
    }
    return true;
}

/* Model, masters, optimizer state and scaler of two rigs equal bit for bit. */
static bool same_state(rig *a, rig *b) {
    size_t na, nb;
    uint8_t *sa = snapshot(a, &na), *sb = snapshot(b, &nb);
    bool same = sa && sb && na == nb && !memcmp(sa, sb, na);
    free(sa);
    free(sb);
    amp_scaler_state x, y;
    if (amp_scaler_get_state(a->opt, 0, &x) == AMP_OK && amp_scaler_get_state(b->opt, 0, &y) == AMP_OK)
        same &= x.scale == y.scale && x.growth_tracker == y.growth_tracker &&
                x.total_steps == y.total_steps && x.skipped_steps == y.skipped_steps;
    for (int c = 0; c < a->m->n_counters; c++)
        same &= *a->m->counters[c].value == *b->m->counters[c].value;
    amp_rng_state ra, rb;
    amp_rng_get_state(a->ctx, &ra);
    amp_rng_get_state(b->ctx, &rb);
    return same && ra.seed == rb.seed && ra.counter == rb.counter;
}

/* 6 steps straight == 3 steps, save, a new model/optimizer/context loads, 3 more. */
static void test_resume_exact(amp_opt_level level, amp_half_type half, bool adam) {
    amp_options o = {.opt_level = level, .half_type = half};
    rig a, b, c;
    const char *dir = fresh_dir("resume");
    if (rig_make(&a, CONVNET, adam, &o, 31) && rig_make(&b, CONVNET, adam, &o, 31) &&
        rig_make(&c, CONVNET, adam, &o, 77)) { /* c: other initial weights, then loaded */
        CHECK(train_steps(&a, 6));
        CHECK(train_steps(&b, 3));
        CHECK_OK(amp_checkpoint_save(dir, 3, b.m, b.opt, NULL, NULL, 0));
        int64_t step = -1;
        CHECK_OK(amp_checkpoint_load(dir, c.m, c.opt, NULL, &step));
        CHECK(step == 3);
        CHECK_OK(amp_rng_set_state(c.ctx, &(amp_rng_state){.seed = 99, .counter = 5}));
        CHECK_OK(amp_checkpoint_load(dir, c.m, c.opt, NULL, NULL)); /* twice: the same state */
        CHECK_MSG(same_state(&b, &c), "O%d: the loaded state differs from the saved one", (int)level);
        /* c's own batch came from its seed: give it the batch the others train on */
        CHECK_OK(amp_tensor_copy_from_host(c.x, a.x->data, amp_tensor_nbytes(a.x)));
        CHECK_OK(amp_tensor_copy_from_host(c.y, a.y->data, amp_tensor_nbytes(a.y)));
        CHECK(train_steps(&c, 3));
        CHECK_MSG(same_state(&a, &c), "O%d %s%s: resumed run differs from the straight one",
                  (int)level, half == AMP_HALF_BF16 ? "bf16" : "f16", adam ? " adam" : "");
    }
    rig_free(&a);
    rig_free(&b);
    rig_free(&c);
}

static bool params_equal_f32(rig *r, const float *const *want) {
    for (int i = 0; i < n_params(r); i++)
        for (int64_t k = 0; k < param(r, i)->numel; k++)
            if (elem_f32(param(r, i), k) != want[i][k]) return false;
    return true;
}

/* O2 -> O2: masters exact. O0 -> O2: masters are the file's f32 weights. O2 -> O0: the weights
 * are the masters (full precision), not the rounded half model. */
static void test_master_rules(void) {
    amp_options o2 = {.opt_level = AMP_O2}, o0 = {.opt_level = AMP_O0};
    rig src2, src0, dst2, dst0, dst2b;
    const char *dir2 = "", *dir0 = "";
    char d2[1100], d0[1100];
    if (!rig_make(&src2, TINY, false, &o2, 41) || !rig_make(&src0, TINY, false, &o0, 42) ||
        !rig_make(&dst2, TINY, false, &o2, 43) || !rig_make(&dst0, TINY, false, &o0, 44) ||
        !rig_make(&dst2b, TINY, false, &o2, 45))
        goto done;
    CHECK(train_steps(&src2, 2) && train_steps(&src0, 2));
    snprintf(d2, sizeof d2, "%s", fresh_dir("o2"));
    snprintf(d0, sizeof d0, "%s", fresh_dir("o0"));
    dir2 = d2;
    dir0 = d0;
    CHECK_OK(amp_checkpoint_save(dir2, 2, src2.m, src2.opt, NULL, NULL, 0));
    CHECK_OK(amp_checkpoint_save(dir0, 2, src0.m, src0.opt, NULL, NULL, 0));
    float *masters[4] = {0}, *weights0[4] = {0};
    for (int i = 0; i < n_params(&src2); i++) {
        amp_tensor *mw = amp_optimizer_master(src2.opt, i);
        masters[i] = malloc(amp_tensor_nbytes(mw));
        weights0[i] = malloc(amp_tensor_nbytes(param(&src0, i)));
        CHECK_OK(amp_tensor_to_host(mw, masters[i], amp_tensor_nbytes(mw)));
        CHECK_OK(amp_tensor_to_host(param(&src0, i), weights0[i], amp_tensor_nbytes(param(&src0, i))));
    }
    CHECK_OK(amp_checkpoint_load(dir2, dst2.m, dst2.opt, NULL, NULL));
    CHECK(same_state(&src2, &dst2));
    CHECK_OK(amp_checkpoint_load(dir2, dst0.m, dst0.opt, NULL, NULL));
    CHECK_MSG(params_equal_f32(&dst0, (const float *const *)masters),
              "O2 checkpoint into O0: weights are not the masters");
    CHECK_OK(amp_checkpoint_load(dir0, dst2b.m, dst2b.opt, NULL, NULL));
    bool ok = true;
    for (int i = 0; i < n_params(&dst2b); i++) {
        amp_tensor *mw = amp_optimizer_master(dst2b.opt, i);
        ok &= !memcmp(mw->data, weights0[i], amp_tensor_nbytes(mw));
    }
    CHECK_MSG(ok, "O0 checkpoint into O2: masters are not the saved f32 weights");
    for (int i = 0; i < 4; i++) {
        free(masters[i]);
        free(weights0[i]);
    }
done:
    rig_free(&src2);
    rig_free(&src0);
    rig_free(&dst2);
    rig_free(&dst0);
    rig_free(&dst2b);
}

/* Loads that do not fit: an error naming the culprits, and model + optimizer + scaler + RNG as
 * they were. */
static void test_mismatches(void) {
    rig tiny, conv, adam, two, t2;
    amp_options o1 = {.opt_level = AMP_O1}, o1x2 = {.opt_level = AMP_O1, .num_losses = 2};
    if (!rig_make(&tiny, TINY, false, &o1, 51) || !rig_make(&conv, CONVNET, false, &o1, 52) ||
        !rig_make(&adam, TINY, true, &o1, 53) || !rig_make(&two, TINY, false, &o1x2, 54) ||
        !rig_make(&t2, TINY, false, &o1, 55))
        goto done;
    const char *dir = fresh_dir("mismatch");
    CHECK(train_steps(&tiny, 1));
    CHECK_OK(amp_checkpoint_save(dir, 1, tiny.m, tiny.opt, NULL, NULL, 0));
    rig *targets[3] = {&conv, &adam, &two};
    const char *want[3] = {"missing", "optimizer kind sgd, this one is adam", "1 loss scalers, this run has 2"};
    for (int k = 0; k < 3; k++) {
        size_t n0, n1;
        uint8_t *s0 = snapshot(targets[k], &n0);
        amp_rng_state r0, r1;
        amp_rng_get_state(targets[k]->ctx, &r0);
        amp_status s = amp_checkpoint_load(dir, targets[k]->m, targets[k]->opt, NULL, NULL);
        CHECK_MSG(s != AMP_OK && strstr(amp_last_error(), want[k]), "case %d: %d '%s'", k, (int)s,
                  amp_last_error());
        uint8_t *s1 = snapshot(targets[k], &n1);
        amp_rng_get_state(targets[k]->ctx, &r1);
        CHECK(s0 && s1 && n0 == n1 && !memcmp(s0, s1, n0) && r0.counter == r1.counter);
        free(s0);
        free(s1);
    }
    CHECK(strstr(amp_last_error(), "state") != NULL);
    /* The ConvNet's message lists the missing and the unexpected tensors by name. */
    CHECK(amp_checkpoint_load(dir, conv.m, conv.opt, NULL, NULL) == AMP_ERR_SHAPE &&
          strstr(amp_last_error(), "layer1.0.weight") && strstr(amp_last_error(), "unexpected") &&
          strstr(amp_last_error(), "fc1.weight"));
    /* A loader of other options (batch size): its batches would not be the saved run's. */
    amp_dataset *ds = NULL;
    amp_loader *big = NULL, *small = NULL;
    float xs[64 * 16] = {0};
    int32_t ys[64] = {0};
    CHECK_OK(amp_dataset_create(64, (int64_t[]){1, 4, 4}, xs, ys, 4, &ds));
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 2, .no_prefetch = true}, &big));
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 32, .no_prefetch = true}, &small));
    amp_batch bt;
    for (int i = 0; i < 10; i++) CHECK_OK(amp_loader_next(big, &bt));
    CHECK_OK(amp_checkpoint_save(dir, 2, tiny.m, tiny.opt, &(amp_checkpoint_opts){.loader = big},
                                 NULL, 0));
    CHECK_FAILS(amp_checkpoint_load(dir, t2.m, t2.opt, &(amp_checkpoint_opts){.loader = small}, NULL),
                AMP_ERR_SHAPE, "batch size 2, 64 samples, shuffle 0; this loader: seed 0, batch size 32");
    amp_loader_state ls;
    CHECK_OK(amp_checkpoint_load(dir, t2.m, t2.opt, &(amp_checkpoint_opts){.loader = big}, NULL));
    CHECK_OK(amp_loader_get_state(big, &ls));
    CHECK(ls.epoch == 0 && ls.batch == 10);
    amp_loader_free(big);
    amp_loader_free(small);
    amp_dataset_free(ds);
done:
    rig_free(&tiny);
    rig_free(&conv);
    rig_free(&adam);
    rig_free(&two);
    rig_free(&t2);
}

/* Flips one byte of a file in place. */
static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, at, at < 0 ? SEEK_END : SEEK_SET);
    int c = fgetc(f);
    fseek(f, -1, SEEK_CUR);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Corrupt data, torn files and bad pointers: refused with the file named, nothing changed. */
static void test_corrupt(void) {
    rig a, b;
    amp_options o = {.opt_level = AMP_O2};
    if (rig_make(&a, TINY, false, &o, 61) && rig_make(&b, TINY, false, &o, 62)) {
        const char *dir = fresh_dir("corrupt");
        char step[1200], file[1300];
        CHECK(train_steps(&a, 1));
        CHECK_OK(amp_checkpoint_save(dir, 1, a.m, a.opt, NULL, step, sizeof step));
        size_t n0, n1;
        uint8_t *s0 = snapshot(&b, &n0);
        snprintf(file, sizeof file, "%s/state.safetensors", step);
        flip_byte(file, -3); /* a data byte: the crc catches it */
        CHECK_FAILS(amp_checkpoint_load(dir, b.m, b.opt, NULL, NULL), AMP_ERR_FORMAT, "state.safetensors");
        flip_byte(file, -3);
        snprintf(file, sizeof file, "%s/model.safetensors", step);
        if (truncate(file, 100) != 0) CHECK(false);
        CHECK_FAILS(amp_checkpoint_load(dir, b.m, b.opt, NULL, NULL), AMP_ERR_FORMAT, "model.safetensors");
        uint8_t *s1 = snapshot(&b, &n1);
        CHECK(s0 && s1 && n0 == n1 && !memcmp(s0, s1, n0));
        free(s0);
        free(s1);
        snprintf(file, sizeof file, "%s/latest", dir);
        write_text(file, "step-0000009\n");
        CHECK_FAILS(amp_checkpoint_load(dir, b.m, b.opt, NULL, NULL), AMP_ERR_IO, "does not exist");
        write_text(file, "../../etc\n");
        CHECK_FAILS(amp_checkpoint_load(dir, b.m, b.opt, NULL, NULL), AMP_ERR_FORMAT, "not a step folder");
        CHECK_FAILS(amp_checkpoint_load("/nonexistent/ckpt", b.m, b.opt, NULL, NULL), AMP_ERR_IO,
                    "neither a step folder");
    }
    rig_free(&a);
    rig_free(&b);
}

/* keep, latest, replacing a step, user metadata, weights-only files. */
static void test_folders_and_weights(void) {
    rig a, b;
    amp_options o = {.opt_level = AMP_O1};
    if (rig_make(&a, CONVNET, false, &o, 71) && rig_make(&b, CONVNET, false, &o, 72)) {
        const char *dir = fresh_dir("folders");
        const char *keys[1] = {"run"}, *values[1] = {"exp-7"};
        amp_checkpoint_opts co = {.keep = 2, .user_keys = keys, .user_values = values, .n_user = 1};
        char path[1200], latest[1200], meta[64];
        for (int s = 1; s <= 4; s++) {
            CHECK(train_steps(&a, 1));
            CHECK_OK(amp_checkpoint_save(dir, s, a.m, a.opt, &co, path, sizeof path));
        }
        CHECK(!file_exists(dir, "step-0000001") && !file_exists(dir, "step-0000002"));
        CHECK(file_exists(dir, "step-0000003") && file_exists(dir, "step-0000004"));
        CHECK_OK(amp_checkpoint_latest(dir, latest, sizeof latest));
        CHECK(!strcmp(latest, path));
        CHECK_OK(amp_checkpoint_save(dir, 4, a.m, a.opt, &co, NULL, 0)); /* the same step again */
        CHECK_OK(amp_checkpoint_user_meta(dir, "run", meta, sizeof meta));
        CHECK(!strcmp(meta, "exp-7"));
        CHECK_FAILS(amp_checkpoint_user_meta(dir, "nope", meta, sizeof meta), AMP_ERR_INVALID_ARG,
                    "no user metadata 'nope'");
        /* Weights only: the BN counters ride along; a file of another model is refused. */
        char wpath[1300];
        snprintf(wpath, sizeof wpath, "%s/weights.safetensors", dir);
        CHECK_OK(amp_model_save_weights(a.m, wpath));
        CHECK_OK(amp_model_load_weights(b.m, b.opt, wpath));
        bool same = true;
        for (int i = 0; i < n_params(&a); i++)
            same &= !memcmp(param(&a, i)->data, param(&b, i)->data, amp_tensor_nbytes(param(&a, i)));
        for (int c = 0; c < a.m->n_counters; c++)
            same &= *a.m->counters[c].value == *b.m->counters[c].value;
        CHECK(same && a.m->n_counters == 2 && *a.m->counters[0].value == 4);
        rig t;
        if (rig_make(&t, TINY, false, NULL, 73))
            CHECK_FAILS(amp_model_load_weights(t.m, t.opt, wpath), AMP_ERR_SHAPE, "missing");
        rig_free(&t);
    }
    rig_free(&a);
    rig_free(&b);
}

/* Between amp_backward and amp_step: refused before anything moves (the weights were once
 * applied, then the scaler refused), and the step that follows is the twin's. */
static void test_load_inside_step(void) {
    rig a, b;
    amp_options o = {.opt_level = AMP_O2};
    if (rig_make(&a, TINY, true, &o, 61) && rig_make(&b, TINY, true, &o, 61)) {
        const char *dir = fresh_dir("inside-step");
        CHECK(train_steps(&a, 2) && train_steps(&b, 2));
        CHECK_OK(amp_checkpoint_save(dir, 2, a.m, a.opt, NULL, NULL, 0));
        CHECK(train_steps(&a, 1) && train_steps(&b, 1)); /* the weights move past the save */
        CHECK(forward_backward(&a) && forward_backward(&b));
        size_t n0, n1;
        uint8_t *s0 = snapshot(&a, &n0);
        CHECK_FAILS(amp_checkpoint_load(dir, a.m, a.opt, NULL, NULL), AMP_ERR_STATE,
                    "between amp_backward and its amp_step");
        uint8_t *s1 = snapshot(&a, &n1);
        CHECK_MSG(s0 && s1 && n0 == n1 && !memcmp(s0, s1, n0), "a refused load changed the state");
        free(s0);
        free(s1);
        CHECK_OK(amp_step(a.opt, NULL));
        CHECK_OK(amp_step(b.opt, NULL));
        CHECK_MSG(same_state(&a, &b), "the step after a refused load differs from the twin's");
        CHECK_OK(amp_zero_grad(a.opt));
        CHECK_OK(amp_checkpoint_load(dir, a.m, a.opt, NULL, NULL)); /* between steps: taken */
    }
    rig_free(&a);
    rig_free(&b);
}

int main(void) {
    test_resume_exact(AMP_O0, AMP_HALF_F16, false);
    test_resume_exact(AMP_O1, AMP_HALF_F16, false);
    test_resume_exact(AMP_O2, AMP_HALF_F16, true);
    test_resume_exact(AMP_O2, AMP_HALF_BF16, false);
    test_resume_exact(AMP_O3, AMP_HALF_BF16, true);
    test_master_rules();
    test_mismatches();
    test_corrupt();
    test_folders_and_weights();
    test_load_inside_step();
    return test_summary("test_checkpoint");
}
