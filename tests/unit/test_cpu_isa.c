/* The instruction-set cap (core/cpu_info.h, AMP_CPU_ISA): each level a CPU has can be asked for,
 * and then runs as a CPU of that level would.
 *  - the level and features: the CPU's own from /proc/cpuinfo's flags when unset; under a cap,
 *    the lower of the two, no AVX-512 feature listed below avx512_core, the AVX-512 kernels off,
 *    oneDNN's effective ISA no higher (after a GEMM, when oneDNN has chosen its kernels);
 *  - a value that is no level: amp_ctx_create refuses it, naming AMP_CPU_ISA and the value;
 *    names are case-blind ("AVX2"), and "all" caps nothing;
 *  - the clones and hand-vectorised kernels give the same bits at every level (cpu_clones.h's
 *    promise): the same forward and backward of the row ops, pointwise ops, batch norm, pooling,
 *    dropout, casts and an SGD step, computed at each level the CPU has, against the sse41
 *    level's bits. GEMMs and convolutions are left out: oneDNN's kernels sum in other orders at
 *    other levels, which is why a checkpoint records the level.
 * Each level runs in a child process (the level is read once per process), which writes its
 * numbers to a pipe; the parent starts no OpenMP thread before it forks. */
#define _GNU_SOURCE
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "amp/amp.h"
#include "core/cpu_info.h"
#include "kernels/cpu/cpu_backend.h"
#include "test_util.h"

#define N_OUT 4096 /* floats a child sends back: its outputs and gradients, padded with 0 */

static uint32_t g_lcg = 12345u;
static float uniform(float lo, float hi) {
    g_lcg = g_lcg * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(g_lcg >> 8) / 16777216.0f;
}

static amp_tensor *random_tensor(amp_ctx *ctx, int ndim, const int64_t *shape, float lo, float hi) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = uniform(lo, hi);
    amp_tensor *t = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, ndim, shape, v, &t));
    free(v);
    if (t) CHECK_OK(amp_tensor_set_requires_grad(t, true));
    return t;
}

/* Appends t's values (as f32) to out at *at, as many as fit. */
static void take(float *out, int *at, amp_tensor *t) {
    if (!t) return;
    int64_t n = amp_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    CHECK_OK(amp_tensor_to_host_f32(t, v, (size_t)n * sizeof *v));
    for (int64_t i = 0; i < n && *at < N_OUT; i++) out[(*at)++] = v[i];
    free(v);
}

static void take_grad(float *out, int *at, amp_tensor *t) {
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(t, &g));
    take(out, at, g);
}

/* The ops whose bits must not depend on the level, forward and backward, into out. */
static void compute(float *out) {
    int at = 0;
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 7, .n_threads = 1},
                            &ctx));
    if (!ctx) return;
    /* Rows of 100 columns: the 16- and 8-lane loops' masked tails. */
    amp_tensor *x = random_tensor(ctx, 2, (int64_t[]){6, 100}, -4, 4);
    amp_tensor *g = random_tensor(ctx, 1, (int64_t[]){100}, 0.5f, 1.5f);
    amp_tensor *b = random_tensor(ctx, 1, (int64_t[]){100}, -0.5f, 0.5f);
    amp_tensor *ln = NULL, *ge = NULL, *sm = NULL, *si = NULL, *th = NULL, *sg = NULL, *lsm = NULL;
    CHECK_OK(amp_norm(x, NULL, g, b, &(amp_norm_opts){.eps = 1e-5f}, NULL, &ln));
    CHECK_OK(amp_gelu(ln, false, &ge));
    CHECK_OK(amp_softmax(ge, 1, &sm));
    CHECK_OK(amp_silu(x, &si));
    CHECK_OK(amp_tanh(si, &th));
    CHECK_OK(amp_sigmoid(th, &sg));
    CHECK_OK(amp_log_softmax(sg, 1, &lsm));
    /* Batch norm with ReLU, 2x2 max pooling (the hand-vectorised kernels), 16 channels. */
    amp_tensor *img = random_tensor(ctx, 4, (int64_t[]){2, 16, 6, 6}, -2, 2);
    amp_tensor *bg = random_tensor(ctx, 1, (int64_t[]){16}, 0.5f, 1.5f);
    amp_tensor *bb = random_tensor(ctx, 1, (int64_t[]){16}, -0.5f, 0.5f);
    amp_tensor *bn = NULL, *pool = NULL, *flat = NULL, *drop = NULL, *rm = NULL, *rv = NULL;
    float zeros[16] = {0}, ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (int64_t[]){16}, zeros, &rm));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 1, (int64_t[]){16}, ones, &rv));
    CHECK_OK(amp_batchnorm2d_relu(img, bg, bb, rm, rv, true, 0.1f, 1e-5f, &bn));
    CHECK_OK(amp_maxpool2d(bn, 2, 2, 0, &pool));
    CHECK_OK(amp_flatten(pool, &flat));
    CHECK_OK(amp_dropout(flat, 0.25f, true, &drop));
    /* Cross-entropy over the log-softmax rows and the pooled features, plus the softmax's mean. */
    int32_t labels[6] = {0, 17, 42, 99, 5, 63};
    amp_tensor *y = NULL, *l1 = NULL, *l2 = NULL, *m1 = NULL, *s1 = NULL, *s2 = NULL, *loss = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){6}, labels, &y));
    CHECK_OK(amp_cross_entropy(lsm, y, &l1));
    amp_tensor *feat = NULL, *y2 = NULL;
    CHECK_OK(amp_reshape(drop, 2, (int64_t[]){2, 144}, &feat));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 1, (int64_t[]){2}, (int32_t[]){3, 140}, &y2));
    CHECK_OK(amp_cross_entropy(feat, y2, &l2));
    CHECK_OK(amp_mean(sm, &m1));
    CHECK_OK(amp_add(l1, l2, &s1));
    CHECK_OK(amp_add(s1, m1, &s2));
    loss = s2;
    /* Casts both ways, through f16 and bf16, of values that round (ties, subnormals). */
    amp_tensor *h = NULL, *back = NULL, *bf = NULL, *back2 = NULL;
    CHECK_OK(amp_cast(x, AMP_F16, &h));
    if (h) CHECK_OK(amp_cast(h, AMP_F32, &back));
    CHECK_OK(amp_cast(ge, AMP_BF16, &bf));
    if (bf) CHECK_OK(amp_cast(bf, AMP_F32, &back2));
    /* The step's tensors are read before the backward releases them. */
    amp_tensor *outs[] = {ln, ge, sm, si, th, sg, lsm, bn, pool, drop, loss, back, back2};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) take(out, &at, outs[i]);
    if (loss) CHECK_OK(amp_backward(loss));
    amp_tensor *leaves[] = {x, g, b, img, bg, bb};
    for (size_t i = 0; i < sizeof leaves / sizeof *leaves; i++) take_grad(out, &at, leaves[i]);
    take(out, &at, rm);
    take(out, &at, rv);
    CHECK_MSG(at > 2000, "only %d numbers computed", at);
    amp_ctx_free(ctx);
}

/* What a child reports for its level: its numbers and what it checked of the cap. */
typedef struct child_report {
    int level;
    int avx512_kernels;
    int dnnl_isa;
    int failures;
    char isa[160];
    float out[N_OUT];
} child_report;

/* Runs body(out) in a child with AMP_CPU_ISA = cap (NULL: unset), the level being read once per
 * process, and copies the child's nbytes of out back: 0 when they all came and it exited 0. */
static int in_child(const char *cap, void (*body)(void *out), void *out, size_t nbytes) {
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fd[0]);
        if (cap) setenv("AMP_CPU_ISA", cap, 1);
        else unsetenv("AMP_CPU_ISA");
        void *mine = calloc(1, nbytes);
        if (mine) body(mine);
        ssize_t w = mine ? write(fd[1], mine, nbytes) : -1;
        _exit(w == (ssize_t)nbytes ? 0 : 3);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < nbytes) {
        ssize_t n = read(fd[0], (char *)out + got, nbytes - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return got == nbytes && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The level checks and compute, in the child. */
static void level_report(void *out) {
    child_report *c = out;
    c->level = (int)amp_cpu_level_get();
    c->avx512_kernels = amp_cpu_avx512_kernels();
    snprintf(c->isa, sizeof c->isa, "%s", amp_cpu_isa());
    compute(c->out);
    /* A GEMM, so that oneDNN has picked its kernels' ISA. */
    amp_ctx *ctx = NULL;
    if (amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU}, &ctx) == AMP_OK) {
        amp_tensor *a = random_tensor(ctx, 2, (int64_t[]){64, 64}, -1, 1), *o = NULL;
        CHECK_OK(amp_matmul(a, a, &o));
        amp_ctx_free(ctx);
    }
    c->dnnl_isa = (int)dnnl_get_effective_cpu_isa();
    c->failures = test_n_fail;
}

static int run_child(const char *cap, child_report *r) {
    return in_child(cap, level_report, r, sizeof *r);
}

/* What amp_ctx_create says in the child ("" when it succeeds), and whether its status and its
 * context agree. */
typedef struct ctx_report {
    char msg[512];
    int consistent;
} ctx_report;

static void ctx_attempt(void *out) {
    ctx_report *c = out;
    amp_ctx *ctx = NULL;
    amp_status s = amp_ctx_create(NULL, &ctx);
    snprintf(c->msg, sizeof c->msg, "%s", s == AMP_OK ? "" : amp_last_error());
    c->consistent = (s == AMP_OK) == (ctx != NULL);
}

/* The message amp_ctx_create gives in a child with AMP_CPU_ISA = cap ("" when it succeeds). */
static int ctx_message(const char *cap, char *msg, size_t n) {
    ctx_report r;
    if (in_child(cap, ctx_attempt, &r, sizeof r) != 0 || !r.consistent) return -1;
    snprintf(msg, n, "%s", r.msg);
    return 0;
}

static int first_difference(const float *a, const float *b) {
    for (int i = 0; i < N_OUT; i++)
        if (memcmp(&a[i], &b[i], sizeof *a)) return i;
    return -1;
}

int main(void) {
    static child_report own, base, r;
    CHECK(run_child(NULL, &own) == 0);
    CHECK(own.failures == 0);
    printf("test_cpu_isa: this CPU's level %s, features [%s], oneDNN ISA 0x%x\n",
           amp_cpu_level_name((amp_cpu_level)own.level), own.isa, own.dnnl_isa);
    CHECK(run_child("sse41", &base) == 0);
    CHECK(base.failures == 0 && base.level == AMP_CPU_SSE41 && !base.avx512_kernels);
    CHECK_MSG(!strcmp(base.isa, "none"), "sse41 lists [%s]", base.isa);
    CHECK_MSG(base.dnnl_isa <= dnnl_cpu_isa_sse41, "oneDNN ran 0x%x under sse41", base.dnnl_isa);

    static const struct {
        const char *cap;
        amp_cpu_level level;
        int dnnl_max;
    } levels[] = {
        {"avx2", AMP_CPU_AVX2, dnnl_cpu_isa_avx2},
        {"AVX512_CORE", AMP_CPU_AVX512_CORE, dnnl_cpu_isa_avx512_core},
        {"avx512_core_bf16", AMP_CPU_AVX512_CORE_BF16, dnnl_cpu_isa_avx512_core_bf16},
        {"avx512_core_amx", AMP_CPU_AVX512_CORE_AMX, dnnl_cpu_isa_avx512_core_amx},
        {"all", AMP_CPU_AVX512_CORE_AMX, dnnl_cpu_isa_avx512_core_amx},
    };
    for (size_t k = 0; k < sizeof levels / sizeof *levels; k++) {
        CHECK(run_child(levels[k].cap, &r) == 0);
        amp_cpu_level want = levels[k].level < (amp_cpu_level)own.level ? levels[k].level
                                                                        : (amp_cpu_level)own.level;
        CHECK_MSG(r.failures == 0 && r.level == (int)want, "AMP_CPU_ISA=%s: level %s, want %s",
                  levels[k].cap, amp_cpu_level_name((amp_cpu_level)r.level),
                  amp_cpu_level_name(want));
        CHECK(r.avx512_kernels == (want >= AMP_CPU_AVX512_CORE));
        CHECK_MSG((strstr(r.isa, "avx512") != NULL) == (want >= AMP_CPU_AVX512_CORE) &&
                      (strstr(r.isa, "amx") != NULL) == (want >= AMP_CPU_AVX512_CORE_AMX),
                  "AMP_CPU_ISA=%s lists [%s]", levels[k].cap, r.isa);
        /* oneDNN's levels are bit masks, each holding the ones below it. */
        CHECK_MSG((r.dnnl_isa & ~levels[k].dnnl_max) == 0, "AMP_CPU_ISA=%s: oneDNN ran 0x%x",
                  levels[k].cap, r.dnnl_isa);
        int d = first_difference(r.out, base.out);
        CHECK_MSG(d < 0, "AMP_CPU_ISA=%s (level %s): number %d is %a, at sse41 %a",
                  levels[k].cap, amp_cpu_level_name(want), d, d < 0 ? 0.0 : (double)r.out[d],
                  d < 0 ? 0.0 : (double)base.out[d]);
    }
    CHECK(first_difference(own.out, base.out) < 0);

    char msg[1024];
    CHECK(ctx_message("avx3", msg, sizeof msg) == 0);
    CHECK_MSG(strstr(msg, "amp_ctx_create") && strstr(msg, "AMP_CPU_ISA='avx3'") &&
                  strstr(msg, "avx512_core"),
              "AMP_CPU_ISA=avx3: '%s'", msg);
    CHECK(ctx_message("Avx2", msg, sizeof msg) == 0);
    CHECK_MSG(!*msg, "AMP_CPU_ISA=Avx2 refused: '%s'", msg);
    return test_summary("test_cpu_isa");
}
