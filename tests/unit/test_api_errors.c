/* API misuse: every public call given a NULL, a shape or dtype that does not fit, a bad option or
 * a call out of order returns the documented status with a message naming the culprit (argument,
 * shape, value), never crashes; and a failing call leaves nothing behind that breaks the next
 * correct one (the tape, the step arena, the model). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "amp/amp.h"
#include "core/ctx.h"
#include "core/half.h"
#include "test_util.h"
#include "core/tensor_internal.h"

/* Tensors made by mk(), freed at the end. */
static amp_tensor *owned[512];
static int n_owned;

/* A caller-owned tensor; float ones hold small distinct values, i32 ones zeros. */
static amp_tensor *mk(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_create(ctx, dt, ndim, shape, &t));
    if (t && dt == AMP_F32) {
        float *v = malloc((size_t)t->numel * sizeof *v);
        for (int64_t i = 0; i < t->numel; i++) v[i] = 0.1f * (float)(i % 7) - 0.25f;
        CHECK_OK(amp_tensor_copy_from_host(t, v, (size_t)t->numel * sizeof *v));
        free(v);
    }
    if (t && n_owned < 512) owned[n_owned++] = t;
    return t;
}
#define NDIMS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define MK(dt, ...) mk(ctx, dt, NDIMS(__VA_ARGS__), (const int64_t[]){__VA_ARGS__})
#define MKG(dt, ...) with_grad(MK(dt, __VA_ARGS__))

static amp_tensor *with_grad(amp_tensor *t) {
    CHECK_OK(amp_tensor_set_requires_grad(t, true));
    return t;
}

static void test_null_arguments(amp_ctx *ctx) {
    amp_tensor *x = MK(AMP_F32, 4, 6), *w = MK(AMP_F32, 5, 6), *b = MK(AMP_F32, 5), *y = NULL;
    amp_tensor *x4 = MK(AMP_F32, 2, 3, 4, 4), *w4 = MK(AMP_F32, 2, 3, 3, 3), *c3 = MK(AMP_F32, 3);
    amp_tensor *lab = MK(AMP_I32, 4), *t = NULL;
    const int64_t shape[2] = {2, 3};
    float f, host[24];
    amp_ctx *c2 = NULL;
    CHECK_FAILS(amp_ctx_create(NULL, NULL), AMP_ERR_INVALID_ARG, "amp_ctx_create: argument 'out'");
    CHECK_FAILS(amp_tensor_create(NULL, AMP_F32, 2, shape, &t), AMP_ERR_INVALID_ARG, "'ctx'");
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 2, NULL, &t), AMP_ERR_INVALID_ARG, "shape is NULL");
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 2, shape, NULL), AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_tensor_from_host(ctx, AMP_F32, 2, shape, NULL, &t), AMP_ERR_INVALID_ARG, "'host'");
    CHECK_FAILS(amp_tensor_to_host(NULL, host, 24), AMP_ERR_INVALID_ARG, "amp_tensor_to_host: argument 't'");
    CHECK_FAILS(amp_tensor_to_host(x, NULL, 96), AMP_ERR_INVALID_ARG, "'host'");
    CHECK_FAILS(amp_tensor_copy_from_host(x, NULL, 96), AMP_ERR_INVALID_ARG, "'host'");
    CHECK_FAILS(amp_tensor_item(NULL, &f), AMP_ERR_INVALID_ARG, "'t'");
    CHECK_FAILS(amp_tensor_item(x, NULL), AMP_ERR_INVALID_ARG, "'out'");

    CHECK_FAILS(amp_linear(NULL, w, b, &y), AMP_ERR_INVALID_ARG, "amp_linear: argument 'x'");
    CHECK_FAILS(amp_linear(x, NULL, b, &y), AMP_ERR_INVALID_ARG, "amp_linear: argument 'w'");
    CHECK_FAILS(amp_linear(x, w, b, NULL), AMP_ERR_INVALID_ARG, "amp_linear: argument 'out'");
    CHECK_FAILS(amp_matmul(x, NULL, &y), AMP_ERR_INVALID_ARG, "amp_matmul: argument 'b'");
    CHECK_FAILS(amp_conv2d(NULL, w4, NULL, 1, 0, &y), AMP_ERR_INVALID_ARG, "amp_conv2d: argument 'x'");
    CHECK_FAILS(amp_conv2d(x4, NULL, NULL, 1, 0, &y), AMP_ERR_INVALID_ARG, "amp_conv2d: argument 'w'");
    CHECK_FAILS(amp_batchnorm2d(x4, NULL, c3, c3, c3, true, 0.1f, 1e-5f, &y), AMP_ERR_INVALID_ARG,
                "amp_batchnorm2d: argument 'gamma'");
    CHECK_FAILS(amp_batchnorm2d(x4, c3, c3, c3, NULL, true, 0.1f, 1e-5f, &y), AMP_ERR_INVALID_ARG,
                "argument 'running_var'");
    CHECK_FAILS(amp_relu(NULL, &y), AMP_ERR_INVALID_ARG, "amp_relu: argument 'x'");
    CHECK_FAILS(amp_relu(x, NULL), AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_maxpool2d(NULL, 2, 2, 0, &y), AMP_ERR_INVALID_ARG, "amp_maxpool2d: argument 'x'");
    CHECK_FAILS(amp_reshape(NULL, 2, shape, &y), AMP_ERR_INVALID_ARG, "amp_reshape: argument 'x'");
    CHECK_FAILS(amp_reshape(x, 2, NULL, &y), AMP_ERR_INVALID_ARG, "amp_reshape: shape is NULL");
    CHECK_FAILS(amp_flatten(NULL, &y), AMP_ERR_INVALID_ARG, "amp_flatten: argument 'x'");
    CHECK_FAILS(amp_flatten(x4, NULL), AMP_ERR_INVALID_ARG, "'out'");
    CHECK_FAILS(amp_add(x, NULL, &y), AMP_ERR_INVALID_ARG, "amp_add: argument 'b'");
    CHECK_FAILS(amp_mul(NULL, x, &y), AMP_ERR_INVALID_ARG, "amp_mul: argument 'a'");
    CHECK_FAILS(amp_mean(NULL, &y), AMP_ERR_INVALID_ARG, "amp_mean: argument 'x'");
    CHECK_FAILS(amp_cross_entropy(NULL, lab, &y), AMP_ERR_INVALID_ARG, "argument 'logits'");
    CHECK_FAILS(amp_cross_entropy(x, NULL, &y), AMP_ERR_INVALID_ARG, "argument 'labels'");
    CHECK_FAILS(amp_mse_loss(NULL, x, &y), AMP_ERR_INVALID_ARG, "amp_mse_loss: argument 'a'");
    CHECK_FAILS(amp_dropout(NULL, 0.5f, true, &y), AMP_ERR_INVALID_ARG, "amp_dropout: argument 'x'");

    CHECK_FAILS(amp_backward(NULL), AMP_ERR_INVALID_ARG, "argument 'loss' is NULL");
    CHECK_FAILS(amp_tensor_set_requires_grad(NULL, true), AMP_ERR_INVALID_ARG, "argument 't'");
    CHECK_FAILS(amp_tensor_get_grad(NULL, &t), AMP_ERR_INVALID_ARG, "argument 't'");
    CHECK_FAILS(amp_tensor_get_grad(x, NULL), AMP_ERR_INVALID_ARG, "argument 'out'");
    amp_rng_state st;
    CHECK_FAILS(amp_rng_get_state(NULL, &st), AMP_ERR_INVALID_ARG, "argument 'ctx'");
    CHECK_FAILS(amp_rng_set_state(ctx, NULL), AMP_ERR_INVALID_ARG, "argument 'state'");

    amp_model *m = NULL;
    CHECK_FAILS(amp_seq_create(NULL, &m), AMP_ERR_INVALID_ARG, "argument 'ctx'");
    CHECK_FAILS(amp_seq_create(ctx, NULL), AMP_ERR_INVALID_ARG, "argument 'out'");
    CHECK_FAILS(amp_seq_add_linear(NULL, "fc", 3, 4, true), AMP_ERR_INVALID_ARG, "argument 'm'");
    CHECK_FAILS(amp_seq_add_relu(NULL, NULL), AMP_ERR_INVALID_ARG, "argument 'm'");
    CHECK_FAILS(amp_model_build(NULL), AMP_ERR_INVALID_ARG, "amp_model_build: argument 'm'");
    CHECK_FAILS(amp_model_convnet_mnist(ctx, NULL), AMP_ERR_INVALID_ARG, "argument 'out'");
    m = (amp_model *)&m;
    CHECK_FAILS(amp_model_convnet_mnist(NULL, &m), AMP_ERR_INVALID_ARG, "argument 'ctx'");
    CHECK(m == NULL);
    CHECK_OK(amp_model_mlp_mnist(ctx, &m));
    CHECK_FAILS(amp_model_forward(NULL, x4, &y), AMP_ERR_INVALID_ARG, "amp_model_forward: argument 'm'");
    CHECK_FAILS(amp_model_forward(m, NULL, &y), AMP_ERR_INVALID_ARG, "amp_model_forward: argument 'x'");
    CHECK_FAILS(amp_model_forward(m, x4, NULL), AMP_ERR_INVALID_ARG, "amp_model_forward: argument 'out'");
    CHECK_FAILS(amp_model_find(NULL, "fc1.weight", &t), AMP_ERR_INVALID_ARG, "argument 'm'");
    CHECK_FAILS(amp_model_find(m, NULL, &t), AMP_ERR_INVALID_ARG, "argument 'name'");
    CHECK_FAILS(amp_model_find(m, "fc1.weight", NULL), AMP_ERR_INVALID_ARG, "argument 'out'");
    CHECK(amp_model_param(m, -1) == NULL && amp_model_param(m, 6) == NULL);
    CHECK(amp_model_param_name(m, 99) == NULL && amp_model_buffer(m, 0) == NULL);
    amp_model_free(m);

    /* NULL is a no-op for the frees and resets, as free(NULL). */
    amp_tensor_free(NULL);
    amp_model_free(NULL);
    amp_ctx_free(NULL);
    amp_tensor_zero_grad(NULL);
    amp_ctx_reset_step(NULL);
    /* No options: defaults (AMP_DEVICE_AUTO falls back to the CPU without a GPU). */
    CHECK_OK(amp_ctx_create(NULL, &c2));
    amp_ctx_free(c2);
}

static void test_status_strings(void) {
    const amp_status all[] = {AMP_OK, AMP_ERR_INVALID_ARG, AMP_ERR_SHAPE, AMP_ERR_DTYPE,
                              AMP_ERR_OOM, AMP_ERR_IO, AMP_ERR_FORMAT, AMP_ERR_UNSUPPORTED,
                              AMP_ERR_BACKEND, AMP_ERR_STATE, AMP_ERR_NO_DEVICE};
    int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n; i++) {
        CHECK(amp_status_str(all[i]) != NULL && strcmp(amp_status_str(all[i]), "unknown status") != 0);
        for (int j = 0; j < i; j++) CHECK(strcmp(amp_status_str(all[i]), amp_status_str(all[j])) != 0);
    }
    CHECK(strcmp(amp_status_str((amp_status)5), "unknown status") == 0);
}

static void test_tensor_creation(amp_ctx *ctx) {
    amp_tensor *t = (amp_tensor *)&t;
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 9, (const int64_t[]){1, 2, 3, 4, 5, 1, 1, 1, 1}, &t),
                AMP_ERR_SHAPE, "ndim 9 is outside 1..8");
    CHECK(t == NULL); /* *out is cleared on failure */
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 0, (const int64_t[]){1}, &t), AMP_ERR_SHAPE, "ndim 0");
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 3, (const int64_t[]){2, 0, 3}, &t), AMP_ERR_SHAPE,
                "dimension 1 is 0");
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){-3}, &t), AMP_ERR_SHAPE,
                "dimension 0 is -3");
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){INT64_MAX / 2, 4}, &t),
                AMP_ERR_SHAPE, "overflows");
    CHECK_FAILS(amp_tensor_create(ctx, (amp_dtype)7, 1, (const int64_t[]){4}, &t), AMP_ERR_DTYPE,
                "unknown dtype 7");
    /* 4 EiB cannot be had: OOM, not a crash (under ASan run with allocator_may_return_null=1). */
    CHECK_FAILS(amp_tensor_create(ctx, AMP_F32, 1, (const int64_t[]){(int64_t)1 << 60}, &t), AMP_ERR_OOM,
                "amp_tensor_create");
    CHECK(t == NULL);
    amp_tensor *x = MK(AMP_F32, 2, 3);
    float host[8];
    CHECK_FAILS(amp_tensor_to_host(x, host, 20), AMP_ERR_SHAPE, "buffer of 20 bytes for a tensor of 24 bytes");
    CHECK_FAILS(amp_tensor_to_host(x, host, 32), AMP_ERR_SHAPE, "buffer of 32 bytes");
    CHECK_FAILS(amp_tensor_copy_from_host(x, host, 16), AMP_ERR_SHAPE, "buffer of 16 bytes");
    CHECK_OK(amp_tensor_to_host(x, host, 24)); /* and the right count still works */
    CHECK(host[1] == 0.1f * 1 - 0.25f);

    /* A half tensor read into floats: the message names the dtype and the call that converts. */
    amp_tensor *h = NULL;
    CHECK_OK(amp_cast(x, AMP_F16, &h));
    CHECK_FAILS(amp_tensor_to_host(h, host, 24), AMP_ERR_SHAPE,
                "tensor of 12 bytes (6 elements of f16, 2 bytes each, shape [2, 3]): "
                "amp_tensor_to_host_f32 reads it into floats");
    float wide[6];
    CHECK_FAILS(amp_tensor_to_host_f32(h, wide, 12), AMP_ERR_SHAPE, "want 24 bytes");
    /* to_host_f32: every dtype into floats, exactly for the halves (0.1 i - 0.25 is not exact in
     * f16: the f16 rounding of the f32 value), i32 converted. */
    const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    for (int k = 0; k < 3; k++) {
        amp_tensor *c = NULL;
        CHECK_OK(amp_cast(x, dts[k], &c));
        CHECK_OK(amp_tensor_to_host_f32(c, wide, sizeof wide));
        int bad = 0;
        for (int i = 0; i < 6; i++) {
            float v = 0.1f * (float)(i % 7) - 0.25f;
            float want = dts[k] == AMP_F16    ? amp_f16_bits_to_f32(amp_f32_to_f16_bits(v))
                         : dts[k] == AMP_BF16 ? amp_bf16_bits_to_f32(amp_f32_to_bf16_bits(v))
                                              : v;
            bad += wide[i] != want;
        }
        CHECK_MSG(bad == 0, "amp_tensor_to_host_f32 of %s: %d values wrong", amp_dtype_name(dts[k]),
                  bad);
    }
    int32_t ids[4] = {-3, 0, 7, 1 << 20};
    amp_tensor *it = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){4}, ids, &it));
    CHECK_OK(amp_tensor_to_host_f32(it, wide, 4 * sizeof(float)));
    CHECK(wide[0] == -3.0f && wide[1] == 0.0f && wide[2] == 7.0f && wide[3] == 1048576.0f);
    amp_tensor_free(it);
    amp_ctx_reset_step(ctx);
}

static void test_shapes(amp_ctx *ctx) {
    amp_tensor *y;
    CHECK_FAILS(amp_linear(MK(AMP_F32, 4, 6), MK(AMP_F32, 5, 7), NULL, &y), AMP_ERR_SHAPE,
                "in_features differ (6 vs 7)");
    CHECK_FAILS(amp_linear(MK(AMP_F32, 2, 3, 4), MK(AMP_F32, 5, 3), NULL, &y), AMP_ERR_SHAPE,
                "amp_linear: x [2, 3, 4] and w [5, 3]: in_features differ (4 vs 3)");
    CHECK_FAILS(amp_linear(MK(AMP_F32, 4, 6), MK(AMP_F32, 5, 6), MK(AMP_F32, 4), &y), AMP_ERR_SHAPE,
                "b has 4 elements, w has 5 output features");
    CHECK_FAILS(amp_matmul(MK(AMP_F32, 3, 4), MK(AMP_F32, 5, 2), &y), AMP_ERR_SHAPE,
                "a [3, 4] @ b [5, 2]: the inner dimensions or the batch dims differ");
    CHECK_FAILS(amp_conv2d(MK(AMP_F32, 1, 3, 8, 8), MK(AMP_F32, 4, 2, 3, 3), NULL, 1, 0, &y),
                AMP_ERR_SHAPE, "has 3 channels, w [4, 2, 3, 3] expects 2");
    CHECK_FAILS(amp_conv2d(MK(AMP_F32, 1, 1, 2, 2), MK(AMP_F32, 1, 1, 5, 5), NULL, 1, 0, &y),
                AMP_ERR_SHAPE, "kernel 5x5 is larger than the padded input 2x2");
    CHECK_FAILS(amp_conv2d(MK(AMP_F32, 1, 2, 6, 6), MK(AMP_F32, 4, 2, 3, 3), MK(AMP_F32, 3), 1, 0, &y),
                AMP_ERR_SHAPE, "b has 3 elements, w has 4 output channels");
    CHECK_FAILS(amp_conv2d(MK(AMP_F32, 2, 6, 6), MK(AMP_F32, 4, 2, 3, 3), NULL, 1, 0, &y),
                AMP_ERR_SHAPE, "x has shape [2, 6, 6], want 4 dimensions");
    CHECK_FAILS(amp_add(MK(AMP_F32, 2, 3), MK(AMP_F32, 3, 2), &y), AMP_ERR_SHAPE,
                "amp_add: a [2, 3] and b [3, 2] do not broadcast");
    CHECK_FAILS(amp_add(MK(AMP_F32, 6), MK(AMP_F32, 2, 3), &y), AMP_ERR_SHAPE, "a [6] and b [2, 3]");
    CHECK_FAILS(amp_mul(MK(AMP_F32, 2, 3), MK(AMP_F32, 2, 4), &y), AMP_ERR_SHAPE, "amp_mul: a [2, 3]");
    CHECK_FAILS(amp_mse_loss(MK(AMP_F32, 4), MK(AMP_F32, 5), &y), AMP_ERR_SHAPE,
                "amp_mse_loss: a [4] and b [5] differ");
    CHECK_FAILS(amp_cross_entropy(MK(AMP_F32, 4, 10), MK(AMP_I32, 3), &y), AMP_ERR_SHAPE,
                "3 labels for 4 rows");
    CHECK_FAILS(amp_cross_entropy(MK(AMP_F32, 40), MK(AMP_I32, 4), &y), AMP_ERR_SHAPE,
                "logits has shape [40], want 2 dimensions");
    amp_tensor *c3 = MK(AMP_F32, 3), *c4 = MK(AMP_F32, 4), *x4 = MK(AMP_F32, 2, 4, 3, 3);
    CHECK_FAILS(amp_batchnorm2d(x4, c3, c4, c4, c4, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "gamma has 3 elements, want 4 (one per channel)");
    CHECK_FAILS(amp_batchnorm2d(x4, c4, c4, c4, c3, true, 0.1f, 1e-5f, &y), AMP_ERR_SHAPE,
                "running_var has 3 elements, want 4");
    CHECK_FAILS(amp_batchnorm2d(MK(AMP_F32, 4, 5), c4, c4, c4, c4, true, 0.1f, 1e-5f, &y),
                AMP_ERR_SHAPE, "x has shape [4, 5], want 4 dimensions");
    CHECK_FAILS(amp_batchnorm2d(MK(AMP_F32, 1, 4, 1, 1), c4, c4, c4, c4, true, 0.1f, 1e-5f, &y),
                AMP_ERR_SHAPE, "more than 1 value per channel");
    CHECK_FAILS(amp_maxpool2d(MK(AMP_F32, 1, 1, 2, 2), 3, 1, 0, &y), AMP_ERR_SHAPE,
                "window 3 is larger than the input 2x2");
    CHECK_FAILS(amp_maxpool2d(MK(AMP_F32, 1, 4, 4), 2, 2, 0, &y), AMP_ERR_SHAPE, "want 4 dimensions");
    CHECK_FAILS(amp_reshape(MK(AMP_F32, 2, 3), 2, (const int64_t[]){4, 2}, &y), AMP_ERR_SHAPE,
                "has 6 elements, the new shape 8");
    CHECK_FAILS(amp_reshape(MK(AMP_F32, 2, 3), 9, (const int64_t[]){1, 1, 2, 3, 1, 1, 1, 1, 1}, &y),
                AMP_ERR_SHAPE, "ndim 9");
    amp_ctx_reset_step(ctx);
}

static void test_dtypes(amp_ctx *ctx) {
    amp_tensor *y;
    CHECK_FAILS(amp_cross_entropy(MK(AMP_I32, 4, 10), MK(AMP_I32, 4), &y), AMP_ERR_DTYPE,
                "logits has dtype i32");
    CHECK_FAILS(amp_cross_entropy(MK(AMP_F32, 4, 10), MK(AMP_F32, 4), &y), AMP_ERR_DTYPE,
                "labels have dtype f32, want i32");
    CHECK_FAILS(amp_linear(MK(AMP_F32, 4, 6), MK(AMP_F16, 5, 6), NULL, &y), AMP_ERR_DTYPE,
                "inputs have dtypes f32 and f16");
    /* Elementwise ops promote like PyTorch (f32 wins; f16 with bf16 gives f32); losses run in f32. */
    CHECK_OK(amp_add(MK(AMP_F32, 3), MK(AMP_BF16, 3), &y));
    CHECK(y->dtype == AMP_F32);
    CHECK_OK(amp_mul(MK(AMP_F16, 3), MK(AMP_BF16, 3), &y));
    CHECK(y->dtype == AMP_F32);
    CHECK_OK(amp_mse_loss(MK(AMP_BF16, 3), MK(AMP_F16, 3), &y));
    CHECK(y->dtype == AMP_F32);
    CHECK_FAILS(amp_conv2d(MK(AMP_F16, 1, 2, 4, 4), MK(AMP_F32, 2, 2, 3, 3), NULL, 1, 0, &y),
                AMP_ERR_DTYPE, "dtypes f16 and f32");
    CHECK_FAILS(amp_matmul(MK(AMP_I32, 3, 4), MK(AMP_I32, 4, 2), &y), AMP_ERR_DTYPE, "a has dtype i32");
    CHECK_FAILS(amp_relu(MK(AMP_I32, 3), &y), AMP_ERR_DTYPE, "amp_relu: x has dtype i32");
    CHECK_FAILS(amp_mean(MK(AMP_I32, 3), &y), AMP_ERR_DTYPE, "amp_mean: x has dtype i32");
    CHECK_FAILS(amp_dropout(MK(AMP_I32, 3), 0.5f, true, &y), AMP_ERR_DTYPE, "amp_dropout: x has dtype i32");
    CHECK_FAILS(amp_maxpool2d(MK(AMP_I32, 1, 1, 4, 4), 2, 2, 0, &y), AMP_ERR_DTYPE, "x has dtype i32");
    CHECK_FAILS(amp_batchnorm2d(MK(AMP_I32, 2, 1, 2, 2), MK(AMP_F32, 1), MK(AMP_F32, 1), MK(AMP_F32, 1),
                                MK(AMP_F32, 1), true, 0.1f, 1e-5f, &y), AMP_ERR_DTYPE, "x has dtype i32");
    CHECK_FAILS(amp_tensor_set_requires_grad(MK(AMP_I32, 3), true), AMP_ERR_DTYPE,
                "i32 tensors have no gradient");
    /* A half bias or batch-norm vector (a half model's) is widened to f32; an i32 one is an error. */
    CHECK_OK(amp_linear(MK(AMP_F32, 4, 6), MK(AMP_F32, 5, 6), MK(AMP_F16, 5), &y));
    CHECK_FAILS(amp_linear(MK(AMP_F32, 4, 6), MK(AMP_F32, 5, 6), MK(AMP_I32, 5), &y), AMP_ERR_DTYPE,
                "b has dtype i32, want f32");
    CHECK_FAILS(amp_conv2d(MK(AMP_F32, 1, 2, 4, 4), MK(AMP_F32, 2, 2, 3, 3), MK(AMP_I32, 2), 1, 0, &y),
                AMP_ERR_DTYPE, "amp_conv2d: b has dtype i32, want f32");
    amp_tensor *c2 = MK(AMP_F32, 2);
    CHECK_OK(amp_batchnorm2d(MK(AMP_F32, 2, 2, 2, 2), MK(AMP_BF16, 2), c2, c2, c2, true, 0.1f, 1e-5f, &y));
    CHECK_FAILS(amp_batchnorm2d(MK(AMP_F32, 2, 2, 2, 2), MK(AMP_I32, 2), c2, c2, c2, true, 0.1f, 1e-5f, &y),
                AMP_ERR_DTYPE, "gamma has dtype i32, want f32");
    amp_ctx_reset_step(ctx);
}

static void test_options(amp_ctx *ctx) {
    amp_tensor *y, *x4 = MK(AMP_F32, 2, 2, 6, 6), *w4 = MK(AMP_F32, 3, 2, 3, 3), *c2 = MK(AMP_F32, 2);
    CHECK_FAILS(amp_conv2d(x4, w4, NULL, 0, 0, &y), AMP_ERR_INVALID_ARG, "stride 0 must be >= 1");
    CHECK_FAILS(amp_conv2d(x4, w4, NULL, -2, 0, &y), AMP_ERR_INVALID_ARG, "stride -2");
    CHECK_FAILS(amp_conv2d(x4, w4, NULL, 1, -1, &y), AMP_ERR_INVALID_ARG, "padding -1");
    CHECK_FAILS(amp_maxpool2d(x4, 2, 2, 2, &y), AMP_ERR_INVALID_ARG, "padding 2");
    CHECK_FAILS(amp_maxpool2d(x4, 3, 2, 2, &y), AMP_ERR_INVALID_ARG, "padding 2");
    CHECK_FAILS(amp_maxpool2d(x4, 0, 2, 0, &y), AMP_ERR_INVALID_ARG, "kernel 0");
    CHECK_FAILS(amp_maxpool2d(x4, 2, 0, 0, &y), AMP_ERR_INVALID_ARG, "stride 0");
    CHECK_FAILS(amp_maxpool2d(x4, 2, 2, -1, &y), AMP_ERR_INVALID_ARG, "padding -1");
    CHECK_FAILS(amp_dropout(x4, 1.0f, true, &y), AMP_ERR_INVALID_ARG, "p = 1, want 0 <= p < 1");
    CHECK_FAILS(amp_dropout(x4, -0.1f, true, &y), AMP_ERR_INVALID_ARG, "p = -0.1");
    CHECK_FAILS(amp_dropout(x4, NAN, true, &y), AMP_ERR_INVALID_ARG, "p = nan");
    CHECK_FAILS(amp_dropout(x4, 1.0f, false, &y), AMP_ERR_INVALID_ARG, "p = 1"); /* also in eval */
    CHECK_FAILS(amp_batchnorm2d(x4, c2, c2, c2, c2, true, 0.1f, 0.0f, &y), AMP_ERR_INVALID_ARG,
                "eps 0 must be > 0");
    CHECK_FAILS(amp_batchnorm2d(x4, c2, c2, c2, c2, true, 0.1f, -1e-5f, &y), AMP_ERR_INVALID_ARG, "eps -1e-05");
    CHECK_FAILS(amp_batchnorm2d(x4, c2, c2, c2, c2, true, 0.1f, NAN, &y), AMP_ERR_INVALID_ARG, "eps nan");
    CHECK_FAILS(amp_batchnorm2d(x4, c2, c2, c2, c2, true, 1.5f, 1e-5f, &y), AMP_ERR_INVALID_ARG,
                "momentum 1.5");
    CHECK_FAILS(amp_batchnorm2d(x4, c2, c2, c2, c2, false, -0.5f, 1e-5f, &y), AMP_ERR_INVALID_ARG,
                "momentum -0.5");
    amp_ctx *c = (amp_ctx *)&c;
    CHECK_FAILS(amp_ctx_create(&(amp_ctx_opts){.device = (amp_device)7}, &c), AMP_ERR_INVALID_ARG,
                "unknown device 7");
    CHECK(c == NULL);
    CHECK_FAILS(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .n_threads = -2}, &c),
                AMP_ERR_INVALID_ARG, "n_threads -2");
    amp_status s = amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CUDA}, &c);
    if (s == AMP_OK) amp_ctx_free(c); /* a machine with a GPU */
    else CHECK_FAILS(s, AMP_ERR_NO_DEVICE, "device CUDA was asked for");
    amp_ctx_reset_step(ctx);
}

static void test_autograd_misuse(amp_ctx *ctx) {
    amp_tensor *x = MKG(AMP_F32, 2, 3), *plain = MK(AMP_F32, 2, 3), *y, *loss, *g;
    CHECK_FAILS(amp_tensor_get_grad(x, &g), AMP_ERR_STATE, "no gradient since the last zero_grad");
    CHECK_OK(amp_relu(x, &y));
    CHECK_FAILS(amp_backward(y), AMP_ERR_SHAPE, "loss has 6 elements, want 1");
    CHECK_FAILS(amp_tensor_set_requires_grad(y, false), AMP_ERR_STATE, "only leaf tensors");
    /* The failed backward left the graph whole: the real loss still back-propagates. */
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_backward(loss));
    float gx[6], xv[6];
    CHECK_OK(amp_tensor_get_grad(x, &g));
    CHECK_OK(amp_tensor_to_host(g, gx, sizeof gx));
    CHECK_OK(amp_tensor_to_host(x, xv, sizeof xv));
    for (int i = 0; i < 6; i++) CHECK(gx[i] == (xv[i] > 0 ? 1.0f / 6 : 0.0f));
    /* A second backward through the same graph is an error, as in PyTorch ("Trying to backward
     * through the graph a second time"), and it leaves the gradient alone. */
    CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "amp_backward");
    CHECK_OK(amp_tensor_to_host(g, xv, sizeof xv));
    CHECK(memcmp(gx, xv, sizeof gx) == 0);
    /* A loss no grad-requiring tensor reached, and one computed with grads disabled. */
    CHECK_OK(amp_mean(plain, &loss));
    CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "loss does not require grad");
    CHECK(amp_set_grad_enabled(ctx, false) == true);
    CHECK_OK(amp_mean(x, &loss));
    CHECK(amp_set_grad_enabled(ctx, true) == false);
    CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "does not require grad");
    /* Eval-mode batch norm runs with grads on (as model.eval() in PyTorch), but a backward that
     * reaches it is refused (nn/ops_norm.c); with grads off nothing is recorded. */
    amp_tensor *x4 = MKG(AMP_F32, 2, 2, 3, 3), *gm = MKG(AMP_F32, 2), *bt = MKG(AMP_F32, 2);
    amp_tensor *rm = MK(AMP_F32, 2), *rv = MK(AMP_F32, 2);
    CHECK_OK(amp_batchnorm2d(x4, gm, bt, rm, rv, false, 0.1f, 1e-5f, &y));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_FAILS(amp_backward(loss), AMP_ERR_UNSUPPORTED, "eval-mode batch norm");
    amp_set_grad_enabled(ctx, false);
    CHECK_OK(amp_batchnorm2d(x4, gm, bt, rm, rv, false, 0.1f, 1e-5f, &y));
    amp_set_grad_enabled(ctx, true);
    /* Tensors of two contexts do not mix. */
    amp_ctx *other;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &other));
    amp_tensor *z = NULL;
    CHECK_OK(amp_tensor_create(other, AMP_F32, 2, (const int64_t[]){2, 3}, &z));
    CHECK_FAILS(amp_add(x, z, &y), AMP_ERR_INVALID_ARG, "different contexts");
    CHECK_FAILS(amp_matmul(MK(AMP_F32, 3, 2), z, &y), AMP_ERR_INVALID_ARG, "different contexts");
    amp_tensor_free(z);
    amp_ctx_free(other);
    amp_ctx_reset_step(ctx);
}

/* amp_accumulate: a running sum across steps (acc survives amp_ctx_reset_step), nothing
 * recorded, and its arguments checked. */
static void test_accumulate(amp_ctx *ctx) {
    amp_tensor *acc = MK(AMP_F32, 1), *x = MKG(AMP_F32, 2, 3), *loss = NULL;
    const float zero = 0.0f;
    CHECK_OK(amp_tensor_copy_from_host(acc, &zero, sizeof zero));
    float want = 0.0f, got = -1.0f;
    for (int step = 0; step < 3; step++) {
        CHECK_OK(amp_mean(x, &loss));
        float v = 0.0f;
        CHECK_OK(amp_tensor_item(loss, &v));
        want += v;
        CHECK_OK(amp_accumulate(acc, loss));
        CHECK_OK(amp_backward(loss)); /* the tape holds the mean only: accumulate is not on it */
        amp_ctx_reset_step(ctx);
    }
    CHECK_OK(amp_tensor_item(acc, &got));
    CHECK_MSG(got == want, "accumulated %g, want %g", (double)got, (double)want);
    CHECK_OK(amp_mean(x, &loss));
    CHECK_FAILS(amp_accumulate(NULL, loss), AMP_ERR_INVALID_ARG, "acc");
    CHECK_FAILS(amp_accumulate(acc, NULL), AMP_ERR_INVALID_ARG, "x");
    CHECK_FAILS(amp_accumulate(acc, x), AMP_ERR_SHAPE, "differ in shape");
    CHECK_FAILS(amp_accumulate(MK(AMP_I32, 1), MK(AMP_I32, 1)), AMP_ERR_DTYPE, "i32");
    CHECK_FAILS(amp_accumulate(MK(AMP_F16, 1), loss), AMP_ERR_DTYPE, "f16");
    amp_ctx_reset_step(ctx);
}

/* A label outside [0, classes) is found by the kernel; the message names it and its row. */
static void test_label_out_of_range(amp_ctx *ctx) {
    amp_tensor *logits = MKG(AMP_F32, 3, 10), *lab, *loss;
    const int64_t n3[1] = {3};
    int n_tape = ctx->n_tape;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, n3, (const int32_t[]){1, 10, 2}, &lab));
    CHECK_FAILS(amp_cross_entropy(logits, lab, &loss), AMP_ERR_INVALID_ARG, "label 10 of row 1");
    CHECK(ctx->n_tape == n_tape); /* nothing recorded */
    int32_t neg[3] = {-1, 0, 0};
    CHECK_OK(amp_tensor_copy_from_host(lab, neg, sizeof neg));
    CHECK_FAILS(amp_cross_entropy(logits, lab, &loss), AMP_ERR_INVALID_ARG, "label -1 of row 0");
    /* Valid labels now: the same tensors work, and backward gives softmax - onehot over rows. */
    int32_t ok[3] = {1, 9, 0};
    CHECK_OK(amp_tensor_copy_from_host(lab, ok, sizeof ok));
    CHECK_OK(amp_cross_entropy(logits, lab, &loss));
    CHECK_OK(amp_backward(loss));
    amp_tensor *g;
    float z[30], gz[30];
    CHECK_OK(amp_tensor_get_grad(logits, &g));
    CHECK_OK(amp_tensor_to_host(g, gz, sizeof gz));
    CHECK_OK(amp_tensor_to_host(logits, z, sizeof z));
    for (int r = 0; r < 3; r++) {
        double s = 0;
        for (int j = 0; j < 10; j++) s += exp(z[r * 10 + j]);
        for (int j = 0; j < 10; j++) {
            double want = (exp(z[r * 10 + j]) / s - (j == ok[r])) / 3.0;
            CHECK_MSG(fabs(gz[r * 10 + j] - want) < 1e-6, "dlogits[%d][%d] %g want %g", r, j,
                      (double)gz[r * 10 + j], want);
        }
    }
    amp_tensor_free(lab);
    amp_ctx_reset_step(ctx);
}

static void test_model_misuse(amp_ctx *ctx) {
    amp_model *m;
    amp_tensor *t = NULL, *y;
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_FAILS(amp_model_build(m), AMP_ERR_STATE, "no layers");
    CHECK_FAILS(amp_model_find(m, "0.weight", &t), AMP_ERR_STATE, "not built");
    CHECK_FAILS(amp_seq_add_linear(m, "fc", 0, 4, true), AMP_ERR_INVALID_ARG, "in = 0");
    CHECK_FAILS(amp_seq_add_linear(m, "fc", 3, -1, true), AMP_ERR_INVALID_ARG, "out = -1");
    CHECK_FAILS(amp_seq_add_conv2d(m, "c", 1, 2, 0, 1, 0, true), AMP_ERR_INVALID_ARG, "kernel = 0");
    CHECK_FAILS(amp_seq_add_conv2d(m, "c", 1, 2, 3, 0, 0, true), AMP_ERR_INVALID_ARG, "stride = 0");
    CHECK_FAILS(amp_seq_add_conv2d(m, "c", 1, 2, 3, 1, -1, true), AMP_ERR_INVALID_ARG, "padding -1");
    CHECK_FAILS(amp_seq_add_batchnorm2d(m, "bn", 0), AMP_ERR_INVALID_ARG, "c = 0");
    CHECK_FAILS(amp_seq_add_maxpool2d(m, "pool", 2, 0), AMP_ERR_INVALID_ARG, "stride = 0");
    CHECK_FAILS(amp_seq_add_dropout(m, "drop", 1.0f), AMP_ERR_INVALID_ARG, "p = 1");
    char long_name[80];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    CHECK_FAILS(amp_seq_add_relu(m, long_name), AMP_ERR_INVALID_ARG, "layer name must have 1..63");
    CHECK_FAILS(amp_seq_add_relu(m, ""), AMP_ERR_INVALID_ARG, "layer name");
    /* None of the failures added a layer: the model is the two good layers only. */
    CHECK_OK(amp_seq_add_linear(m, NULL, 3, 4, true));
    CHECK_OK(amp_seq_add_relu(m, NULL));
    CHECK_OK(amp_model_build(m));
    CHECK(amp_model_n_params(m) == 2 && strcmp(amp_model_param_name(m, 0), "0.weight") == 0);
    CHECK_FAILS(amp_seq_add_relu(m, NULL), AMP_ERR_STATE, "already built");
    CHECK_FAILS(amp_model_find(m, "nope.weight", &t), AMP_ERR_INVALID_ARG, "'nope.weight'");
    CHECK(t == NULL);
    amp_model_free(m);

    /* The ConvNet: a wrong input names the layer; a good forward afterwards works. */
    CHECK_OK(amp_model_convnet_mnist(ctx, &m));
    CHECK_FAILS(amp_model_forward(m, MK(AMP_F32, 2, 3, 28, 28), &y), AMP_ERR_SHAPE,
                "layer 'layer1.0': amp_conv2d: x [2, 3, 28, 28] has 3 channels");
    CHECK_FAILS(amp_model_forward(m, MK(AMP_F32, 2, 1, 32, 32), &y), AMP_ERR_SHAPE, "layer 'fc'");
    CHECK_FAILS(amp_model_forward(m, MK(AMP_F32, 2, 28, 28), &y), AMP_ERR_SHAPE, "layer 'layer1.0'");
    CHECK_OK(amp_model_forward(m, MK(AMP_F32, 2, 1, 28, 28), &y));
    CHECK(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 10);
    amp_ctx *other;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &other));
    amp_tensor *z = NULL;
    CHECK_OK(amp_tensor_create(other, AMP_F32, 4, (const int64_t[]){1, 1, 28, 28}, &z));
    CHECK_FAILS(amp_model_forward(m, z, &y), AMP_ERR_INVALID_ARG, "another context");
    amp_tensor_free(z);
    amp_ctx_free(other);
    /* Eval mode with grads on: the forward runs; a backward through eval batch norm is refused. */
    amp_model_train(m, false);
    CHECK_OK(amp_model_forward(m, MK(AMP_F32, 2, 1, 28, 28), &y));
    amp_tensor *eval_loss = NULL;
    CHECK_OK(amp_mean(y, &eval_loss));
    CHECK_FAILS(amp_backward(eval_loss), AMP_ERR_UNSUPPORTED, "eval-mode batch norm");
    amp_model_free(m);
    amp_ctx_reset_step(ctx);
}

/* Gradients of a forward + backward are the same whether or not failing calls (ops, backward,
 * a model forward that failed half way) came before it in the same step. */
static void test_failures_leave_no_state(void) {
    float grads[2][2][30];
    for (int run = 0; run < 2; run++) {
        amp_ctx *ctx;
        CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 3}, &ctx));
        amp_tensor *x = MKG(AMP_F32, 4, 6), *w = MKG(AMP_F32, 5, 6), *b = MK(AMP_F32, 5), *y, *loss, *junk;
        CHECK_OK(amp_linear(x, w, b, &y));
        if (run == 1) {
            int n_tape = ctx->n_tape;
            size_t arena = amp_ctx_arena_bytes(ctx, NULL);
            CHECK_FAILS(amp_add(y, MK(AMP_F32, 4, 6), &junk), AMP_ERR_SHAPE, "amp_add");
            CHECK_FAILS(amp_backward(y), AMP_ERR_SHAPE, "amp_backward");
            CHECK_FAILS(amp_maxpool2d(y, 2, 2, 0, &junk), AMP_ERR_SHAPE, "amp_maxpool2d");
            CHECK_FAILS(amp_linear(y, w, b, &junk), AMP_ERR_SHAPE, "in_features");
            amp_tensor *lab = NULL;
            CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){4},
                                          (const int32_t[]){0, 1, 7, 2}, &lab));
            CHECK_FAILS(amp_cross_entropy(y, lab, &junk), AMP_ERR_INVALID_ARG, "label 7");
            amp_tensor_free(lab);
            CHECK(ctx->n_tape == n_tape);
            /* Validation failures allocate nothing; the kernel failure left its step outputs. */
            CHECK(amp_ctx_arena_bytes(ctx, NULL) >= arena);
        }
        CHECK_OK(amp_mean(y, &loss));
        CHECK_OK(amp_backward(loss));
        amp_tensor *g;
        CHECK_OK(amp_tensor_get_grad(x, &g));
        CHECK_OK(amp_tensor_to_host(g, grads[run][0], 24 * sizeof(float)));
        CHECK_OK(amp_tensor_get_grad(w, &g));
        CHECK_OK(amp_tensor_to_host(g, grads[run][1], 30 * sizeof(float)));
        for (int i = 0; i < n_owned; i++) amp_tensor_free(owned[i]);
        n_owned = 0;
        amp_ctx_free(ctx);
    }
    CHECK(memcmp(grads[0][0], grads[1][0], 24 * sizeof(float)) == 0);
    CHECK(memcmp(grads[0][1], grads[1][1], 30 * sizeof(float)) == 0);
    /* And they are right: loss = mean(y[4, 5]), so dw[o][k] = sum_i x[i][k] / 20. */
    float xv[24];
    for (int i = 0; i < 24; i++) xv[i] = 0.1f * (float)(i % 7) - 0.25f;
    for (int o = 0; o < 5; o++)
        for (int k = 0; k < 6; k++) {
            double want = 0;
            for (int i = 0; i < 4; i++) want += xv[i * 6 + k] / 20.0;
            CHECK(fabs(grads[0][1][o * 6 + k] - want) < 1e-6);
        }

    /* A model forward that fails at its last layer, then a good one: same gradients as a model
     * (same seed) that only ran the good one. */
    float w1_grad[2][400]; /* layer1.0.weight: the gradient went through every layer */
    for (int run = 0; run < 2; run++) {
        amp_ctx *ctx;
        CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 4}, &ctx));
        amp_model *m;
        amp_tensor *y, *loss, *g, *w1;
        CHECK_OK(amp_model_convnet_mnist(ctx, &m));
        if (run == 1)
            CHECK_FAILS(amp_model_forward(m, MK(AMP_F32, 2, 1, 32, 32), &y), AMP_ERR_SHAPE, "layer 'fc'");
        CHECK_OK(amp_model_forward(m, MK(AMP_F32, 2, 1, 28, 28), &y));
        CHECK_OK(amp_mean(y, &loss));
        CHECK_OK(amp_backward(loss));
        CHECK_OK(amp_model_find(m, "layer1.0.weight", &w1));
        CHECK_OK(amp_tensor_get_grad(w1, &g));
        CHECK_OK(amp_tensor_to_host(g, w1_grad[run], sizeof w1_grad[run]));
        for (int i = 0; i < n_owned; i++) amp_tensor_free(owned[i]);
        n_owned = 0;
        amp_model_free(m);
        amp_ctx_free(ctx);
    }
    CHECK(memcmp(w1_grad[0], w1_grad[1], sizeof w1_grad[0]) == 0);
}

int main(void) {
    amp_ctx *ctx;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx));
    if (!ctx) return test_summary("test_api_errors");
    test_null_arguments(ctx);
    test_status_strings();
    test_tensor_creation(ctx);
    test_shapes(ctx);
    test_dtypes(ctx);
    test_options(ctx);
    test_autograd_misuse(ctx);
    test_accumulate(ctx);
    test_label_out_of_range(ctx);
    test_model_misuse(ctx);
    for (int i = 0; i < n_owned; i++) amp_tensor_free(owned[i]);
    n_owned = 0;
    amp_ctx_free(ctx);
    test_failures_leave_no_state();
    return test_summary("test_api_errors");
}
