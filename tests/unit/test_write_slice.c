/* amp_tensor_write_slice on every device that answers: rows written along each dim land where
 * PyTorch's slice assignment puts them and nowhere else, in f32 and bf16; a write after an op
 * saved dst for its backward makes that backward refuse (the write version moved); a src that
 * does not fit, another dtype, a released step tensor as dst are refused and dst is unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/half.h"
#include "test_devices.h"
#include "test_util.h"

enum { A = 2, B = 3, C = 5, D = 4, N = A * B * C * D };

static void check_dim(amp_ctx *ctx, amp_dtype dt, int dim) {
    const int64_t shape[4] = {A, B, C, D};
    int64_t sub[4] = {A, B, C, D};
    sub[dim] = shape[dim] - 1 > 1 ? 2 : 1;
    int64_t start = shape[dim] - sub[dim], ns = sub[0] * sub[1] * sub[2] * sub[3];
    float hd[N], hs[N], want[N], got[N];
    uint16_t bd[N], bsrc[N];
    for (int i = 0; i < N; i++) hd[i] = (float)i, bd[i] = amp_f32_to_bf16_bits(hd[i]);
    for (int i = 0; i < ns; i++) hs[i] = -1.0f - (float)i, bsrc[i] = amp_f32_to_bf16_bits(hs[i]);
    amp_tensor *dst = NULL, *src = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, dt, 4, shape, dt == AMP_F32 ? (void *)hd : (void *)bd, &dst));
    CHECK_OK(amp_tensor_from_host(ctx, dt, 4, sub, dt == AMP_F32 ? (void *)hs : (void *)bsrc, &src));
    CHECK_OK(amp_tensor_write_slice(dst, dim, start, src));
    /* the reference: dst's element (a, b, c, d) takes src's at the same index less start */
    memcpy(want, hd, sizeof want);
    for (int i = 0; i < N; i++) {
        int64_t idx[4] = {i / (B * C * D), i / (C * D) % B, i / D % C, i % D};
        if (idx[dim] < start) continue;
        idx[dim] -= start;
        want[i] = hs[((idx[0] * sub[1] + idx[1]) * sub[2] + idx[2]) * sub[3] + idx[3]];
    }
    CHECK_OK(amp_tensor_to_host_f32(dst, got, sizeof got));
    CHECK_MSG(!memcmp(got, want, sizeof got), "%s dim %d: the slice landed elsewhere",
              amp_dtype_name(dt), dim);
    amp_tensor_free(src);
    amp_tensor_free(dst);
}

static void run_all(amp_device device) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 1}, &ctx));
    if (!ctx) return;
    for (int dim = 0; dim < 4; dim++) {
        check_dim(ctx, AMP_F32, dim);
        check_dim(ctx, AMP_BF16, dim);
    }
    /* a write after a backward saved dst: refused at backward, naming the op */
    amp_tensor *w = NULL, *x = NULL, *y = NULL, *loss = NULL, *row = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){2, 3}, &w));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){2, 3}, &x));
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){1, 3}, &row));
    CHECK_OK(amp_tensor_set_requires_grad(x, true));
    CHECK_OK(amp_mul(x, w, &y));
    CHECK_OK(amp_mean(y, &loss));
    CHECK_OK(amp_tensor_write_slice(w, 0, 1, row));
    CHECK_FAILS(amp_backward(loss), AMP_ERR_STATE, "mul");
    amp_ctx_reset_step(ctx);
    /* bad input, dst unchanged */
    amp_tensor *big = NULL, *h = NULL, *step = NULL;
    CHECK_OK(amp_tensor_create(ctx, AMP_F32, 2, (const int64_t[]){3, 3}, &big));
    CHECK_OK(amp_tensor_create(ctx, AMP_BF16, 2, (const int64_t[]){1, 3}, &h));
    CHECK_FAILS(amp_tensor_write_slice(w, 0, 1, big), AMP_ERR_SHAPE,
                "amp_tensor_write_slice: src [3, 3] does not fit dst [2, 3] at 1 along dim 0");
    CHECK_FAILS(amp_tensor_write_slice(w, 0, 2, row), AMP_ERR_SHAPE, "does not fit");
    CHECK_FAILS(amp_tensor_write_slice(w, 2, 0, row), AMP_ERR_SHAPE, "along dim 2");
    CHECK_FAILS(amp_tensor_write_slice(w, 0, 0, h), AMP_ERR_DTYPE, "amp_tensor_write_slice");
    /* a step tensor whose memory went back: refused */
    CHECK_OK(amp_add(w, w, &step));
    CHECK_OK(amp_tensor_drop(step));
    CHECK(amp_tensor_write_slice(step, 0, 0, row) != AMP_OK);
    amp_ctx_reset_step(ctx);
    amp_tensor *list[6] = {w, x, row, big, h, NULL};
    for (int i = 0; list[i]; i++) amp_tensor_free(list[i]);
    amp_ctx_free(ctx);
}

int main(void) {
    test_on_each_device(run_all);
    return test_summary("test_write_slice");
}
