/* The CUDA backend's bad-index record (kernels/cuda/bad_index.h): an index that only the device
 * sees (an embedding id past the vocabulary, a kv_len past the keys) cannot fail the call that
 * met it without a host wait, so the op writes NaN, notes the position and value, and the next
 * point where the host waits anyway reports it, naming the op as the user called it. Before,
 * only the next cross-entropy read the record: with another loss, while sampling (reading the
 * logits) or at the step, nobody heard of it. Checked here, each on a fresh record:
 *  - a host read of the embedding's own output fails naming amp_embedding, the id and its
 *    position; the values were copied (the bad row is NaN); the next read succeeds (cleared);
 *  - attention with a bad kv_len followed by an MSE loss: reading the loss names the attention
 *    and the batch;
 *  - the next cross-entropy names the embedding, not its own labels;
 *  - the step's readback (amp_step's `stepped`) names the embedding of that step;
 *  - a clean run reports nothing.
 * On the CPU backend these are refused at the call (tests/unit/test_error_names.c); the test
 * runs where a CUDA device (or cudacpu) answers and is SKIPPED elsewhere. */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "test_util.h"

#define NAME "test_bad_index_record"

static amp_tensor *i32(amp_ctx *ctx, int64_t n, const int32_t *v) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){n}, v, &t));
    return t;
}

static amp_tensor *f32(amp_ctx *ctx, int ndim, const int64_t *shape, const float *v) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, ndim, shape, v, &t));
    return t;
}

static void test_host_read(amp_ctx *ctx) {
    float w[20];
    for (int i = 0; i < 20; i++) w[i] = (float)i;
    amp_tensor *wt = f32(ctx, 2, (const int64_t[]){5, 4}, w);
    amp_tensor *idx = i32(ctx, 3, (const int32_t[]){0, 9, 1}), *y = NULL;
    CHECK_OK(amp_embedding(idx, wt, &y));
    float back[12] = {0};
    CHECK_FAILS(amp_tensor_to_host(y, back, sizeof back), AMP_ERR_INVALID_ARG,
                "amp_embedding had id 9 at position 1");
    CHECK(isnan(back[4]) && back[8] == 4.0f);
    CHECK_OK(amp_tensor_to_host(y, back, sizeof back)); /* reported once */
    amp_ctx_reset_step(ctx);
    amp_tensor_free(wt);
    amp_tensor_free(idx);
}

static void test_other_loss(amp_ctx *ctx) {
    float v[2 * 1 * 4 * 2] = {0};
    amp_tensor *q = f32(ctx, 4, (const int64_t[]){2, 1, 4, 2}, v);
    amp_tensor *len = i32(ctx, 2, (const int32_t[]){2, 7}), *y = NULL, *loss = NULL;
    amp_attention_options o = {.kv_len = len};
    CHECK_OK(amp_scaled_dot_product_attention(q, q, q, &o, &y));
    CHECK_OK(amp_mse_loss(y, y, &loss));
    float l = 0;
    CHECK_FAILS(amp_tensor_to_host(loss, &l, sizeof l), AMP_ERR_INVALID_ARG,
                "amp_scaled_dot_product_attention (or its backward) had kv_len[1] = 7");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(q);
    amp_tensor_free(len);
}

static void test_next_cross_entropy(amp_ctx *ctx) {
    float w[20] = {0};
    amp_tensor *wt = f32(ctx, 2, (const int64_t[]){5, 4}, w);
    amp_tensor *idx = i32(ctx, 3, (const int32_t[]){0, 1, -3}), *y = NULL, *loss = NULL;
    amp_tensor *lab = i32(ctx, 3, (const int32_t[]){0, 1, 2});
    CHECK_OK(amp_embedding(idx, wt, &y));
    CHECK_FAILS(amp_cross_entropy(y, lab, &loss), AMP_ERR_INVALID_ARG,
                "amp_cross_entropy: an earlier amp_embedding had id -3 at position 2");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(wt);
    amp_tensor_free(idx);
    amp_tensor_free(lab);
}

/* An embedding model at O1 with a dynamic scale: the NaN row makes the step skip, and the step's
 * own readback reports why. */
static void test_step(amp_ctx *ctx) {
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_module_embedding(ctx, 5, 4, &m));
    CHECK_OK(amp_model_build(m));
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.1f}, &opt));
    CHECK_OK(amp_initialize(m, opt, AMP_O1));
    amp_tensor *idx = i32(ctx, 2, (const int32_t[]){4, 5}), *y = NULL, *loss = NULL;
    CHECK_OK(amp_model_forward(m, idx, &y));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_backward(loss));
    bool stepped = true;
    CHECK_FAILS(amp_step(opt, &stepped), AMP_ERR_INVALID_ARG,
                "amp_embedding had id 5 at position 1");
    amp_ctx_reset_step(ctx);
    /* A clean step after it: nothing left in the record. */
    amp_tensor *ok = i32(ctx, 2, (const int32_t[]){4, 0});
    CHECK_OK(amp_model_forward(m, ok, &y));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_step(opt, &stepped));
    CHECK(stepped);
    amp_ctx_reset_step(ctx);
    amp_tensor_free(idx);
    amp_tensor_free(ok);
    amp_optimizer_free(opt);
    amp_model_free(m);
}

int main(void) {
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA}, &ctx) != AMP_OK)
        return test_skip(NAME, amp_last_error());
    test_host_read(ctx);
    test_other_loss(ctx);
    test_next_cross_entropy(ctx);
    test_step(ctx);
    amp_ctx_free(ctx);
    return test_summary(NAME);
}
