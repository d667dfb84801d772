/* An MLP written by hand in llm.c's manner: the parameters registered one by one, each layer's
 * on a child model without a forward of its own (a '.' joins a path, so "fc1.weight" is the
 * entry "weight" of the child "fc1", as in torch), GPT-2's normal(0, 0.02) weights and zero
 * biases, one forward over the public ops on the root, and
 * AdamW with nanoGPT's parameter groups: weight decay on the 2-D tensors only. Its state_dict is
 * that of
 *
 *   class MLP(nn.Module):
 *       def __init__(s):
 *           super().__init__()
 *           s.fc1, s.fc2, s.fc3 = nn.Linear(784, 512), nn.Linear(512, 256), nn.Linear(256, 10)
 *       def forward(s, x):
 *           return s.fc3(F.relu(s.fc2(F.relu(s.fc1(x.flatten(1))))))
 *
 * (tests/python/test_example_state_dict.py loads it strictly).
 *   build/examples/mlp_groups [--epochs 2] [--ckpt DIR [--resume]] ...   (examples/example_loop.h)
 *   mpirun -np 2 build/examples/mlp_groups ...                           (DDP) */
#include "example_loop.h"

static const struct {
    const char *name;
    int64_t out, in;
} layers[3] = {{"fc1", 512, 784}, {"fc2", 256, 512}, {"fc3", 10, 256}};

/* Each layer's node and its parameter indices, as the registrations returned them. */
typedef struct mlp {
    amp_model *fc[3];
    int w[3], b[3];
} mlp;

static amp_status mlp_forward(amp_model *self, amp_tensor *const *in, int n, amp_tensor **out) {
    (void)n;
    const mlp *p = amp_model_user(self);
    amp_tensor *h;
    amp_status s = amp_flatten(in[0], &h);
    for (int l = 0; l < 3 && s == AMP_OK; l++) {
        s = amp_linear(h, amp_model_param(p->fc[l], p->w[l]), amp_model_param(p->fc[l], p->b[l]),
                       &h);
        if (s == AMP_OK && l < 2) s = amp_relu(h, &h);
    }
    *out = h;
    return s;
}

/* Layer l: a child of m under its name, holding weight [out, in] and bias [out]. */
static amp_status mlp_layer(amp_model *m, int l, mlp *p) {
    amp_model *fc = NULL;
    int64_t ws[2] = {layers[l].out, layers[l].in};
    amp_init normal = AMP_INIT_NORMAL_OF(0.0f, 0.02f);
    amp_status s = amp_model_create(amp_model_ctx(m), NULL, NULL, NULL, &fc);
    if (s == AMP_OK) s = amp_model_register_param(fc, "weight", 2, ws, normal, &p->w[l]);
    if (s == AMP_OK)
        s = amp_model_register_param(fc, "bias", 1, &layers[l].out, AMP_INIT_ZERO_VALUES, &p->b[l]);
    if (s == AMP_OK) s = amp_model_add_child(m, layers[l].name, fc);
    if (s != AMP_OK) amp_model_free(fc);
    else p->fc[l] = fc;
    return s;
}

static bool below_2d(const char *name, const amp_tensor *param, void *user) {
    (void)name, (void)user;
    return amp_tensor_ndim(param) < 2;
}

static amp_status make(amp_ctx *ctx, amp_model **m, amp_optimizer **opt) {
    mlp *p = calloc(1, sizeof *p);
    amp_status s = p ? amp_model_create(ctx, mlp_forward, p, free, m) : AMP_ERR_OOM;
    if (s != AMP_OK) return free(p), s;
    for (int l = 0; l < 3 && s == AMP_OK; l++) s = mlp_layer(*m, l, p);
    amp_adam_opts o = amp_adam_defaults(); /* nanoGPT's AdamW */
    o.lr = 1e-3f;
    o.beta2 = 0.95f;
    o.decoupled = true;
    o.weight_decay = 0.1f;
    if (s == AMP_OK) s = amp_adam_create(*m, &o, opt);
    amp_param_group_opts no_decay = {.lr = o.lr, .weight_decay = 0.0f};
    return s == AMP_OK ? amp_optimizer_add_group(*opt, below_2d, NULL, &no_decay, NULL) : s;
}

int main(int argc, char **argv) { return example_main(argc, argv, "mlp_groups", make); }
