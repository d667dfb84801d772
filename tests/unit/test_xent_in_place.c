/* Cross-entropy's gradient written over its logits (nn/autograd.h: amp_grad_over_input), on
 * every device that answers, in f32 and bf16, through a head as the language models run it
 * (amp_linear over [B, T, C], amp_lm_loss over a padded vocabulary):
 *  - with the logits dropped the loss and every gradient are those of the logits kept, bit for
 *    bit, and the step's data peak is lower by at least the logits' bytes;
 *  - logits the caller keeps (amp_tensor_keep) are never written: their bits after the
 *    backward are those of the forward;
 *  - a retained graph is never written over: a second backward adds the same gradient again
 *    (exactly twice the first);
 *  - logits another op's backward still reads (x * x recorded before the loss) are never written
 *    over: the gradients are those of the logits kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "amp/amp.h"
#include "amp/models/lm.h"
#include "core/ctx.h"
#include "test_devices.h"
#include "test_tensors.h"
#include "test_util.h"

#define NAME "test_xent_in_place"
enum { B = 2, T = 24, C = 32, VOCAB = 100 };

/* How the logits are used: dropped by the caller, kept to be read after the backward
 * (amp_tensor_keep) or neither, the graph retained for a second
 * backward, another op (logits * logits, recorded before the loss) reading them too. */
typedef struct mode {
    bool drop, keep, retain, other;
} mode;



/* The gradient of a leaf, and twice it (an f32 leaf: doubling is exact). */
static void grad_hashes(amp_tensor *t, uint64_t *once, uint64_t *twice) {
    amp_tensor *g = NULL;
    CHECK_OK(amp_tensor_get_grad(t, &g));
    if (!g) {
        *once = *twice = 0;
        return;
    }
    int64_t n = amp_tensor_numel(g);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) abort();
    CHECK_OK(amp_tensor_to_host(g, v, (size_t)n * sizeof *v));
    uint64_t h = 0xcbf29ce484222325ull, h2 = h;
    for (int64_t i = 0; i < n; i++) {
        float d = v[i] * 2.0f;
        const unsigned char *b = (const unsigned char *)&v[i], *b2 = (const unsigned char *)&d;
        for (int k = 0; k < 4; k++) {
            h = (h ^ b[k]) * 0x100000001b3ull;
            h2 = (h2 ^ b2[k]) * 0x100000001b3ull;
        }
    }
    free(v);
    *once = h;
    *twice = h2;
}

typedef struct result {
    uint64_t loss, dx, dw, dx2, dw2;
    size_t peak;
    size_t logits_bytes;
} result;

static void run(amp_device dev, amp_dtype dt, mode m, result *r) {
    amp_ctx *ctx = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = dev, .seed = 1}, &ctx));
    int64_t padded = amp_lm_padded_vocab(VOCAB);
    amp_tensor *x = test_sin_leaf(ctx, AMP_F32, 3, (const int64_t[]){B, T, C}, 0.37, 1.0, 0.0);
    amp_tensor *w = test_sin_leaf(ctx, AMP_F32, 2, (const int64_t[]){padded, C}, 0.11, 0.5, 0.0);
    int32_t labels[B * T];
    for (int i = 0; i < B * T; i++) labels[i] = (i * 37) % VOCAB;
    labels[5] = -100; /* an ignored position */
    amp_tensor *targets = NULL, *xh = NULL, *wh = NULL, *logits = NULL, *loss = NULL, *sq = NULL;
    CHECK_OK(amp_tensor_from_host(ctx, AMP_I32, 2, (const int64_t[]){B, T}, labels, &targets));
    CHECK_OK(amp_cast(x, dt, &xh));
    CHECK_OK(amp_cast(w, dt, &wh));
    CHECK_OK(amp_linear(xh, wh, NULL, &logits));
    r->logits_bytes = (size_t)amp_tensor_numel(logits) * amp_dtype_size(dt);
    uint64_t forward_bits = test_tensor_hash(logits);
    if (m.other) CHECK_OK(amp_mul(logits, logits, &sq));
    CHECK_OK(amp_lm_loss(logits, targets, VOCAB, &loss));
    if (m.other) {
        amp_tensor *mq = NULL, *f32 = NULL;
        CHECK_OK(amp_mean(sq, &mq));
        CHECK_OK(amp_cast(mq, AMP_F32, &f32));
        CHECK_OK(amp_add(loss, f32, &loss));
    }
    if (m.drop) CHECK_OK(amp_tensor_drop(logits));
    if (m.keep) CHECK_OK(amp_tensor_keep(logits));
    r->loss = test_tensor_hash(loss);
    amp_backward_opts bo = {.retain_graph = m.retain};
    CHECK_OK(amp_backward_with(loss, &bo));
    r->peak = ctx->data_arena.step_peak;
    grad_hashes(x, &r->dx, &r->dx2);
    grad_hashes(w, &r->dw, &r->dw2);
    if (m.keep)
        CHECK_MSG(test_tensor_hash(logits) == forward_bits, "%s: logits the caller kept changed in the "
                  "backward", amp_dtype_name(dt));
    if (m.retain) { /* the second backward must find the logits as the forward left them */
        bo.retain_graph = false;
        CHECK_OK(amp_backward_with(loss, &bo));
        uint64_t dx, dw, unused;
        grad_hashes(x, &dx, &unused);
        grad_hashes(w, &dw, &unused);
        CHECK_MSG(dx == r->dx2 && dw == r->dw2, "%s: a retained graph's second backward did not "
                  "add the same gradient again", amp_dtype_name(dt));
    }
    amp_ctx_reset_step(ctx);
    amp_tensor_free(targets);
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_ctx_free(ctx);
}

static void same(const result *a, const result *b, const char *dn, const char *what) {
    CHECK_MSG(a->loss == b->loss && a->dx == b->dx && a->dw == b->dw, "%s, %s: the loss or a "
              "gradient differs from the logits kept", dn, what);
}

static void body(amp_device dev) {
    const amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    for (int d = 0; d < 2; d++) {
        const char *dn = amp_dtype_name(dts[d]);
        result keep, kept, drop, retain, other_keep, other_drop;
        run(dev, dts[d], (mode){0}, &keep);
        run(dev, dts[d], (mode){.keep = true}, &kept);
        run(dev, dts[d], (mode){.drop = true}, &drop);
        run(dev, dts[d], (mode){.drop = true, .retain = true}, &retain);
        run(dev, dts[d], (mode){.other = true}, &other_keep);
        run(dev, dts[d], (mode){.drop = true, .other = true}, &other_drop);
        same(&kept, &keep, dn, "logits kept to be read");
        same(&drop, &keep, dn, "logits dropped");
        same(&retain, &keep, dn, "logits dropped, graph retained");
        same(&other_drop, &other_keep, dn, "logits dropped and read by logits * logits");
        CHECK_MSG(other_keep.dw != keep.dw, "%s: the control's x * x term changed no gradient", dn);
        CHECK_MSG(drop.peak + drop.logits_bytes <= keep.peak, "%s: the data peak is %zu bytes with "
                  "the logits dropped, %zu kept: want at least the logits' %zu less", dn,
                  drop.peak, keep.peak, drop.logits_bytes);
        printf("%s: data peak %zu bytes with the logits kept, %zu dropped (logits %zu)\n", dn,
               keep.peak, drop.peak, drop.logits_bytes);
    }
}

int main(void) {
    test_on_each_device(body);
    return test_summary(NAME);
}
