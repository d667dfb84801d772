/* What the tests of the fused ops (test_gradcheck_fused.c: linear + ReLU, test_gradcheck_bn_relu.c:
 * batch norm + ReLU, test_gradcheck_linear_gelu.c) share: the gradient-check loop over their
 * cases, a leaf's gradient on the host, the comparison of fused and unfused values, a trace that
 * logs the ops a model ran, and the main that runs it all on each backend. */
#ifndef AMP_TESTS_FUSED_CHECK_H
#define AMP_TESTS_FUSED_CHECK_H

#include "core/ctx.h"
#include "gradcheck_run.h"

/* gc_run on every case, seeds seed0, seed0 + 1, ..., one line per case. */
static inline void gc_run_cases(amp_ctx *ctx, gc_case *cases, int n_cases, uint64_t seed0) {
    for (int i = 0; i < n_cases; i++) {
        int before = test_n_fail;
        gc_run(ctx, &cases[i], seed0 + (uint64_t)i);
        printf("%-6s %-44s %s\n", ctx->backend->name, cases[i].name,
               test_n_fail == before ? "ok" : "FAILED");
    }
}

/* t's gradient into host (f32), nothing when it has none. */
static inline void grad_to_host(amp_tensor *t, float *host) {
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(t, &g));
    if (g) CHECK_OK(amp_tensor_to_host(g, host, (size_t)g->numel * sizeof *host));
}

/* Elements of a and b (n each) whose bits differ, -0 and +0 counted equal. */
static inline int n_differ(const float *a, const float *b, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof a[i]) != 0 && !(a[i] == 0 && b[i] == 0);
    return bad;
}

/* The names of the ops a forward ran, through ctx->trace. */
typedef struct op_log {
    const char *ops[32];
    int n;
} op_log;

static inline void log_op(void *user, const char *op, const amp_tensor *const *in, int n_in,
                          const amp_tensor *out) {
    (void)in, (void)n_in, (void)out;
    op_log *l = user;
    if (l->n < 32) l->ops[l->n++] = op;
}

/* The whole test: on the CPU, then on CUDA where a backend answers, a context seeded ctx_seed,
 * the cases' gradient checks (seeds from seed0), then each of tests; test_summary(name). */
typedef void (*fused_test)(amp_ctx *ctx);
static inline int fused_check_main(const char *name, gc_case *cases, int n_cases, uint64_t seed0,
                                   uint64_t ctx_seed, const fused_test *tests, int n_tests) {
    const amp_device devices[2] = {AMP_DEVICE_CPU, AMP_DEVICE_CUDA};
    for (int d = 0; d < 2; d++) {
        if (d == 1 && !amp_backend_cuda()) {
            printf("%s: no CUDA backend (%s): the CPU only\n", name, amp_last_error());
            break;
        }
        amp_ctx *ctx = NULL;
        CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = devices[d], .seed = ctx_seed}, &ctx));
        if (!ctx) continue;
        gc_run_cases(ctx, cases, n_cases, seed0);
        for (int i = 0; i < n_tests; i++) tests[i](ctx);
        amp_ctx_free(ctx);
    }
    return test_summary(name);
}

#endif
