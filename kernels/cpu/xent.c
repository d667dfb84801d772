/* CPU backend: softmax cross-entropy over a large vocabulary (xent_fwd, xent_bwd), the arithmetic
 * and order of kernels/math/xent.h, so the CUDA backend gives the same bits.
 *  - Forward: rows in parallel (amp_cpu_each_row), each read in place (f32) or widened once
 *    into the thread's f32 buffer; the row's max and sum of exps in a warp's order, its logsumexp and loss written to
 *    stats; then the losses' total over 256 double lanes and their tree, in one thread (rows
 *    terms, nothing next to the rows * classes exps).
 *  - Backward: rows in parallel, the softmax recomputed from the logits and the saved
 *    logsumexp in vector loops; nothing of size rows * classes is kept between the two. A half
 *    row is widened whole before anything is written and an f32 one is written element by
 *    element after its read, so dlogits may be the logits.
 * A row's padding columns (after its classes) are not read by the forward; the backward writes
 * their gradient 0. A label outside [0, classes) other than ignore_index fails naming its row,
 * checked before anything is written. */
#include <math.h>

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_clones.h"
#include "kernels/cpu/cpu_tile.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/math/load_store.h"
#include "kernels/math/xent.h"

static amp_status check_labels(const char *fn, const amp_xent_desc *d, const int32_t *labels) {
    for (int64_t r = 0; r < d->rows; r++)
        if (labels[r] != d->ignore_index && (labels[r] < 0 || labels[r] >= d->classes))
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: label %d of row %lld is outside [0, %lld)",
                            fn, (int)labels[r], (long long)r, (long long)d->classes);
    return AMP_OK;
}

/* One call's operands, for the row functions. */
typedef struct xent_call {
    const amp_xent_desc *d;
    const void *logits;
    const int32_t *labels;
    float *stats;
    const float *cstats;
    float scale;
    void *dlogits;
} xent_call;

static void fwd_row(void *ctx, int64_t r, float *buf) {
    const xent_call *c = ctx;
    const amp_xent_desc *d = c->d;
    float *lse = c->stats, *row_loss = c->stats + d->rows;
    int32_t label = c->labels[r];
    if (label == d->ignore_index) {
        lse[r] = 0.0f;
        row_loss[r] = 0.0f;
        return;
    }
    int64_t classes = d->classes, base = r * (classes + d->padding);
    const float *v = tile_in(c->logits, d->dt, base, classes, buf);
    float m, s;
    amp_cpu_row_max_sumexp(v, classes, buf + classes, &m, &s);
    float sx = d->label_smoothing > 0.0f ? amp_cpu_row_sum(v, classes) : 0.0f;
    lse[r] = amp_xent_lse(m, s);
    row_loss[r] = amp_xent_row_loss(m, s, v[label], sx, classes, d->label_smoothing);
}

/* g: the row's gradient (dlogits itself when f32, else buf, narrowed after); the logits of a
 * half row are widened into buf first. exp(x - lse) in vector loops (vector_exp.h: the scalar
 * amp_expf's bits) where every x - lse is a number below 88 (always, with the forward's lse of
 * finite logits), else amp_xent_grad one element at a time. */
AMP_CPU_CLONED(static, void, bwd_row, (void *ctx, int64_t r, float *buf),
               (ctx, r, buf)) {
    const xent_call *c = ctx;
    const amp_xent_desc *d = c->d;
    int64_t classes = d->classes, width = classes + d->padding, base = r * width;
    int32_t label = c->labels[r];
    float *g = tile_out(c->dlogits, d->dt, base, buf);
    for (int64_t j = classes; j < width; j++) g[j] = 0.0f;
    if (label == d->ignore_index) {
        for (int64_t j = 0; j < classes; j++) g[j] = 0.0f;
        tile_out_store(c->dlogits, d->dt, base, width, g);
        return;
    }
    const float *v = tile_in(c->logits, d->dt, base, classes, buf);
    float lse = c->cstats[r], eps = d->label_smoothing, eps_c = eps / (float)classes;
    int in_range = 1;
    for (int64_t j = 0; j < classes; j++) in_range &= v[j] - lse <= 88.0f; /* false for NaN */
    if (in_range) {
        amp_cpu_exp_shifted(v, classes, lse, g);
        float e_label = g[label];
        for (int64_t j = 0; j < classes; j++) g[j] = amp_mul_rn(g[j] - eps_c, c->scale);
        g[label] = amp_mul_rn(e_label - ((1.0f - eps) + eps_c), c->scale);
    } else {
        for (int64_t j = 0; j < classes; j++)
            g[j] = amp_xent_grad(v[j], lse, j == label, eps, eps_c, c->scale);
    }
    tile_out_store(c->dlogits, d->dt, base, width, g);
}

amp_status amp_cpu_xent_fwd(amp_device_ctx *dev, const amp_xent_desc *d, const void *logits,
                            const int32_t *labels, float *stats, float *loss) {
    AMP_TRY(amp_backend_check_xent(__func__, d, labels));
    AMP_CHECK_ARG(stats);
    AMP_CHECK_ARG(loss);
    if (d->rows > 0) AMP_CHECK_ARG(logits);
    AMP_TRY(check_labels(__func__, d, labels));
    xent_call c = {.d = d, .logits = logits, .labels = labels, .stats = stats};
    AMP_TRY(amp_cpu_each_row(__func__, d->rows, 2 * d->classes, fwd_row, &c));
    double lane[AMP_XENT_TOTAL_LANES] = {0};
    int64_t count = 0;
    const float *row_loss = stats + d->rows;
    for (int64_t r = 0; r < d->rows; r++) {
        lane[r % AMP_XENT_TOTAL_LANES] += (double)row_loss[r];
        count += labels[r] != d->ignore_index;
    }
    for (int half = AMP_XENT_TOTAL_LANES / 2; half >= 1; half /= 2)
        for (int t = 0; t < half; t++) lane[t] += lane[t + half];
    stats[2 * d->rows] = (float)count;
    *loss = amp_xent_loss(lane[0], count, d->sum);
    return AMP_OK;
}

amp_status amp_cpu_xent_bwd(amp_device_ctx *dev, const amp_xent_desc *d, const void *logits,
                            const int32_t *labels, const float *stats, const float *dloss,
                            void *dlogits) {
    AMP_TRY(amp_backend_check_xent(__func__, d, labels));
    AMP_CHECK_ARG(dloss);
    if (d->rows == 0) return AMP_OK;
    AMP_CHECK_ARG(logits);
    AMP_CHECK_ARG(stats);
    AMP_CHECK_ARG(dlogits);
    AMP_TRY(check_labels(__func__, d, labels));
    xent_call c = {.d = d,
                   .logits = logits,
                   .labels = labels,
                   .cstats = stats,
                   .scale = amp_xent_scale(*dloss, stats[2 * d->rows], d->sum),
                   .dlogits = dlogits};
    return amp_cpu_each_row(__func__, d->rows, d->classes + d->padding, bwd_row, &c);
}
