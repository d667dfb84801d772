/* CPU backend: softmax and log-softmax over the last dim (softmax_fwd, softmax_bwd), the
 * arithmetic and order of kernels/math/softmax.h: each row's max and sum in the 32 lanes a CUDA
 * warp uses and its butterfly (kernels/math/lanes.h), so both backends give the same bits. Rows
 * run in parallel (amp_cpu_each_row), each widened once into the thread's f32 buffer. */
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/math/load_store.h"
#include "kernels/math/softmax.h"

/* One call's operands, for the row functions. */
typedef struct sm_call {
    const amp_softmax_desc *d;
    const void *x, *y, *dy;
    void *out;
} sm_call;

/* The row read in place (f32) or widened into buf, its exps in buf + cols, the output written
 * from them (softmax) or from the row (log-softmax), then narrowed if half: vector loops. */
AMP_CPU_CLONED(static, void, fwd_row, (void *ctx, int64_t row, float *buf),
               (ctx, row, buf)) {
    const sm_call *c = ctx;
    const amp_softmax_desc *d = c->d;
    int64_t cols = d->cols, base = row * cols;
    const float *v = tile_in(c->x, d->dt, base, cols, buf);
    float *e = buf + cols, m, sum;
    amp_cpu_row_max_sumexp(v, cols, e, &m, &sum);
    float *y = tile_out(c->out, d->dt, base, e);
    if (m == -INFINITY) { /* fully masked: 0, or -inf for log-softmax (amp_softmax_out) */
        for (int64_t j = 0; j < cols; j++) y[j] = d->log ? -INFINITY : 0.0f;
    } else if (d->log) {
        float ls = amp_logf(sum);
        for (int64_t j = 0; j < cols; j++) y[j] = (v[j] - m) - ls;
    } else {
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < cols; j++) y[j] = amp_mul_rn(e[j], inv);
    }
    tile_out_store(c->out, d->dt, base, cols, y);
}

static void bwd_row(void *ctx, int64_t row, float *t) {
    const sm_call *c = ctx;
    const amp_softmax_desc *d = c->d;
    int64_t cols = d->cols, base = row * cols;
    for (int64_t j = 0; j < cols; j++) {
        float g = amp_load_f32(c->dy, d->dt, base + j);
        t[j] = d->log ? g : amp_mul_rn(g, amp_load_f32(c->y, d->dt, base + j));
    }
    float r = amp_cpu_row_sum(t, cols);
    for (int64_t j = 0; j < cols; j++)
        amp_store_f32(c->out, d->dt, base + j,
                      amp_softmax_dx(amp_load_f32(c->y, d->dt, base + j),
                                     amp_load_f32(c->dy, d->dt, base + j), r, d->log));
}

amp_status amp_cpu_softmax_fwd(amp_device_ctx *dev, const amp_softmax_desc *d, const void *x,
                               void *y) {
    AMP_TRY(amp_backend_check_softmax(__func__, d));
    if (d->rows == 0) return AMP_OK;
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    sm_call c = {.d = d, .x = x, .out = y};
    return amp_cpu_each_row(__func__, d->rows, 2 * d->cols, fwd_row, &c);
}

amp_status amp_cpu_softmax_bwd(amp_device_ctx *dev, const amp_softmax_desc *d, const void *y,
                               const void *dy, void *dx) {
    AMP_TRY(amp_backend_check_softmax(__func__, d));
    if (d->rows == 0) return AMP_OK;
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(dx);
    sm_call c = {.d = d, .y = y, .dy = dy, .out = dx};
    return amp_cpu_each_row(__func__, d->rows, d->cols, bwd_row, &c);
}
