/* A refusal names the public call the user made, never the kernel behind it: bad data that only
 * the kernel sees (a label, an embedding id, a kv_len out of range, a LayerNorm eps below 0)
 * used to read "amp_cross_entropy: amp_cpu_xent_fwd: label ...", "layernorm_fwd: eps = ..." or
 * "amp_cpu_attn_fwd: kv_len ...". Each message must start with the public name, keep the
 * culprit, and carry no backend or entry name. On the CPU, where these checks run at the call
 * (the CUDA backend's deferred record is tests/unit/test_bad_index_record.c's). */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "test_util.h"

#define NAME "test_error_names"

/* The message starts "who: ", holds `culprit` and names no kernel or backend entry. */
static void check_named(amp_status s, const char *who, const char *culprit) {
    const char *m = amp_last_error();
    size_t n = strlen(who);
    CHECK_MSG(s != AMP_OK && strncmp(m, who, n) == 0 && strncmp(m + n, ": ", 2) == 0 &&
                      strstr(m, culprit) && !strstr(m, "amp_cpu_") && !strstr(m, "_fwd") &&
                      !strstr(m, "ln_run"),
              "status %d, message '%s': want '%s: ...%s...' without a kernel's name", (int)s, m,
              who, culprit);
}

static amp_tensor *host_f32(amp_ctx *ctx, int ndim, const int64_t *shape, const float *v) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, ndim, shape, v, &t));
    return t;
}

static amp_tensor *host_i32(amp_ctx *ctx, int64_t n, const int32_t *v) {
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (const int64_t[]){n}, v, &t));
    return t;
}

static void test_cross_entropy(amp_ctx *ctx) {
    float logits[8] = {0};
    amp_tensor *x = host_f32(ctx, 2, (const int64_t[]){2, 4}, logits);
    amp_tensor *lab = host_i32(ctx, 2, (const int32_t[]){0, 9}), *loss = NULL;
    check_named(amp_cross_entropy(x, lab, &loss), "amp_cross_entropy", "label 9 of row 1");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
    amp_tensor_free(lab);
}

static void test_embedding(amp_ctx *ctx) {
    float w[20] = {0};
    amp_tensor *wt = host_f32(ctx, 2, (const int64_t[]){5, 4}, w);
    amp_tensor *idx = host_i32(ctx, 3, (const int32_t[]){0, 9, 1}), *y = NULL;
    check_named(amp_embedding(idx, wt, &y), "amp_embedding", "idx[1] = 9");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(wt);
    amp_tensor_free(idx);
}

static void test_norms(amp_ctx *ctx) {
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    amp_tensor *x = host_f32(ctx, 2, (const int64_t[]){2, 4}, v), *y = NULL;
    check_named(amp_norm(x, NULL, NULL, NULL, &(amp_norm_opts){.eps = -1.0f}, NULL, &y), "amp_norm", "eps = -1");
    check_named(amp_norm(x, NULL, NULL, NULL, &(amp_norm_opts){.kind = AMP_NORM_RMS, .eps = NAN}, NULL, &y), "amp_norm", "eps = nan");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(x);
}

/* kv_len {2, 7} against 4 keys: batch 1 is out of range, in both forms of the call. */
static void test_attention(amp_ctx *ctx) {
    float v[2 * 1 * 4 * 2] = {0}, packed[2 * 4 * 3 * 1 * 2] = {0};
    amp_tensor *q = host_f32(ctx, 4, (const int64_t[]){2, 1, 4, 2}, v);
    amp_tensor *qkv = host_f32(ctx, 5, (const int64_t[]){2, 4, 3, 1, 2}, packed);
    amp_tensor *len = host_i32(ctx, 2, (const int32_t[]){2, 7}), *y = NULL;
    amp_attention_options o = {.kv_len = len};
    check_named(amp_scaled_dot_product_attention(q, q, q, &o, &y),
                "amp_scaled_dot_product_attention", "kv_len");
    check_named(amp_scaled_dot_product_attention_qkvpacked(qkv, &o, &y),
                "amp_scaled_dot_product_attention_qkvpacked", "kv_len");
    amp_ctx_reset_step(ctx);
    amp_tensor_free(q);
    amp_tensor_free(qkv);
    amp_tensor_free(len);
}

int main(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx));
    test_cross_entropy(ctx);
    test_embedding(ctx);
    test_norms(ctx);
    test_attention(ctx);
    amp_ctx_free(ctx);
    return test_summary(NAME);
}
