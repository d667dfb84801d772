/* The model API for hand-written models (amp/nn.h): parameters, buffers and children registered
 * by name come out under PyTorch's dotted state_dict names in named_parameters order; a child's
 * accessors answer from the child down; initialisers draw what they say; the forward runs the
 * user's function with its user pointer; a normalisation module stays f32 under O2's
 * keep_batchnorm_fp32; num_batches_tracked of a nested batch norm is found; misuse (duplicate or
 * malformed names, registering after the build, a child twice, a cycle, a child on another
 * context, freeing or optimising a child) is refused with a message and changes nothing. */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/model_internal.h"
#include "test_util.h"

/* A residual block in the manner of torchvision's BasicBlock (without its downsample): its own
 * parameter "scale" (a user parameter, registered first), then children conv1, bn1, conv2, bn2. */
typedef struct block {
    amp_model *conv1, *bn1, *conv2, *bn2;
    int scale;
    int *freed; /* counts free_user calls */
} block;

static void block_free(void *user) {
    block *b = user;
    (*b->freed)++;
    free(b);
}

static amp_status block_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **out) {
    (void)n;
    block *b = amp_model_user(self);
    amp_tensor *h, *skip = in[0];
    AMP_TRY(amp_model_forward(b->conv1, in[0], &h));
    AMP_TRY(amp_model_forward(b->bn1, h, &h));
    AMP_TRY(amp_relu(h, &h));
    AMP_TRY(amp_model_forward(b->conv2, h, &h));
    AMP_TRY(amp_model_forward(b->bn2, h, &h));
    AMP_TRY(amp_add(h, skip, &h));
    return amp_relu(h, out);
}

static amp_model *make_block(amp_ctx *ctx, int64_t c, int *freed) {
    block *b = calloc(1, sizeof *b);
    b->freed = freed;
    amp_model *m = NULL;
    CHECK_OK(amp_model_create(ctx, block_forward, b, block_free, &m));
    int64_t one = c;
    CHECK_OK(amp_model_register_param(m, "scale", 1, &one, AMP_INIT_ONE_VALUES, &b->scale));
    CHECK_OK(amp_module_conv2d(ctx, c, c, 3, 1, 1, false, &b->conv1));
    CHECK_OK(amp_model_add_child(m, "conv1", b->conv1));
    CHECK_OK(amp_module_batchnorm2d(ctx, c, &b->bn1));
    CHECK_OK(amp_model_add_child(m, "bn1", b->bn1));
    CHECK_OK(amp_module_conv2d(ctx, c, c, 3, 1, 1, false, &b->conv2));
    CHECK_OK(amp_model_add_child(m, "conv2", b->conv2));
    CHECK_OK(amp_module_batchnorm2d(ctx, c, &b->bn2));
    CHECK_OK(amp_model_add_child(m, "bn2", b->bn2));
    return m;
}

/* layer1 = Sequential(block, block), then a user head with a "proj" parameter of its own. */
static amp_status net_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **out) {
    (void)n;
    amp_tensor *h;
    AMP_TRY(amp_model_forward(amp_model_child(self, 0), in[0], &h));
    AMP_TRY(amp_flatten(h, &h));
    return amp_linear(h, amp_model_param(self, 0), NULL, out);
}

static const char *const net_param_names[] = {
    "proj", "layer1.0.scale", "layer1.0.conv1.weight", "layer1.0.bn1.weight",
    "layer1.0.bn1.bias", "layer1.0.conv2.weight", "layer1.0.bn2.weight", "layer1.0.bn2.bias",
    "layer1.1.scale", "layer1.1.conv1.weight", "layer1.1.bn1.weight", "layer1.1.bn1.bias",
    "layer1.1.conv2.weight", "layer1.1.bn2.weight", "layer1.1.bn2.bias",
};

static amp_model *make_net(amp_ctx *ctx, int *freed) {
    amp_model *net = NULL, *layer1 = NULL;
    CHECK_OK(amp_model_create(ctx, net_forward, NULL, NULL, &net));
    int64_t ps[2] = {3, 2 * 4 * 4};
    CHECK_OK(amp_model_register_param(net, "proj", 2, ps, AMP_INIT_NORMAL_OF(0.0f, 0.02f), NULL));
    CHECK_OK(amp_seq_create(ctx, &layer1));
    CHECK_OK(amp_seq_add(layer1, NULL, make_block(ctx, 2, freed)));
    CHECK_OK(amp_seq_add(layer1, NULL, make_block(ctx, 2, freed)));
    CHECK_OK(amp_model_add_child(net, "layer1", layer1));
    return net;
}

static void test_names_and_forward(amp_ctx *ctx) {
    int freed = 0;
    amp_model *net = make_net(ctx, &freed);
    CHECK(amp_model_n_params(net) == 15 && amp_model_n_buffers(net) == 8);
    CHECK(amp_model_param(net, 0) == NULL); /* no storage before the build */
    CHECK_OK(amp_model_build(net));
    int n = amp_model_n_params(net);
    CHECK(n == (int)(sizeof net_param_names / sizeof *net_param_names));
    for (int i = 0; i < n; i++)
        CHECK_MSG(!strcmp(amp_model_param_name(net, i), net_param_names[i]), "param %d: %s", i,
                  amp_model_param_name(net, i));
    CHECK(!strcmp(amp_model_buffer_name(net, 0), "layer1.0.bn1.running_mean"));
    CHECK(!strcmp(amp_model_buffer_name(net, 7), "layer1.1.bn2.running_var"));
    /* A child answers from itself down, its own entries first. */
    amp_model *layer1 = amp_model_child(net, 0), *b1 = amp_model_child(layer1, 1);
    CHECK(amp_model_n_params(b1) == 7 && !strcmp(amp_model_param_name(b1, 0), "scale"));
    CHECK(!strcmp(amp_model_param_name(b1, 1), "conv1.weight"));
    CHECK(!strcmp(amp_model_param_name(layer1, 7), "1.scale"));
    CHECK(amp_model_param(b1, 0) == amp_model_param(net, 8));
    amp_tensor *t = NULL;
    CHECK_OK(amp_model_find(net, "layer1.1.bn2.running_var", &t));
    CHECK(t == amp_model_buffer(net, 7));
    CHECK_OK(amp_model_find(b1, "bn2.running_var", &t));
    CHECK(t == amp_model_buffer(net, 7));
    CHECK(!strcmp(amp_model_name(b1), "1") && !strcmp(amp_model_name(net), ""));
    /* Counters: each batch norm's num_batches_tracked under its dotted name. */
    CHECK(net->n_counters == 4 && !strcmp(net->counters[3].name, "layer1.1.bn2.num_batches_tracked"));

    /* The forward: [2, 2, 4, 4] -> [2, 3]; every batch norm counted one training batch. */
    int64_t xs[4] = {2, 2, 4, 4};
    float xh[64];
    for (int i = 0; i < 64; i++) xh[i] = sinf((float)i);
    amp_tensor *x, *y;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 4, xs, xh, &x));
    CHECK_OK(amp_model_forward(net, x, &y));
    CHECK(amp_tensor_ndim(y) == 2 && amp_tensor_dim(y, 0) == 2 && amp_tensor_dim(y, 1) == 3);
    CHECK(*net->counters[0].value == 1 && *net->counters[3].value == 1);
    /* Eval mode reaches every node. */
    CHECK_OK(amp_model_train(net, false));
    CHECK(!amp_model_is_training(b1) && !amp_model_is_training(amp_model_child(b1, 3)));
    CHECK_OK(amp_model_forward(net, x, &y));
    CHECK(*net->counters[0].value == 1);
    amp_tensor_free(x);
    amp_ctx_reset_step(ctx);
    amp_model_free(net);
    CHECK(freed == 2);
}

/* Initialisers: ones, zeros, U(a, b), N(mean, std) over 4096 draws, torch's default bound, and a
 * caller-filled tensor left zero for the caller. */
static amp_status nothing_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **out) {
    (void)self, (void)n;
    *out = in[0];
    return AMP_OK;
}

static void test_initialisers(amp_ctx *ctx) {
    amp_model *m = NULL;
    CHECK_OK(amp_model_create(ctx, nothing_forward, NULL, NULL, &m));
    int64_t big[2] = {64, 64}, w[2] = {8, 50};
    CHECK_OK(amp_model_register_param(m, "ones", 2, big, AMP_INIT_ONE_VALUES, NULL));
    CHECK_OK(amp_model_register_param(m, "uniform", 2, big, AMP_INIT_UNIFORM_OF(-3.0f, -1.0f), NULL));
    CHECK_OK(amp_model_register_param(m, "normal", 2, big, AMP_INIT_NORMAL_OF(0.5f, 0.02f), NULL));
    CHECK_OK(amp_model_register_param(m, "torch", 2, w, (amp_init){.kind = AMP_INIT_TORCH_DEFAULT}, NULL));
    CHECK_OK(amp_model_register_buffer(m, "mine", 2, w, (amp_init){.kind = AMP_INIT_CALLER}, NULL));
    CHECK_OK(amp_model_build(m));
    static float h[4096];
    CHECK_OK(amp_tensor_to_host(amp_model_param(m, 0), h, sizeof h));
    bool ok = true;
    for (int i = 0; i < 4096; i++) ok &= h[i] == 1.0f;
    CHECK(ok);
    CHECK_OK(amp_tensor_to_host(amp_model_param(m, 1), h, sizeof h));
    ok = true;
    for (int i = 0; i < 4096; i++) ok &= h[i] >= -3.0f && h[i] < -1.0f;
    CHECK(ok);
    CHECK_OK(amp_tensor_to_host(amp_model_param(m, 2), h, sizeof h));
    double s = 0, s2 = 0;
    for (int i = 0; i < 4096; i++) s += h[i], s2 += (double)h[i] * h[i];
    double mean = s / 4096, sd = sqrt(s2 / 4096 - mean * mean);
    /* 4096 draws: the mean within 4 standard errors (0.02/64 each), the std within 5 %. */
    CHECK_MSG(fabs(mean - 0.5) < 4 * 0.02 / 64 && fabs(sd - 0.02) < 0.001, "mean %g sd %g", mean, sd);
    CHECK_OK(amp_tensor_to_host(amp_model_param(m, 3), h, 400 * sizeof *h));
    float bound = 1.0f / sqrtf(50.0f), hi = 0;
    ok = true;
    for (int i = 0; i < 400; i++) ok &= fabsf(h[i]) <= bound, hi = fmaxf(hi, fabsf(h[i]));
    CHECK(ok && hi > 0.8f * bound); /* fan_in = shape[1] = 50 */
    CHECK_OK(amp_tensor_to_host(amp_model_buffer(m, 0), h, 400 * sizeof *h));
    ok = true;
    for (int i = 0; i < 400; i++) ok &= h[i] == 0.0f;
    CHECK(ok);
    amp_model_free(m);
}

/* A user norm module marked with amp_model_set_norm stays f32 under O2 (keep_batchnorm_fp32);
 * the other parameters go to the half type. */
static amp_status scale_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **out) {
    (void)n;
    amp_tensor *h;
    AMP_TRY(amp_linear(in[0], amp_model_param(amp_model_child(self, 0), 0), NULL, &h));
    return amp_mul(h, h, out);
}

static void test_norm_kept_f32(amp_ctx *ctx) {
    amp_model *m = NULL, *norm = NULL, *lin = NULL;
    CHECK_OK(amp_model_create(ctx, scale_forward, NULL, NULL, &m));
    CHECK_OK(amp_model_create(ctx, NULL, NULL, NULL, &norm));
    int64_t c = 4, ws[2] = {4, 4};
    CHECK_OK(amp_model_register_param(norm, "weight", 1, &c, AMP_INIT_ONE_VALUES, NULL));
    CHECK_OK(amp_model_register_buffer(norm, "stat", 1, &c, AMP_INIT_ZERO_VALUES, NULL));
    CHECK_OK(amp_model_set_norm(norm, true));
    CHECK_OK(amp_model_create(ctx, NULL, NULL, NULL, &lin));
    CHECK_OK(amp_model_register_param(lin, "weight", 2, ws, AMP_INIT_TORCH_FAN_IN(4), NULL));
    CHECK_OK(amp_model_add_child(m, "lin", lin));
    CHECK_OK(amp_model_add_child(m, "ln", norm));
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_sgd_create(m, &(amp_sgd_opts){.lr = 0.1f}, &opt));
    CHECK_OK(amp_initialize(m, opt, AMP_O2));
    CHECK(amp_tensor_dtype(amp_model_param(m, 0)) != AMP_F32);
    CHECK(amp_tensor_dtype(amp_model_param(m, 1)) == AMP_F32);
    CHECK(amp_tensor_dtype(amp_model_buffer(m, 0)) == AMP_F32);
    /* A container without a forward cannot be run. */
    amp_tensor *x, *y;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (int64_t[]){2, 4}, &x));
    CHECK_FAILS(amp_model_forward(norm, x, &y), AMP_ERR_STATE, "no forward function");
    amp_tensor_free(x);
    amp_optimizer_free(opt);
    amp_model_free(m);
}

static void test_misuse(amp_ctx *ctx, amp_ctx *other) {
    amp_model *m = NULL, *c = NULL, *d = NULL, *far = NULL;
    int64_t s = 3;
    CHECK_OK(amp_model_create(ctx, nothing_forward, NULL, NULL, &m));
    CHECK_OK(amp_model_register_param(m, "w", 1, &s, AMP_INIT_ZERO_VALUES, NULL));
    CHECK_FAILS(amp_model_register_param(m, "w", 1, &s, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_INVALID_ARG, "already has an entry named 'w'");
    CHECK_FAILS(amp_model_register_buffer(m, "w", 1, &s, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_INVALID_ARG, "named 'w'");
    CHECK_FAILS(amp_model_register_param(m, "a..b", 1, &s, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_INVALID_ARG, "empty dotted part");
    CHECK_FAILS(amp_model_register_param(m, "", 1, &s, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_INVALID_ARG, "1..63 characters");
    CHECK_FAILS(amp_model_register_param(m, "neg", 1, (int64_t[]){0}, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_SHAPE, "");
    CHECK_FAILS(amp_model_register_param(m, "n", 1, &s, AMP_INIT_NORMAL_OF(0.0f, -1.0f), NULL),
                AMP_ERR_INVALID_ARG, "invalid initialiser");
    CHECK_FAILS(amp_model_register_param(m, "u", 1, &s, AMP_INIT_UNIFORM_OF(1.0f, 0.0f), NULL),
                AMP_ERR_INVALID_ARG, "invalid initialiser");
    CHECK_OK(amp_model_create(ctx, nothing_forward, NULL, NULL, &c));
    CHECK_OK(amp_model_create(ctx, nothing_forward, NULL, NULL, &d));
    CHECK_OK(amp_model_create(other, nothing_forward, NULL, NULL, &far));
    CHECK_FAILS(amp_model_add_child(m, "w", c), AMP_ERR_INVALID_ARG, "named 'w'");
    CHECK_FAILS(amp_model_add_child(m, "far", far), AMP_ERR_INVALID_ARG, "another context");
    CHECK_OK(amp_model_add_child(m, "c", c));
    CHECK_FAILS(amp_model_add_child(d, "c", c), AMP_ERR_INVALID_ARG, "belongs to another model");
    CHECK_OK(amp_model_add_child(c, "d", d));
    amp_model *top = NULL;
    CHECK_OK(amp_model_create(ctx, nothing_forward, NULL, NULL, &top));
    CHECK_FAILS(amp_model_add_child(d, "top", m), AMP_ERR_INVALID_ARG, "a cycle");
    CHECK_OK(amp_model_register_param(d, "v", 1, &s, AMP_INIT_ONE_VALUES, NULL));
    /* A child is not freed, optimised or saved on its own. */
    amp_model_free(c);
    CHECK(strstr(amp_last_error(), "belongs to a parent") != NULL);
    amp_optimizer *opt = NULL;
    CHECK_FAILS(amp_sgd_create(c, &(amp_sgd_opts){.lr = 0.1f}, &opt), AMP_ERR_INVALID_ARG,
                "is a child of another model");
    CHECK_FAILS(amp_model_save_weights(d, "/nonexistent/x.safetensors"), AMP_ERR_INVALID_ARG,
                "is a child");
    CHECK_OK(amp_model_build(d)); /* builds its root */
    CHECK(amp_model_n_params(m) == 2 && !strcmp(amp_model_param_name(m, 1), "c.d.v"));
    CHECK_FAILS(amp_model_register_param(d, "late", 1, &s, AMP_INIT_ZERO_VALUES, NULL),
                AMP_ERR_STATE, "is built");
    CHECK_FAILS(amp_model_add_child(m, "top", top), AMP_ERR_STATE, "is built");
    CHECK(amp_model_n_params(m) == 2 && amp_model_n_children(m) == 1);
    amp_model_free(top);
    amp_model_free(m);
    amp_model_free(far);
}

int main(void) {
    amp_ctx *ctx = NULL, *other = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 7}, &ctx));
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 7}, &other));
    test_names_and_forward(ctx);
    test_initialisers(ctx);
    test_norm_kept_f32(ctx);
    test_misuse(ctx, other);
    amp_ctx_free(other);
    amp_ctx_free(ctx);
    return test_summary("test_model_api");
}
