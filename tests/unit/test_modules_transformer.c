/* The transformer modules (amp_module_layer_norm, rms_norm, embedding, gelu) in a Sequential
 * token -> embedding -> LayerNorm -> GELU(tanh) -> linear -> RMSNorm: PyTorch's state_dict names
 * and initial values (weights 1, biases 0, the embedding N(0, 1)), the forward equal to the ops
 * called by hand bit for bit, both norms f32 after amp_initialize at O2 and O3 while the
 * embedding and the linear go to the half type, training steps lowering the loss at O2, and bad
 * arguments refused naming the module. */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "test_util.h"

enum { VOCAB = 12, DIM = 8, TOKENS = 6 };

static amp_model *make_model(amp_ctx *ctx) {
    amp_model *seq = NULL, *emb = NULL, *ln = NULL, *gelu = NULL, *lin = NULL, *rms = NULL;
    CHECK_OK(amp_seq_create(ctx, &seq));
    CHECK_OK(amp_module_embedding(ctx, VOCAB, DIM, &emb));
    CHECK_OK(amp_module_layer_norm(ctx, DIM, 1e-5f, true, &ln));
    CHECK_OK(amp_module_gelu(ctx, true, &gelu));
    CHECK_OK(amp_module_linear(ctx, DIM, VOCAB, true, &lin));
    CHECK_OK(amp_module_rms_norm(ctx, VOCAB, 1e-6f, &rms));
    amp_model *mods[5] = {emb, ln, gelu, lin, rms};
    for (int i = 0; i < 5; i++) CHECK_OK(amp_seq_add(seq, NULL, mods[i]));
    CHECK_OK(amp_model_build(seq));
    return seq;
}

static amp_tensor *tokens(amp_ctx *ctx) {
    const int32_t ids[TOKENS] = {3, 0, 11, 3, 7, 5};
    const int64_t n = TOKENS;
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, &n, ids, &t));
    return t;
}

static void test_names_values_forward(amp_ctx *ctx) {
    amp_model *m = make_model(ctx);
    static const char *names[] = {"0.weight", "1.weight", "1.bias", "3.weight", "3.bias",
                                  "4.weight"};
    CHECK(amp_model_n_params(m) == 6);
    for (int i = 0; i < 6 && i < amp_model_n_params(m); i++)
        CHECK_MSG(strcmp(amp_model_param_name(m, i), names[i]) == 0, "param %d is %s", i,
                  amp_model_param_name(m, i));
    float w[VOCAB * DIM], ln_w[DIM], ln_b[DIM];
    CHECK_OK(amp_tensor_to_host(amp_model_param(m, 1), ln_w, sizeof ln_w));
    CHECK_OK(amp_tensor_to_host(amp_model_param(m, 2), ln_b, sizeof ln_b));
    CHECK(ln_w[0] == 1.0f && ln_w[DIM - 1] == 1.0f && ln_b[0] == 0.0f && ln_b[DIM - 1] == 0.0f);
    CHECK_OK(amp_tensor_to_host(amp_model_param(m, 0), w, sizeof w));
    double mean = 0.0, sq = 0.0;
    for (int i = 0; i < VOCAB * DIM; i++) mean += w[i], sq += (double)w[i] * w[i];
    mean /= VOCAB * DIM;
    double sd = sqrt(sq / (VOCAB * DIM) - mean * mean);
    CHECK_MSG(fabs(mean) < 0.3 && sd > 0.75 && sd < 1.25, "embedding init mean %g sd %g", mean, sd);
    /* The forward is the ops in order. */
    amp_tensor *ids = tokens(ctx), *y = NULL, *h = NULL;
    CHECK_OK(amp_model_forward(m, ids, &y));
    CHECK_OK(amp_embedding(ids, amp_model_param(m, 0), &h));
    CHECK_OK(amp_norm(h, NULL, amp_model_param(m, 1), amp_model_param(m, 2), &(amp_norm_opts){.eps = 1e-5f}, NULL, &h));
    CHECK_OK(amp_gelu(h, true, &h));
    CHECK_OK(amp_linear(h, amp_model_param(m, 3), amp_model_param(m, 4), &h));
    CHECK_OK(amp_norm(h, NULL, amp_model_param(m, 5), NULL, &(amp_norm_opts){.kind = AMP_NORM_RMS, .eps = 1e-6f}, NULL, &h));
    float a[TOKENS * VOCAB], b[TOKENS * VOCAB];
    CHECK_OK(amp_tensor_to_host(y, a, sizeof a));
    CHECK_OK(amp_tensor_to_host(h, b, sizeof b));
    CHECK(memcmp(a, b, sizeof a) == 0);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(ids);
    amp_model_free(m);
}

/* O2 and O3 (a context each): both norms f32, the embedding and the linear in the half type; at
 * O2 training lowers the loss. */
static void test_opt_levels(void) {
    const amp_opt_level levels[2] = {AMP_O2, AMP_O3};
    for (int l = 0; l < 2; l++) {
        amp_ctx *ctx = NULL;
        CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 3}, &ctx));
        if (!ctx) return;
        amp_model *m = make_model(ctx);
        amp_optimizer *opt = NULL;
        CHECK_OK(amp_adam_create(m, &(amp_adam_opts){.lr = 0.05f, .decoupled = true}, &opt));
        CHECK_OK(amp_initialize(m, opt, levels[l]));
        const bool f32[6] = {false, true, true, false, false, true};
        for (int i = 0; i < 6; i++)
            CHECK_MSG((amp_tensor_dtype(amp_model_param(m, i)) == AMP_F32) == f32[i], "O%d: %s is %s",
                      l + 2, amp_model_param_name(m, i),
                      amp_dtype_name(amp_tensor_dtype(amp_model_param(m, i))));
        if (levels[l] == AMP_O2) {
            amp_tensor *ids = tokens(ctx), *labels = tokens(ctx);
            float first = 0.0f, last = 0.0f;
            for (int step = 0; step < 30; step++) {
                amp_tensor *y = NULL, *loss = NULL;
                bool stepped;
                CHECK_OK(amp_model_forward(m, ids, &y));
                CHECK_OK(amp_cross_entropy(y, labels, &loss));
                CHECK_OK(amp_tensor_to_host(loss, step == 0 ? &first : &last, sizeof(float)));
                CHECK_OK(amp_backward(loss));
                CHECK_OK(amp_step(opt, &stepped));
                CHECK_OK(amp_zero_grad(opt));
            }
            printf("O2: loss %.4f -> %.4f after 30 Adam steps\n", (double)first, (double)last);
            CHECK_MSG(last < 0.5f * first, "O2 loss %g -> %g", (double)first, (double)last);
            amp_tensor_free(ids);
            amp_tensor_free(labels);
        }
        amp_optimizer_free(opt);
        amp_model_free(m);
        amp_ctx_free(ctx);
    }
}

static void test_bad_arguments(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_FAILS(amp_module_layer_norm(ctx, 0, 1e-5f, true, &m), AMP_ERR_INVALID_ARG,
                "amp_module_layer_norm: dim = 0");
    CHECK_FAILS(amp_module_rms_norm(ctx, 4, -1.0f, &m), AMP_ERR_INVALID_ARG,
                "amp_module_rms_norm: eps = -1");
    CHECK_FAILS(amp_module_embedding(ctx, 0, 4, &m), AMP_ERR_INVALID_ARG, "amp_module_embedding");
    CHECK(m == NULL);
}

int main(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 3}, &ctx));
    if (!ctx) return test_summary("test_modules_transformer");
    test_names_values_forward(ctx);
    test_opt_levels();
    test_bad_arguments(ctx);
    amp_ctx_free(ctx);
    return test_summary("test_modules_transformer");
}
