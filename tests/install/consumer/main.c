/* Links against an installed libamp: creates a CPU context, runs amp_relu on a small tensor and
 * checks each output against max(x, 0), and builds a GPT of models/ from its installed header
 * (the parameter count of nanoGPT's get_num_params). Exits 0 on success. */
#include <stdio.h>

#include "amp/amp.h"
#include "amp/models/gpt.h"

#define N 8

static int fail(const char *what, amp_status s) {
    fprintf(stderr, "consumer: %s: %s: %s\n", what, amp_status_str(s), amp_last_error());
    return 1;
}

int main(void) {
    const float x[N] = {-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 1.0f, 2.5f, 1e30f};
    const int64_t shape[2] = {2, N / 2};
    amp_ctx *ctx = NULL;
    amp_tensor *t = NULL, *y = NULL;
    float got[N];
    int rc = 1;

    amp_status s = amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1}, &ctx);
    if (s != AMP_OK) return fail("amp_ctx_create", s);
    if ((s = amp_tensor_from_host(ctx, AMP_F32, 2, shape, x, &t)) != AMP_OK) {
        fail("amp_tensor_from_host", s);
        goto done;
    }
    if ((s = amp_relu(t, &y)) != AMP_OK) {
        fail("amp_relu", s);
        goto done;
    }
    if ((s = amp_tensor_to_host(y, got, sizeof got)) != AMP_OK) {
        fail("amp_tensor_to_host", s);
        goto done;
    }
    rc = 0;
    for (int i = 0; i < N; i++) {
        float want = x[i] > 0.0f ? x[i] : 0.0f;
        if (got[i] != want) {
            fprintf(stderr, "consumer: relu(%g) = %g, want %g\n", x[i], got[i], want);
            rc = 1;
        }
    }
    if (rc == 0) printf("consumer: amp_relu ok on %s backend\n", amp_ctx_backend_name(ctx));
    /* 1 layer, 2 heads, 16 wide, block 8, vocab 64: wte 64 x 16, per block 2 LayerNorms (4 x 16),
     * c_attn 48 x 16 + 48, c_proj 16 x 16 + 16, c_fc 64 x 16 + 64, mlp.c_proj 16 x 64 + 16, ln_f
     * 2 x 16 */
    amp_model *gpt = NULL;
    amp_gpt_config cfg = {.n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = 64};
    const int64_t want_params = 64 * 16 + 4 * 16 + (48 * 16 + 48) + (16 * 16 + 16) +
                                (64 * 16 + 64) + (16 * 64 + 16) + 2 * 16;
    if ((s = amp_gpt_create(ctx, &cfg, &gpt)) != AMP_OK || (s = amp_model_build(gpt)) != AMP_OK) {
        rc = fail("amp_gpt_create", s);
    } else if (amp_gpt_n_params(gpt) != want_params) {
        fprintf(stderr, "consumer: the GPT has %lld parameters, want %lld\n",
                (long long)amp_gpt_n_params(gpt), (long long)want_params);
        rc = 1;
    } else if (rc == 0) {
        printf("consumer: amp_gpt_create ok, %lld parameters\n", (long long)want_params);
    }
    amp_model_free(gpt);
done:
    amp_tensor_free(t);
    amp_ctx_free(ctx);
    return rc;
}
