/* Philox draws for the host: number i of the stream is philox(counter = i, key = seed). */
#include "core/rng.h"

#include <math.h>

#include "core/ctx.h"
#include "core/error.h"
#include "core/philox.h"

float amp_rng_uniform(amp_rng_state *s, float lo, float hi) {
    float u = amp_philox_uniform(s->seed, s->counter++);
    return lo + (hi - lo) * u;
}

float amp_rng_normal(amp_rng_state *s, float mean, float std) {
    uint32_t r[4];
    amp_philox4x32(s->counter++, s->seed, r);
    double u1 = ((double)r[0] + 1.0) / 4294967296.0; /* (0, 1]: log is finite */
    double u2 = (double)r[1] / 4294967296.0;
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    return (float)((double)mean + (double)std * z);
}

uint32_t amp_rng_below(amp_rng_state *s, uint32_t n) {
    uint32_t limit = UINT32_MAX - UINT32_MAX % n; /* largest multiple of n: reject above */
    for (;;) {
        uint32_t r[4];
        amp_philox4x32(s->counter++, s->seed, r);
        if (r[0] < limit) return r[0] % n;
    }
}

uint64_t amp_rng_reserve(amp_rng_state *s, uint64_t n) {
    uint64_t first = s->counter;
    s->counter += n;
    return first;
}

amp_status amp_rng_get_state(const amp_ctx *ctx, amp_rng_state *out) {
    AMP_CHECK_ARG(ctx);
    AMP_CHECK_ARG(out);
    *out = ctx->rng;
    return AMP_OK;
}

amp_status amp_rng_set_state(amp_ctx *ctx, const amp_rng_state *state) {
    AMP_CHECK_ARG(ctx);
    AMP_CHECK_ARG(state);
    ctx->rng = *state;
    return AMP_OK;
}
