/* Pointwise functions: exp, log, tanh, sigmoid, SiLU, GELU (kernels/math/transcendental.h, the
 * same bits on every backend). Cast categories as torch.amp's CUDA lists: exp and log run in f32
 * under autocast (its fp32 list), tanh, sigmoid, SiLU and GELU in their input's dtype. Each
 * backward is one binary pass, with PyTorch's formula: exp from its output (dy y), log from its
 * input (dy / x), tanh and sigmoid from their outputs, SiLU and GELU from their inputs. */
#include "core/error.h"
#include "core/tensor_internal.h"
#include "nn/autocast.h"

typedef struct pointwise_op {
    const char *api, *name;
    amp_unary_op fwd;
    amp_binary_op bwd;
    bool bwd_from_output; /* the backward's first operand: y (else x) */
    amp_cast_category cat;
} pointwise_op;

static const pointwise_op EXP = {"amp_exp", "exp", AMP_UNARY_EXP, AMP_BINARY_MUL, true,
                                 AMP_CAT_WIDEN};
static const pointwise_op LOG = {"amp_log", "log", AMP_UNARY_LOG, AMP_BINARY_DIV, false,
                                 AMP_CAT_WIDEN};
static const pointwise_op TANH = {"amp_tanh", "tanh", AMP_UNARY_TANH, AMP_BINARY_TANH_BWD, true,
                                  AMP_CAT_PASS};
static const pointwise_op SIGMOID = {"amp_sigmoid", "sigmoid", AMP_UNARY_SIGMOID,
                                     AMP_BINARY_SIGMOID_BWD, true, AMP_CAT_PASS};
static const pointwise_op SILU = {"amp_silu", "silu", AMP_UNARY_SILU, AMP_BINARY_SILU_BWD, false,
                                  AMP_CAT_PASS};
static const pointwise_op GELU_TANH = {"amp_gelu", "gelu_tanh", AMP_UNARY_GELU_TANH,
                                       AMP_BINARY_GELU_TANH_BWD, false, AMP_CAT_PASS};
static const pointwise_op GELU_ERF = {"amp_gelu", "gelu", AMP_UNARY_GELU_ERF,
                                      AMP_BINARY_GELU_ERF_BWD, false, AMP_CAT_PASS};

static amp_status pointwise_bwd(amp_tape_node *node, const amp_tensor *dy) {
    const pointwise_op *f = *(const pointwise_op *const *)node->aux;
    const amp_tensor *v = f->bwd_from_output ? node->out : node->in[0];
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(node->in[0], &s));
    /* log's dx = dy / x is DIV(dy, x); the others take (value, dy) in their op's order. */
    if (s.buf && f->bwd == AMP_BINARY_DIV)
        AMP_TRY(AMP_BE(dy->backend, binary, f->bwd, dy->dtype, dy->numel, dy->data, v->data,
                       s.buf->data));
    else if (s.buf)
        AMP_TRY(AMP_BE(dy->backend, binary, f->bwd, dy->dtype, dy->numel, v->data, dy->data,
                       s.buf->data));
    return amp_grad_end(&s);
}

static amp_status pointwise_run(const pointwise_op *f, amp_tensor *x, amp_tensor **out) {
    AMP_CHECK_ARG(out);
    AMP_TRY(amp_check_tensor(f->api, "x", x, 0));
    AMP_TRY(amp_autocast(f->cat, &x, 1));
    AMP_TRY(amp_check_float(f->api, "x", x));
    amp_tensor *y;
    AMP_TRY(amp_tensor_step_like(x, x->dtype, &y));
    AMP_TRY(AMP_BE(x->backend, unary, f->fwd, x->dtype, x->numel, x->data, 0.0f, y->data));
    amp_tape_node *node;
    AMP_TRY(amp_record(y, f->name, "x", pointwise_bwd, 1, &x, sizeof f, &node));
    /* Its backward reads y or x, whichever its formula takes. */
    amp_node_unread(node, f->bwd_from_output ? 1u : 0u, !f->bwd_from_output);
    if (node) *(const pointwise_op **)node->aux = f;
    *out = y;
    return AMP_OK;
}

amp_status amp_exp(amp_tensor *x, amp_tensor **out) { return pointwise_run(&EXP, x, out); }
amp_status amp_log(amp_tensor *x, amp_tensor **out) { return pointwise_run(&LOG, x, out); }
amp_status amp_tanh(amp_tensor *x, amp_tensor **out) { return pointwise_run(&TANH, x, out); }
amp_status amp_sigmoid(amp_tensor *x, amp_tensor **out) { return pointwise_run(&SIGMOID, x, out); }
amp_status amp_silu(amp_tensor *x, amp_tensor **out) { return pointwise_run(&SILU, x, out); }
amp_status amp_gelu(amp_tensor *x, bool tanh_approximation, amp_tensor **out) {
    return pointwise_run(tanh_approximation ? &GELU_TANH : &GELU_ERF, x, out);
}
