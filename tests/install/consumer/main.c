/* Links against an installed libamp: creates a CPU context, runs amp_relu on a small tensor and
 * checks each output against max(x, 0). Exits 0 on success. */
#include <stdio.h>

#include "amp/amp.h"

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
done:
    amp_tensor_free(t);
    amp_ctx_free(ctx);
    return rc;
}
