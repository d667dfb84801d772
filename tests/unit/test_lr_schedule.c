/* Learning-rate schedules (amp_lr_at, amp_optimizer_schedule; optim/lr_schedule.c):
 *  - the warm-up's values (max_lr (s + 1) / (warmup + 1), nanoGPT's), the peak right after it,
 *    the cosine's midpoint at (max + min) / 2, the floor from decay_steps on, and a curve that
 *    never rises after the warm-up, for the cosine and the linear decay; the constant schedule
 *    keeps max_lr after its warm-up; no warm-up starts at max_lr;
 *  - against the formula evaluated here in long double at every step of a schedule, to f32's
 *    rounding;
 *  - amp_optimizer_schedule sets every parameter group's rate (as nanoGPT's loop over
 *    param_groups), and the next step uses it;
 *  - bad schedules and steps: errors naming the field, the output and the optimizer untouched. */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "test_util.h"

#define NAME "test_lr_schedule"
#define CHECK_NEAR(a, b, tol)                                                                      \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%s = %.9g, want %.9g", #a, (double)(a),   \
              (double)(b))

static float lr_of(const amp_lr_schedule *s, int64_t step) {
    float lr = -1.0f;
    CHECK_OK(amp_lr_at(s, step, &lr));
    return lr;
}

static long double reference(const amp_lr_schedule *s, int64_t step) {
    long double hi = s->max_lr, lo = s->min_lr;
    if (step < s->warmup_steps) return hi * (long double)(step + 1) / (long double)(s->warmup_steps + 1);
    if (s->decay == AMP_LR_CONSTANT) return hi;
    if (step >= s->decay_steps) return lo;
    long double t = (long double)(step - s->warmup_steps) / (long double)(s->decay_steps - s->warmup_steps);
    if (s->decay == AMP_LR_LINEAR) return hi + (lo - hi) * t;
    return lo + (hi - lo) * 0.5L * (1.0L + cosl(3.14159265358979323846264338327950288L * t));
}

static void test_shapes(void) {
    amp_lr_schedule cos_s = {.max_lr = 6e-4f, .min_lr = 6e-5f, .warmup_steps = 10,
                             .decay_steps = 110, .decay = AMP_LR_COSINE};
    CHECK_NEAR(lr_of(&cos_s, 0), 6e-4 / 11, 1e-10);
    CHECK_NEAR(lr_of(&cos_s, 9), 6e-4 * 10 / 11, 1e-10);
    CHECK_NEAR(lr_of(&cos_s, 10), 6e-4, 1e-10);
    CHECK_NEAR(lr_of(&cos_s, 60), (6e-4 + 6e-5) / 2, 1e-10);
    CHECK(lr_of(&cos_s, 110) == 6e-5f && lr_of(&cos_s, 100000) == 6e-5f);
    amp_lr_schedule lin = cos_s;
    lin.decay = AMP_LR_LINEAR;
    CHECK_NEAR(lr_of(&lin, 35), 6e-4 + (6e-5 - 6e-4) * 0.25, 1e-10);
    for (int k = 0; k < 2; k++) {
        const amp_lr_schedule *s = k ? &lin : &cos_s;
        int rises = 0, off = 0;
        for (int64_t step = 0; step < 130; step++) {
            float a = lr_of(s, step), b = lr_of(s, step + 1);
            rises += step >= s->warmup_steps && b > a;
            long double want = reference(s, step);
            off += fabsl((long double)a - want) > 0x1p-24L * want;
        }
        CHECK_MSG(rises == 0, "%s: the rate rose %d times after the warm-up", k ? "linear" : "cosine", rises);
        CHECK_MSG(off == 0, "%s: %d steps off the long double formula", k ? "linear" : "cosine", off);
    }
    amp_lr_schedule flat = {.max_lr = 1e-3f, .warmup_steps = 4, .decay = AMP_LR_CONSTANT};
    CHECK_NEAR(lr_of(&flat, 1), 1e-3 * 2 / 5, 1e-10);
    CHECK(lr_of(&flat, 4) == 1e-3f && lr_of(&flat, 1000000) == 1e-3f);
    amp_lr_schedule nowarm = {.max_lr = 3e-4f, .min_lr = 0, .decay_steps = 50, .decay = AMP_LR_COSINE};
    CHECK(lr_of(&nowarm, 0) == 3e-4f);
    CHECK(lr_of(&nowarm, 50) == 0.0f);
}

static void test_errors(void) {
    amp_lr_schedule ok = {.max_lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 5, .decay_steps = 20,
                          .decay = AMP_LR_COSINE};
    float lr = 7.0f;
    amp_lr_schedule s = ok;
    s.max_lr = NAN;
    CHECK_FAILS(amp_lr_at(&s, 0, &lr), AMP_ERR_INVALID_ARG, "max_lr = nan");
    s = ok, s.max_lr = -1.0f;
    CHECK_FAILS(amp_lr_at(&s, 0, &lr), AMP_ERR_INVALID_ARG, "max_lr = -1");
    s = ok, s.min_lr = 2e-3f;
    CHECK_FAILS(amp_lr_at(&s, 0, &lr), AMP_ERR_INVALID_ARG, "min_lr = 0.002");
    s = ok, s.warmup_steps = -1;
    CHECK_FAILS(amp_lr_at(&s, 0, &lr), AMP_ERR_INVALID_ARG, "warmup_steps = -1");
    s = ok, s.decay_steps = 3;
    CHECK_FAILS(amp_lr_at(&s, 0, &lr), AMP_ERR_INVALID_ARG, "decay_steps = 3 is before");
    s = ok, s.decay = (amp_lr_decay)9;
    CHECK_FAILS(amp_lr_at(&s, 0, &lr), AMP_ERR_INVALID_ARG, "unknown decay 9");
    CHECK_FAILS(amp_lr_at(&ok, -2, &lr), AMP_ERR_INVALID_ARG, "step -2 is negative");
    CHECK_FAILS(amp_lr_at(NULL, 0, &lr), AMP_ERR_INVALID_ARG, "");
    CHECK_FAILS(amp_lr_at(&ok, 0, NULL), AMP_ERR_INVALID_ARG, "");
    CHECK(lr == 7.0f);
}

/* Every group takes the schedule's rate, and the step uses it: SGD without momentum moves a
 * parameter by lr * grad. */
static void test_optimizer(void) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 3}, &ctx));
    amp_model *m = NULL;
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_linear(m, "fc", 3, 2, true));
    CHECK_OK(amp_model_build(m));
    amp_optimizer *opt = NULL;
    amp_sgd_opts so = amp_sgd_defaults();
    so.lr = 0.5f;
    CHECK_OK(amp_sgd_create(m, &so, &opt));
    if (!opt) return;
    const char *bias[1] = {"fc.bias"};
    int g = -1;
    CHECK_OK(amp_optimizer_add_group_named(opt, bias, 1, &(amp_param_group_opts){0.25f, 0}, &g));
    amp_lr_schedule s = {.max_lr = 0.1f, .min_lr = 0.01f, .warmup_steps = 2, .decay_steps = 12,
                         .decay = AMP_LR_LINEAR};
    CHECK_OK(amp_optimizer_schedule(opt, &s, 7));
    float want = lr_of(&s, 7);
    CHECK(amp_optimizer_group_lr(opt, 0) == want && amp_optimizer_group_lr(opt, g) == want);
    amp_lr_schedule bad = s;
    bad.min_lr = 1.0f;
    CHECK_FAILS(amp_optimizer_schedule(opt, &bad, 7), AMP_ERR_INVALID_ARG, "min_lr");
    CHECK(amp_optimizer_lr(opt) == want);
    /* One step with the loss the mean of the two outputs (d/dbias = 1/2): the bias moves by half
     * the scheduled rate. */
    amp_tensor *b = amp_model_param(m, 1), *x = NULL, *y = NULL, *loss = NULL;
    float b0[2], b1[2], ones[3] = {1, 1, 1};
    CHECK_OK(amp_tensor_to_host(b, b0, sizeof b0));
    CHECK_OK(amp_tensor_from_host(ctx, AMP_F32, 2, (const int64_t[]){1, 3}, ones, &x));
    CHECK_OK(amp_model_forward(m, x, &y));
    if (y) CHECK_OK(amp_mean(y, &loss));
    if (loss) CHECK_OK(amp_backward(loss));
    CHECK_OK(amp_optimizer_step(opt));
    CHECK_OK(amp_tensor_to_host(b, b1, sizeof b1));
    for (int j = 0; j < 2; j++) CHECK_NEAR(b0[j] - b1[j], 0.5 * want, 1e-7);
    amp_tensor_free(x);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_ctx_free(ctx);
}

int main(void) {
    test_shapes();
    test_errors();
    test_optimizer();
    return test_summary(NAME);
}
