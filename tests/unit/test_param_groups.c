/* Parameter groups (torch.optim's param_groups): an optimizer with groups steps every parameter
 * bit for bit as separate optimizers over each group's parameters with that group's lr and
 * weight decay would (AdamW with nanoGPT's no-decay group for tensors under 2-D; SGD with
 * momentum and a per-group lr); set_lr sets every group, set_group_lr one; a checkpoint carries
 * each group's lr and refuses an optimizer grouped otherwise; bad groups (empty, unknown name,
 * negative lr, after the first step) are refused with nothing changed; LAMB's clipping over two
 * groups is refused with the way out. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp/amp.h"
#include "core/tensor_internal.h"
#include "optim/optimizer_internal.h"
#include "test_util.h"

typedef struct rig {
    amp_ctx *ctx;
    amp_model *m;
    amp_tensor *x, *y;
} rig;

static void rig_make(rig *r) {
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 11}, &r->ctx));
    CHECK_OK(amp_seq_create(r->ctx, &r->m));
    CHECK_OK(amp_seq_add_linear(r->m, "fc1", 6, 5, true));
    CHECK_OK(amp_seq_add_relu(r->m, NULL));
    CHECK_OK(amp_seq_add_linear(r->m, "fc2", 5, 3, true));
    CHECK_OK(amp_model_build(r->m));
    float xh[4 * 6], yh[4 * 3];
    for (int i = 0; i < 24; i++) xh[i] = sinf(0.7f * (float)i);
    for (int i = 0; i < 12; i++) yh[i] = cosf(0.3f * (float)i);
    CHECK_OK(amp_tensor_from_host(r->ctx, AMP_F32, 2, (int64_t[]){4, 6}, xh, &r->x));
    CHECK_OK(amp_tensor_from_host(r->ctx, AMP_F32, 2, (int64_t[]){4, 3}, yh, &r->y));
}

static void rig_free(rig *r) {
    amp_tensor_free(r->x);
    amp_tensor_free(r->y);
    amp_model_free(r->m);
    amp_ctx_free(r->ctx);
}

/* One forward and backward; the caller steps. */
static void rig_backward(rig *r) {
    amp_tensor *out, *loss;
    CHECK_OK(amp_model_forward(r->m, r->x, &out));
    CHECK_OK(amp_mse_loss(out, r->y, &loss));
    CHECK_OK(amp_backward(loss));
}

static bool below_2d(const char *name, const amp_tensor *p, void *user) {
    (void)name, (void)user;
    return amp_tensor_ndim(p) < 2;
}

static bool same_params(const rig *a, const rig *b) {
    bool same = true;
    for (int i = 0; i < amp_model_n_params(a->m); i++) {
        const amp_tensor *p = amp_model_param(a->m, i), *q = amp_model_param(b->m, i);
        same &= memcmp(p->data, q->data, amp_tensor_nbytes(p)) == 0;
    }
    return same;
}

/* The model's parameters where keep(i), in order, with their names. */
static int subset(const rig *r, bool weights, amp_tensor **ps, const char **names) {
    int n = 0;
    for (int i = 0; i < amp_model_n_params(r->m); i++) {
        amp_tensor *p = amp_model_param(r->m, i);
        if ((amp_tensor_ndim(p) >= 2) != weights) continue;
        ps[n] = p;
        names[n++] = amp_model_param_name(r->m, i);
    }
    return n;
}

static void zero_grads(rig *r) {
    for (int i = 0; i < amp_model_n_params(r->m); i++) amp_tensor_zero_grad(amp_model_param(r->m, i));
    amp_ctx_reset_step(r->ctx);
}

static void test_adamw_no_decay_group(void) {
    rig a, b;
    rig_make(&a);
    rig_make(&b);
    amp_adam_opts o = amp_adam_defaults();
    o.lr = 0.01f;
    o.decoupled = true;
    o.weight_decay = 0.1f;
    amp_optimizer *grouped = NULL;
    CHECK_OK(amp_adam_create(a.m, &o, &grouped));
    int g = -1;
    CHECK_OK(amp_optimizer_add_group(grouped, below_2d, NULL,
                                     &(amp_param_group_opts){.lr = 0.01f, .weight_decay = 0.0f}, &g));
    CHECK(g == 1 && amp_optimizer_n_groups(grouped) == 2);
    CHECK(amp_optimizer_param_group(grouped, 0) == 0 && amp_optimizer_param_group(grouped, 1) == 1);
    CHECK(amp_optimizer_group_weight_decay(grouped, 1) == 0.0f);
    /* The twin: one AdamW over the weights (decay 0.1), one over the biases (decay 0). */
    amp_tensor *ps[4];
    const char *names[4];
    amp_optimizer *decay = NULL, *no_decay = NULL;
    int nw = subset(&b, true, ps, names);
    CHECK_OK(amp_adam_create_params(ps, names, nw, &o, &decay));
    amp_adam_opts o0 = o;
    o0.weight_decay = 0.0f;
    int nb = subset(&b, false, ps, names);
    CHECK_OK(amp_adam_create_params(ps, names, nb, &o0, &no_decay));
    for (int step = 0; step < 3; step++) {
        rig_backward(&a);
        rig_backward(&b);
        CHECK_OK(amp_optimizer_step(grouped));
        CHECK_OK(amp_optimizer_step(decay));
        CHECK_OK(amp_optimizer_step(no_decay));
        zero_grads(&a);
        zero_grads(&b);
    }
    CHECK(same_params(&a, &b));
    /* A group may not be added after the first step. */
    CHECK_FAILS(amp_optimizer_add_group(grouped, below_2d, NULL,
                                        &(amp_param_group_opts){.lr = 0.01f}, NULL),
                AMP_ERR_STATE, "before the first step");
    CHECK(amp_optimizer_n_groups(grouped) == 2);
    amp_optimizer_free(decay);
    amp_optimizer_free(no_decay);
    amp_optimizer_free(grouped);
    rig_free(&a);
    rig_free(&b);
}

static void test_sgd_group_lr(void) {
    rig a, b;
    rig_make(&a);
    rig_make(&b);
    amp_sgd_opts o = amp_sgd_defaults();
    o.lr = 0.05f;
    o.momentum = 0.9f;
    amp_optimizer *grouped = NULL, *w = NULL, *bias = NULL;
    CHECK_OK(amp_sgd_create(a.m, &o, &grouped));
    const char *fc2[] = {"fc2.weight", "fc2.bias"};
    CHECK_FAILS(amp_optimizer_add_group_named(grouped, (const char *[]){"fc9.weight"}, 1,
                                              &(amp_param_group_opts){.lr = 0.2f}, NULL),
                AMP_ERR_INVALID_ARG, "no parameter named 'fc9.weight'");
    CHECK_FAILS(amp_optimizer_add_group_named(grouped, fc2, 2,
                                              &(amp_param_group_opts){.lr = -1.0f}, NULL),
                AMP_ERR_INVALID_ARG, "g->lr = -1");
    CHECK_FAILS(amp_optimizer_add_group(grouped, below_2d, NULL,
                                        &(amp_param_group_opts){.lr = NAN}, NULL),
                AMP_ERR_INVALID_ARG, "finite");
    CHECK(amp_optimizer_n_groups(grouped) == 1 && amp_optimizer_param_group(grouped, 3) == 0);
    int g;
    CHECK_OK(amp_optimizer_add_group_named(grouped, fc2, 2, &(amp_param_group_opts){.lr = 0.2f}, &g));
    CHECK(amp_optimizer_group_lr(grouped, 1) == 0.2f && amp_optimizer_lr(grouped) == 0.05f);
    /* fc2 moves to a group of its own: fc2's bias is no longer in group 0 either. */
    CHECK(amp_optimizer_param_group(grouped, 2) == 1 && amp_optimizer_param_group(grouped, 3) == 1);
    amp_tensor *ps[4] = {amp_model_param(b.m, 0), amp_model_param(b.m, 1), amp_model_param(b.m, 2),
                         amp_model_param(b.m, 3)};
    CHECK_OK(amp_sgd_create_params(ps, NULL, 2, &o, &w));
    amp_sgd_opts o2 = o;
    o2.lr = 0.2f;
    CHECK_OK(amp_sgd_create_params(ps + 2, NULL, 2, &o2, &bias));
    for (int step = 0; step < 3; step++) {
        rig_backward(&a);
        rig_backward(&b);
        CHECK_OK(amp_optimizer_step(grouped));
        CHECK_OK(amp_optimizer_step(w));
        CHECK_OK(amp_optimizer_step(bias));
        zero_grads(&a);
        zero_grads(&b);
    }
    CHECK(same_params(&a, &b));
    /* set_lr sets every group; set_group_lr one. */
    CHECK_OK(amp_optimizer_set_lr(grouped, 0.5f));
    CHECK(amp_optimizer_group_lr(grouped, 0) == 0.5f && amp_optimizer_group_lr(grouped, 1) == 0.5f);
    CHECK_OK(amp_optimizer_set_group_lr(grouped, 1, 0.25f));
    CHECK(amp_optimizer_group_lr(grouped, 0) == 0.5f && amp_optimizer_group_lr(grouped, 1) == 0.25f);
    CHECK_FAILS(amp_optimizer_set_group_lr(grouped, 2, 0.1f), AMP_ERR_INVALID_ARG, "group 2");

    /* A checkpoint carries group 1's lr; an optimizer grouped otherwise is refused. */
    char dir[512], path[600];
    const char *tmp = getenv("AMP_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/param_groups_ckpt", tmp ? tmp : "/tmp");
    CHECK_OK(amp_checkpoint_save(dir, 3, a.m, grouped, NULL, path, sizeof path));
    CHECK_OK(amp_optimizer_set_group_lr(grouped, 1, 0.125f));
    CHECK_OK(amp_checkpoint_load(path, a.m, grouped, NULL, NULL));
    CHECK(amp_optimizer_group_lr(grouped, 1) == 0.25f && amp_optimizer_group_lr(grouped, 0) == 0.5f);
    amp_optimizer *plain = NULL;
    CHECK_OK(amp_sgd_create(b.m, &o, &plain));
    CHECK_FAILS(amp_checkpoint_load(path, b.m, plain, NULL, NULL), AMP_ERR_SHAPE,
                "other parameter groups");
    amp_optimizer_free(plain);
    amp_optimizer_free(w);
    amp_optimizer_free(bias);
    amp_optimizer_free(grouped);
    rig_free(&a);
    rig_free(&b);
}

static bool nothing(const char *name, const amp_tensor *p, void *user) {
    (void)name, (void)p, (void)user;
    return false;
}

static void test_refusals(void) {
    rig r;
    rig_make(&r);
    amp_optimizer *lamb = NULL;
    CHECK_OK(amp_lamb_create(r.m, &(amp_lamb_opts){.lr = 1e-3f, .max_grad_norm = 1.0f}, &lamb));
    CHECK_FAILS(amp_optimizer_add_group(lamb, nothing, NULL, &(amp_param_group_opts){.lr = 1.0f},
                                        NULL),
                AMP_ERR_INVALID_ARG, "no parameter");
    CHECK_OK(amp_optimizer_add_group(lamb, below_2d, NULL, &(amp_param_group_opts){.lr = 1e-3f},
                                     NULL));
    rig_backward(&r);
    float before[30];
    CHECK_OK(amp_tensor_to_host(amp_model_param(r.m, 0), before, sizeof before));
    CHECK_FAILS(amp_optimizer_step(lamb), AMP_ERR_UNSUPPORTED, "amp_clip_grad_norm");
    float after[30];
    CHECK_OK(amp_tensor_to_host(amp_model_param(r.m, 0), after, sizeof after));
    CHECK(memcmp(before, after, sizeof before) == 0);
    amp_optimizer_free(lamb);
    rig_free(&r);
}

int main(void) {
    test_adamw_no_decay_group();
    test_sgd_group_lr();
    test_refusals();
    return test_summary("test_param_groups");
}
