/* AMP_BE, the dispatch generated from core/backend_kernels.def: an entry's argument check from the
 * list runs before the backend is called (a bad GEMM descriptor, a batch norm backward without
 * the y its ReLU needs, a dropout p of 1, a negative count: refused naming the entry, the
 * backend's kernel never reached); a good call reaches it once; a backend without the entry
 * answers AMP_ERR_UNSUPPORTED naming entry and backend; a profiled call goes through the
 * counting function; every call hands the kernel its table's device context; and the table has
 * a slot, a name and an id for every line of the list. */
#include <string.h>

#include "amp/amp.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/tensor_internal.h"
#include "test_util.h"

static int g_gemm_calls, g_bn_bwd_calls, g_dropout_calls;
/* The device context each stub was last called with. */
static amp_device_ctx *g_gemm_dev, *g_dropout_dev;

static amp_status stub_gemm(amp_device_ctx *dev, const amp_gemm_desc *d) {
    (void)d;
    g_gemm_calls++;
    g_gemm_dev = dev;
    return AMP_OK;
}

static amp_status stub_bn_bwd(amp_device_ctx *dev, const amp_bn_desc *d, const void *x,
                              const void *dy, const void *y, const float *gamma,
                              const float *save_mean, const float *save_invstd, void *dx,
                              float *dgamma, float *dbeta) {
    (void)d, (void)x, (void)dy, (void)y, (void)gamma, (void)save_mean, (void)save_invstd;
    (void)dx, (void)dgamma, (void)dbeta;
    g_bn_bwd_calls++;
    return AMP_OK;
}

static amp_status stub_dropout_fwd(amp_device_ctx *dev, amp_dtype dt, int64_t n, const void *x,
                                   float p, uint64_t seed, uint64_t offset, void *y,
                                   uint8_t *mask) {
    (void)dt, (void)n, (void)x, (void)p, (void)seed, (void)offset, (void)y, (void)mask;
    g_dropout_calls++;
    g_dropout_dev = dev;
    return AMP_OK;
}

int main(void) {
    amp_backend b = *amp_backend_cpu();
    b.name = "stub";
    b.k.gemm = stub_gemm;
    b.k.bn_bwd = stub_bn_bwd;
    b.k.dropout_fwd = stub_dropout_fwd;
    float buf[4] = {0};

    /* The list's checks run first and name the entry. */
    amp_gemm_desc bad = {.m = 1, .n = 1, .k = 1, .bias_grad = buf};
    CHECK_FAILS(AMP_BE(&b, gemm, &bad), AMP_ERR_INVALID_ARG, "gemm: bias_grad needs trans_a");
    bad = (amp_gemm_desc){.m = 1, .n = 1, .k = 1, .epilogue = (amp_gemm_epilogue)7};
    CHECK_FAILS(AMP_BE(&b, gemm, &bad), AMP_ERR_INVALID_ARG, "gemm: unknown epilogue 7");
    CHECK(g_gemm_calls == 0);
    amp_bn_desc bn = {.dtype = AMP_F32, .n = 2, .c = 1, .hw = 2, .eps = 1e-5f, .relu = true};
    CHECK_FAILS(AMP_BE(&b, bn_bwd, &bn, buf, buf, NULL, buf, buf, buf, buf, buf, buf),
                AMP_ERR_INVALID_ARG, "bn_bwd");
    CHECK(g_bn_bwd_calls == 0);
    CHECK_FAILS(AMP_BE(&b, dropout_fwd, AMP_F32, 4, buf, 1.0f, 1, 0, buf, NULL),
                AMP_ERR_INVALID_ARG, "dropout_fwd");
    CHECK(g_dropout_calls == 0);

    /* A good call reaches the kernel once, profiled or not, with the table's device context (a
     * table of its own here: the stubs never look inside it). */
    static char own_context;
    b.dev = (amp_device_ctx *)&own_context;
    amp_gemm_desc good = {.m = 1, .n = 1, .k = 1};
    CHECK_OK(AMP_BE(&b, gemm, &good));
    CHECK(g_gemm_calls == 1 && g_gemm_dev == b.dev);
    g_gemm_dev = NULL;
    amp_profile_begin(false);
    CHECK_OK(AMP_BE(&b, gemm, &good));
    amp_op_profile p;
    amp_profile_end(&p);
    CHECK(g_gemm_calls == 2 && p.calls[AMP_OPCAT_GEMM_CONV] == 1 &&
          p.flops[AMP_OPCAT_GEMM_CONV] == 2.0 && g_gemm_dev == b.dev);
    CHECK_OK(AMP_BE(&b, dropout_fwd, AMP_F32, 4, buf, 0.5f, 1, 0, buf, NULL));
    CHECK(g_dropout_calls == 1 && g_dropout_dev == b.dev);
    CHECK(amp_backend_cpu()->dev != NULL && amp_backend_cpu()->dev != b.dev);
    bn.relu = false;
    CHECK_OK(AMP_BE(&b, bn_bwd, &bn, buf, buf, NULL, buf, buf, buf, buf, buf, buf));
    CHECK(g_bn_bwd_calls == 1);

    /* No kernel: UNSUPPORTED naming the entry and the backend, after the check passed. */
    b.k.gemm = NULL;
    CHECK_FAILS(AMP_BE(&b, gemm, &good), AMP_ERR_UNSUPPORTED, "gemm");
    CHECK(strstr(amp_last_error(), "stub") != NULL);
    CHECK(strcmp(amp_backend_missing_entry(&b), "gemm") == 0);

    /* Every line of the list is a slot with a name: the CPU backend fills them all. */
    int kernels = 0;
#define AMP_KERNEL(name, category, flops, check, params, args) kernels++;
#include "core/backend_kernels.def"
#undef AMP_KERNEL
    int named = 0;
    for (int i = 0; i < amp_backend_n_entries(); i++)
        named += amp_backend_entry_name(i) && amp_backend_has_entry(amp_backend_cpu(), i);
    CHECK_MSG(kernels > 0 && named == amp_backend_n_entries() && named > kernels,
              "%d kernels in the list, %d named entries filled of %d", kernels, named,
              amp_backend_n_entries());
    CHECK(amp_backend_missing_entry(amp_backend_cpu()) == NULL && amp_backend_cpu()->coll == NULL);
    return test_summary("test_backend_dispatch");
}
