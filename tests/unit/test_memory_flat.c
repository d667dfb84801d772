/* Memory follows what a PyTorch user expects, without a reset in the loop (the memory ledger,
 * amp/memory.h, counts every backend block of the context):
 *  - an evaluation loop (gradients disabled, eval mode) over 200 batches of the MLP at batch 256
 *    holds what one batch needs: flat within 1 MiB after the first batch, at O0 and O1 (it grew
 *    by 4 MiB a batch, 802 MiB over 200, when every batch's activations lived until a reset);
 *  - gradient accumulation over 8 micro-batches of 256 holds one micro-batch's activations:
 *    flat within 1 MiB after the first backward (it grew 3.2 -> 25.7 MiB);
 *  - what the caller still needs stays readable by the documented rule: a no-grad forward's
 *    output until the next one (then it is refused, naming amp_tensor_keep); the loss after its
 *    backward and after the step, until amp_zero_grad; logits kept with amp_tensor_keep after
 *    backward; without the keep, an error that names it;
 *  - the same on the CUDA backend where one answers (a GPU, or cudacpu), with a small MLP and
 *    fewer batches (the emulation runs the GEMMs on this CPU). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "test_devices.h"
#include "test_util.h"

#define NAME "test_memory_flat"
enum { BATCH = 256, IN = 784, CLASSES = 10, EVAL_BATCHES = 200, MICRO = 8 };
/* The CUDA runs: a batch of 32 through 784 -> 64 -> 10, 30 evaluation batches, 4 micro-batches. */
enum { DEV_BATCH = 32, DEV_EVAL_BATCHES = 30, DEV_MICRO = 4 };
#define MIB 1048576.0

static size_t ledger_total(amp_ctx *ctx) {
    amp_mem_usage now;
    CHECK_OK(amp_ctx_memory_usage(ctx, &now, NULL));
    return now.total;
}

typedef struct rig {
    amp_ctx *ctx;
    amp_model *m;
    amp_optimizer *opt;
    amp_tensor *x, *y;
    int batch, eval_batches, micro;
} rig;

static bool rig_make(rig *r, amp_device device, amp_opt_level level) {
    bool cuda = device == AMP_DEVICE_CUDA;
    *r = (rig){.batch = cuda ? DEV_BATCH : BATCH,
               .eval_batches = cuda ? DEV_EVAL_BATCHES : EVAL_BATCHES,
               .micro = cuda ? DEV_MICRO : MICRO};
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 8}, &r->ctx));
    if (!r->ctx) return false;
    if (cuda) {
        CHECK_OK(amp_seq_create(r->ctx, &r->m));
        CHECK_OK(amp_seq_add_flatten(r->m, "flatten"));
        CHECK_OK(amp_seq_add_linear(r->m, "fc1", IN, 64, true));
        CHECK_OK(amp_seq_add_relu(r->m, "relu"));
        CHECK_OK(amp_seq_add_linear(r->m, "fc2", 64, CLASSES, true));
    } else {
        CHECK_OK(amp_model_mlp_mnist(r->ctx, &r->m));
    }
    CHECK_OK(amp_sgd_create(r->m, &(amp_sgd_opts){.lr = 0.01f, .momentum = 0.9f}, &r->opt));
    CHECK_OK(amp_initialize_ex(r->m, r->opt, &(amp_options){.opt_level = level,
                                                             .half_type = AMP_HALF_BF16,
                                                             .quiet = true}));
    float *xs = malloc(sizeof(float) * BATCH * IN);
    int32_t ys[BATCH];
    for (int i = 0; xs && i < BATCH * IN; i++) xs[i] = (float)sin(0.01 * i);
    for (int i = 0; i < BATCH; i++) ys[i] = i % CLASSES;
    if (xs)
        CHECK_OK(amp_tensor_from_host(r->ctx, AMP_F32, 4, (int64_t[]){r->batch, 1, 28, 28}, xs,
                                      &r->x));
    CHECK_OK(amp_tensor_from_host(r->ctx, AMP_I32, 1, (int64_t[]){r->batch}, ys, &r->y));
    free(xs);
    return r->opt && r->x && r->y;
}

static void rig_free(rig *r) {
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    amp_optimizer_free(r->opt);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
}

static void test_eval_loop(amp_device device, amp_opt_level level) {
    rig r;
    if (!rig_make(&r, device, level)) {
        rig_free(&r);
        return;
    }
    CHECK_OK(amp_model_train(r.m, false));
    bool was = amp_set_grad_enabled(r.ctx, false);
    size_t first = 0, worst = 0;
    int32_t pred[BATCH];
    amp_tensor *prev = NULL;
    for (int b = 0; b < r.eval_batches; b++) {
        amp_tensor *logits = NULL;
        CHECK_OK(amp_model_forward(r.m, r.x, &logits));
        if (!logits) break;
        CHECK_OK(amp_tensor_argmax_rows(logits, pred, r.batch));
        if (prev) { /* the previous batch's output went with this forward */
            CHECK_FAILS(amp_tensor_argmax_rows(prev, pred, r.batch), AMP_ERR_STATE,
                        "amp_tensor_keep");
        }
        prev = logits;
        size_t now = ledger_total(r.ctx);
        if (b == 0) first = now;
        if (now > worst) worst = now;
    }
    CHECK_MSG(worst - first < MIB, "%s O%d: an evaluation loop of %d batches grew from %.1f to "
              "%.1f MiB", amp_ctx_backend_name(r.ctx), (int)level, r.eval_batches, first / MIB,
              worst / MIB);
    amp_set_grad_enabled(r.ctx, was);
    rig_free(&r);
}

static void test_accumulation(amp_device device, amp_opt_level level) {
    rig r;
    if (!rig_make(&r, device, level)) {
        rig_free(&r);
        return;
    }
    size_t first = 0, worst = 0;
    amp_tensor *losses[MICRO] = {0}, *kept = NULL, *unkept = NULL;
    for (int k = 0; k < r.micro; k++) {
        amp_tensor *logits = NULL, *loss = NULL;
        CHECK_OK(amp_model_forward(r.m, r.x, &logits));
        if (!logits) break;
        if (k == 0) {
            CHECK_OK(amp_tensor_keep(logits)); /* for an accuracy after the step */
            kept = logits;
        } else if (k == 1) {
            unkept = logits;
        }
        CHECK_OK(amp_cross_entropy(logits, r.y, &loss));
        CHECK_OK(amp_div_scalar(loss, (float)r.micro, &losses[k]));
        CHECK_OK(amp_backward(losses[k]));
        size_t now = ledger_total(r.ctx);
        if (k == 0) first = now;
        if (now > worst) worst = now;
    }
    CHECK_MSG(worst - first < MIB, "%s O%d: %d micro-batches grew from %.1f to %.1f MiB",
              amp_ctx_backend_name(r.ctx), (int)level, r.micro, first / MIB, worst / MIB);
    CHECK_OK(amp_step(r.opt, NULL));
    /* Every micro-batch's loss and the kept logits are readable after the step; the logits that
     * were not kept are refused with a message that says how to keep them. */
    float sum = 0, l = 0;
    for (int k = 0; k < r.micro; k++) {
        CHECK_OK(amp_tensor_item(losses[k], &l));
        sum += l;
    }
    CHECK_MSG(isfinite(sum) && sum > 0.5f && sum < 5.0f, "O%d: the losses sum to %g", (int)level,
              (double)sum);
    int32_t pred[BATCH];
    if (kept) CHECK_OK(amp_tensor_argmax_rows(kept, pred, r.batch));
    if (unkept)
        CHECK_FAILS(amp_tensor_argmax_rows(unkept, pred, r.batch), AMP_ERR_STATE, "amp_tensor_keep");
    CHECK_OK(amp_zero_grad(r.opt));
    CHECK_FAILS(amp_tensor_item(losses[0], &l), AMP_ERR_STATE, "step that has ended");
    rig_free(&r);
}

static void body(amp_device device) {
    for (int level = AMP_O0; level <= AMP_O1; level++) {
        test_eval_loop(device, (amp_opt_level)level);
        test_accumulation(device, (amp_opt_level)level);
    }
}

int main(void) {
    test_on_each_device(body);
    return test_summary(NAME);
}
