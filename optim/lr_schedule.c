/* Learning-rate schedules: linear warm-up, then cosine or linear decay to a floor (nanoGPT's
 * get_lr), the rate of each step computed from the step alone, so a resumed run continues the
 * same curve from its saved step count. */
#include <math.h>

#include "amp/optim.h"
#include "core/error.h"

static amp_status lr_check(const amp_lr_schedule *s, int64_t step) {
    AMP_CHECK_ARG(s);
    if (!isfinite(s->max_lr) || !(s->max_lr >= 0.0f))
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_lr_at: max_lr = %g must be >= 0 and finite",
                        (double)s->max_lr);
    if (s->decay != AMP_LR_CONSTANT && s->decay != AMP_LR_COSINE && s->decay != AMP_LR_LINEAR)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_lr_at: unknown decay %d (AMP_LR_CONSTANT, "
                        "AMP_LR_COSINE or AMP_LR_LINEAR)", (int)s->decay);
    if (s->warmup_steps < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_lr_at: warmup_steps = %lld must be >= 0",
                        (long long)s->warmup_steps);
    if (s->decay != AMP_LR_CONSTANT) {
        if (!isfinite(s->min_lr) || !(s->min_lr >= 0.0f) || s->min_lr > s->max_lr)
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_lr_at: min_lr = %g must be finite, in "
                            "[0, max_lr = %g]", (double)s->min_lr, (double)s->max_lr);
        if (s->decay_steps < s->warmup_steps)
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_lr_at: decay_steps = %lld is before the "
                            "warm-up's end (warmup_steps = %lld): decay_steps counts from step "
                            "0 and includes the warm-up", (long long)s->decay_steps,
                            (long long)s->warmup_steps);
    }
    if (step < 0)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_lr_at: step %lld is negative", (long long)step);
    return AMP_OK;
}

amp_status amp_lr_at(const amp_lr_schedule *s, int64_t step, float *lr) {
    AMP_CHECK_ARG(lr);
    AMP_TRY(lr_check(s, step));
    double hi = s->max_lr, lo = s->min_lr, v;
    if (step < s->warmup_steps) {
        /* The + 1s in double: warmup_steps + 1 wraps to INT64_MIN in int64 at INT64_MAX (a
         * negative rate). step + 1 <= warmup_steps, and rounding is monotonic, so v <= hi. */
        v = hi * ((double)step + 1.0) / ((double)s->warmup_steps + 1.0);
    } else if (s->decay == AMP_LR_CONSTANT) {
        v = hi;
    } else if (step >= s->decay_steps) {
        v = lo;
    } else {
        double t = (double)(step - s->warmup_steps) / (double)(s->decay_steps - s->warmup_steps);
        v = s->decay == AMP_LR_COSINE ? lo + (hi - lo) * 0.5 * (1.0 + cos(M_PI * t))
                                      : hi + (lo - hi) * t;
    }
    *lr = (float)v;
    return AMP_OK;
}

amp_status amp_optimizer_schedule(amp_optimizer *opt, const amp_lr_schedule *s, int64_t step) {
    AMP_CHECK_ARG(opt);
    float lr;
    AMP_TRY(amp_lr_at(s, step, &lr));
    return amp_optimizer_set_lr(opt, lr);
}
