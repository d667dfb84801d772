/* Calls that must refuse bad input with a message, and change nothing when they do:
 *  - every library module constructor with a NULL result pointer: AMP_ERR_INVALID_ARG naming
 *    it, never a crash (Linear, Conv2d, BatchNorm2d, LayerNorm, RMSNorm and Embedding made
 *    their module first and crashed handing it back);
 *  - amp_checkpoint_save with a path_out too small for the new folder's path: refused before
 *    anything is written (no step folder, no temporary folder, `latest` as it was, and no
 *    folder made for a directory that did not exist);
 *  - the accessors that answer 0, -1 or NULL for an index out of range (a group's lr and weight
 *    decay, a parameter's group, a model's parameter, buffer, their names and a child): the
 *    reason is in amp_last_error, not an older message left there;
 *  - a '.' in the name of a parameter, a buffer or a child (torch's register_parameter,
 *    register_buffer and add_module refuse it): refused at once, where "fc.weight" beside a
 *    child "fc" used to fail only at the build; the model keeps what it had, and a child that
 *    was refused is still the caller's;
 *  - amp_lr_at with a warm-up of INT64_MAX steps: the rate rises to max_lr and never goes
 *    negative (warmup_steps + 1 wrapped in int64);
 *  - a token file whose int32 count is negative: AMP_ERR_FORMAT naming the file and the count
 *    as written (-5), not its unsigned reading; and amp_tokens_write refuses a count past
 *    2^31 - 1 (it wrote one as uint32, which would read back negative) before touching the ids. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "amp/amp.h"
#include "test_tmp.h"
#include "test_util.h"

#define NAME "test_refusals"

/* Leaves a message that a later refusal must replace. */
static void plant_old_error(void) { (void)amp_error(AMP_ERR_IO, "an older message"); }

static bool error_has(const char *needle) {
    return strstr(amp_last_error(), needle) != NULL && !strstr(amp_last_error(), "older");
}

static void test_module_null_out(amp_ctx *ctx) {
    CHECK_FAILS(amp_module_linear(ctx, 4, 3, true, NULL), AMP_ERR_INVALID_ARG,
                "amp_module_linear: argument 'm' is NULL");
    CHECK_FAILS(amp_module_conv2d(ctx, 1, 2, 3, 1, 0, true, NULL), AMP_ERR_INVALID_ARG,
                "amp_module_conv2d: argument 'm' is NULL");
    CHECK_FAILS(amp_module_batchnorm2d(ctx, 3, NULL), AMP_ERR_INVALID_ARG,
                "amp_module_batchnorm2d: argument 'm' is NULL");
    CHECK_FAILS(amp_module_layer_norm(ctx, 8, 1e-5f, true, NULL), AMP_ERR_INVALID_ARG,
                "amp_module_layer_norm: argument 'm' is NULL");
    CHECK_FAILS(amp_module_rms_norm(ctx, 8, 1e-5f, NULL), AMP_ERR_INVALID_ARG,
                "amp_module_rms_norm: argument 'm' is NULL");
    CHECK_FAILS(amp_module_embedding(ctx, 10, 4, NULL), AMP_ERR_INVALID_ARG,
                "amp_module_embedding: argument 'm' is NULL");
    CHECK_FAILS(amp_module_relu(ctx, NULL), AMP_ERR_INVALID_ARG, "argument");
    CHECK_FAILS(amp_module_maxpool2d(ctx, 2, 2, NULL), AMP_ERR_INVALID_ARG, "argument");
    CHECK_FAILS(amp_module_flatten(ctx, NULL), AMP_ERR_INVALID_ARG, "argument");
    CHECK_FAILS(amp_module_dropout(ctx, 0.1f, NULL), AMP_ERR_INVALID_ARG, "argument");
    CHECK_FAILS(amp_module_gelu(ctx, true, NULL), AMP_ERR_INVALID_ARG, "argument");
}

/* The entries of a folder, "." and ".." left out; -1 when it does not exist. */
static int folder_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_checkpoint_path_out(amp_ctx *ctx) {
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_linear(m, "fc", 4, 3, true));
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.1f}, &opt));
    char dir[700], path[1400], latest[1400], small[8];
    snprintf(dir, sizeof dir, "%s", test_tmp_path("ckpt"));
    CHECK_OK(amp_checkpoint_save(dir, 1, m, opt, NULL, path, sizeof path));
    CHECK(folder_entries(dir) == 2); /* step-0000001 and latest */
    CHECK_FAILS(amp_checkpoint_save(dir, 2, m, opt, NULL, small, sizeof small),
                AMP_ERR_INVALID_ARG, "path_out has 8 bytes");
    CHECK_MSG(folder_entries(dir) == 2, "a refused save left %d entries in %s, want 2",
              folder_entries(dir), dir);
    char step2[1400];
    snprintf(step2, sizeof step2, "%s/step-0000002", dir);
    CHECK_MSG(!exists(step2), "a refused save wrote %s", step2);
    CHECK_OK(amp_checkpoint_latest(dir, latest, sizeof latest));
    CHECK_MSG(!strcmp(latest, path), "a refused save moved latest to %s (was %s)", latest, path);
    CHECK_FAILS(amp_checkpoint_save(dir, 2, m, opt, NULL, small, 0), AMP_ERR_INVALID_ARG,
                "path_size is 0");
    /* A directory that did not exist is not made either. */
    char fresh[700];
    snprintf(fresh, sizeof fresh, "%s", test_tmp_path("fresh"));
    CHECK_FAILS(amp_checkpoint_save(fresh, 1, m, opt, NULL, small, sizeof small),
                AMP_ERR_INVALID_ARG, "nothing was saved");
    CHECK_MSG(!exists(fresh), "a refused save made %s", fresh);
    amp_optimizer_free(opt);
    amp_model_free(m);
}

/* The model: "w" [3] and the buffer "b" [2] of its own, a child "c" holding "v" [2]. */
static amp_status nothing_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **out) {
    (void)self, (void)n;
    *out = in[0];
    return AMP_OK;
}

static void test_accessor_messages(amp_ctx *ctx) {
    amp_model *m = NULL, *c = NULL;
    int64_t three = 3, two = 2;
    CHECK_OK(amp_model_create(ctx, nothing_forward, NULL, NULL, &m));
    CHECK_OK(amp_model_register_param(m, "w", 1, &three, AMP_INIT_ONE_VALUES, NULL));
    CHECK_OK(amp_model_register_buffer(m, "b", 1, &two, AMP_INIT_ZERO_VALUES, NULL));
    CHECK_OK(amp_model_create(ctx, NULL, NULL, NULL, &c));
    CHECK_OK(amp_model_register_param(c, "v", 1, &two, AMP_INIT_ONE_VALUES, NULL));
    CHECK_OK(amp_model_add_child(m, "c", c));
    plant_old_error();
    CHECK(amp_model_param(m, 0) == NULL && error_has("not built yet"));
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.25f, .weight_decay = 0.5f}, &opt));
    CHECK(amp_model_param(m, 1) != NULL && !strcmp(amp_model_param_name(m, 1), "c.v"));

    plant_old_error();
    CHECK(amp_optimizer_group_lr(opt, 99) == 0.0f);
    CHECK_MSG(error_has("amp_optimizer_group_lr: group 99 does not exist"), "%s", amp_last_error());
    plant_old_error();
    CHECK(amp_optimizer_group_weight_decay(opt, -1) == 0.0f);
    CHECK_MSG(error_has("amp_optimizer_group_weight_decay: group -1 does not exist"), "%s",
              amp_last_error());
    plant_old_error();
    CHECK(amp_optimizer_param_group(opt, 99) == -1);
    CHECK_MSG(error_has("amp_optimizer_param_group: parameter 99"), "%s", amp_last_error());
    CHECK(amp_optimizer_group_lr(opt, 0) == 0.25f);
    CHECK(amp_optimizer_group_weight_decay(opt, 0) == 0.5f);

    plant_old_error();
    CHECK(amp_model_param(m, 99) == NULL);
    CHECK_MSG(error_has("amp_model_param: index 99 is out of range: the model has 2 parameters"),
              "%s", amp_last_error());
    plant_old_error();
    CHECK(amp_model_param_name(m, -1) == NULL);
    CHECK_MSG(error_has("amp_model_param_name: index -1"), "%s", amp_last_error());
    plant_old_error();
    CHECK(amp_model_buffer(m, 1) == NULL);
    CHECK_MSG(error_has("amp_model_buffer: index 1 is out of range: the model has 1 buffers"),
              "%s", amp_last_error());
    plant_old_error();
    CHECK(amp_model_buffer_name(m, 7) == NULL);
    CHECK_MSG(error_has("amp_model_buffer_name: index 7"), "%s", amp_last_error());
    plant_old_error();
    CHECK(amp_model_child(m, 1) == NULL);
    CHECK_MSG(error_has("amp_model_child: index 1"), "%s", amp_last_error());
    /* A child answers for its own slice. */
    plant_old_error();
    CHECK(amp_model_param(c, 1) == NULL && error_has("the model has 1 parameters"));
    amp_optimizer_free(opt);
    amp_model_free(m);
}

static void test_dotted_names(amp_ctx *ctx) {
    amp_model *m = NULL, *fc = NULL, *seq = NULL, *orphan = NULL;
    int64_t two = 2;
    CHECK_OK(amp_model_create(ctx, nothing_forward, NULL, NULL, &m));
    CHECK_FAILS(amp_model_register_param(m, "fc.weight", 1, &two, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_INVALID_ARG, "name 'fc.weight' contains '.'");
    CHECK(strstr(amp_last_error(), "'weight' on a child model named 'fc'") != NULL);
    CHECK_FAILS(amp_model_register_buffer(m, "running.mean", 1, &two, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_INVALID_ARG, "amp_model_register_buffer: name 'running.mean' contains '.'");
    CHECK(amp_model_n_params(m) == 0 && amp_model_n_buffers(m) == 0);
    /* What torch's nesting gives instead, and the name the refused one clashed with. */
    CHECK_OK(amp_model_create(ctx, NULL, NULL, NULL, &fc));
    CHECK_OK(amp_model_register_param(fc, "weight", 1, &two, AMP_INIT_ZERO_VALUES, NULL));
    CHECK_FAILS(amp_model_add_child(m, "a.fc", fc), AMP_ERR_INVALID_ARG,
                "amp_model_add_child: name 'a.fc' contains '.'");
    CHECK(amp_model_n_children(m) == 0);
    CHECK_OK(amp_model_add_child(m, "fc", fc)); /* still the caller's after the refusal */
    CHECK_OK(amp_model_build(m));
    CHECK(amp_model_n_params(m) == 1 && !strcmp(amp_model_param_name(m, 0), "fc.weight"));

    CHECK_OK(amp_seq_create(ctx, &seq));
    CHECK_FAILS(amp_seq_add_linear(seq, "layer1.0", 2, 2, true), AMP_ERR_INVALID_ARG,
                "amp_seq_add_linear: layer name 'layer1.0' contains '.'");
    CHECK_OK(amp_module_relu(ctx, &orphan));
    CHECK_FAILS(amp_seq_add(seq, "x.y", orphan), AMP_ERR_INVALID_ARG, "'x.y' contains '.'");
    CHECK(amp_model_n_children(seq) == 0);
    CHECK_OK(amp_seq_add(seq, NULL, orphan));
    CHECK(amp_model_n_children(seq) == 1);
    amp_model_free(seq);
    amp_model_free(m);
}

static void test_lr_at_long_warmup(void) {
    amp_lr_schedule s = {.max_lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = INT64_MAX,
                         .decay_steps = INT64_MAX, .decay = AMP_LR_COSINE};
    const int64_t steps[] = {0, 1, INT64_MAX / 2, INT64_MAX - 2, INT64_MAX - 1};
    float prev = 0.0f;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        float lr = -1.0f;
        CHECK_OK(amp_lr_at(&s, steps[i], &lr));
        CHECK_MSG(lr > 0.0f && lr <= s.max_lr && lr >= prev, "step %lld: lr %.9g (before %.9g)",
                  (long long)steps[i], (double)lr, (double)prev);
        prev = lr;
    }
    CHECK_MSG(prev == s.max_lr, "the warm-up's last step: %.9g, want max_lr", (double)prev);
    float lr = -1.0f;
    CHECK_OK(amp_lr_at(&s, INT64_MAX, &lr)); /* decay_steps: the floor */
    CHECK(lr == s.min_lr);
    s.decay = AMP_LR_LINEAR, s.warmup_steps = 0;
    CHECK_OK(amp_lr_at(&s, INT64_MAX - 1, &lr));
    CHECK(lr >= s.min_lr && lr <= s.max_lr);
}

static void test_negative_token_count(void) {
    const char *file = test_tmp_path("negative.bin");
    FILE *f = fopen(file, "wb");
    CHECK(f != NULL);
    if (!f) return;
    int32_t header[256] = {20240520, 1, -5};
    uint16_t body[8] = {0};
    fwrite(header, sizeof header, 1, f);
    fwrite(body, sizeof body, 1, f);
    fclose(f);
    amp_tokens *t = NULL;
    CHECK_FAILS(amp_tokens_open(file, 256, &t), AMP_ERR_FORMAT, "says -5 tokens in its header");
    CHECK(strstr(amp_last_error(), "negative.bin") && !strstr(amp_last_error(), "4294967291"));
    CHECK(t == NULL);
    CHECK_FAILS(amp_tokens_write(test_tmp_path("big.bin"), body, (int64_t)INT32_MAX + 1),
                AMP_ERR_INVALID_ARG, "at most 2^31 - 1");
    CHECK(!exists(test_tmp_path("big.bin")) && !exists(test_tmp_path("big.bin.tmp")));
}

int main(void) {
    test_tmp_make(NAME);
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 3, .n_threads = 1},
                            &ctx));
    test_module_null_out(ctx);
    test_checkpoint_path_out(ctx);
    test_accessor_messages(ctx);
    test_dotted_names(ctx);
    test_lr_at_long_warmup();
    test_negative_token_count();
    amp_ctx_free(ctx);
    test_tmp_remove();
    return test_summary(NAME);
}
