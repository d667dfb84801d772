/* The backend interface: one table per device (CPU, CUDA), split by concern after ggml's
 * device/backend split: the device (memory, copies, streams, events, uploads, statistics: the
 * table's own fields), the kernels (`k`, generated from the one list of compute entries in
 * core/backend_kernels.def) and the optional collectives (`coll`, NULL where the device's memory
 * is host memory that parallel/ hands to MPI: the CPU).
 *
 * An op never asks which device it runs on: it calls its tensor's backend through
 * AMP_BE(be, entry, ...) (core/tensor_internal.h), which fails with AMP_ERR_UNSUPPORTED naming
 * the entry and the backend when the backend leaves the entry NULL, and goes through the entry's
 * counting function while an op profile runs. What an entry refuses (a dtype, a shape, a NULL
 * pointer) it refuses itself, with an error naming the culprit; every entry of both backends
 * takes f32, f16 and bf16 storage (cast also i32 <-> f32).
 *
 * Conventions for every entry:
 *  - pointers are backend memory; tensors are contiguous, row-major (NCHW for images, OIHW for
 *    convolution weights);
 *  - outputs are OVERWRITTEN (`=`), never accumulated: the autograd engine does accumulation;
 *  - arithmetic is in fp32 whatever the storage dtype (f16/bf16 are loaded, widened, computed,
 *    rounded to nearest even on store); f32 GEMM and convolution inputs stay true f32 unless the
 *    descriptor's allow_tf32 lets the CUDA backend round them to TF32;
 *  - results are deterministic: the same inputs give the same bits for a fixed thread count.
 *    Our own reductions sum fixed-size chunks in a fixed order and do not depend on it at all;
 *    oneDNN's GEMM (when it splits k) and convolution weight gradients do, so a context fixes
 *    the thread count before the first call. The one opt-out is a convolution descriptor's
 *    allow_nondeterministic;
 *  - "scalar" pointers (loss, dloss) are one f32 in backend memory, so no step needs a host sync.
 * An entry returns AMP_OK or an error after setting amp_last_error. */
#ifndef AMP_CORE_BACKEND_H
#define AMP_CORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a GEMM applies to its result before the one rounding to C's dtype (cuBLASLt's epilogues). */
typedef enum amp_gemm_epilogue {
    AMP_GEMM_EPILOGUE_NONE = 0,
    /* C = v > 0 or v NaN ? v : +0 with v = alpha op(A) op(B) + beta C + bias, on both backends
     * (kernels/math/relu.h's amp_relu_epilogue): PyTorch's relu, NaN kept, but for -0, which
     * becomes +0. Not cuBLASLt's RELU epilogue, which makes a NaN +0: the CUDA backend applies
     * it to C in a pass of its own. */
    AMP_GEMM_EPILOGUE_RELU = 1,
    /* aux = round(v), the pre-activation a plain GEMM would write to C, and C = GELU(aux) of the
     * rounded value, tanh approximation (GPT-2's) or exact erf (kernels/math/transcendental.h):
     * the bits of a GEMM into aux followed by the unary GELU entry, which the backward of
     * y = gelu(x @ w^T + b) reads aux for. Needs aux (C's dtype and strides, not overlapping C)
     * and beta = 0. On the CUDA backend the tanh form may instead be cuBLASLt's GELU_AUX_BIAS
     * epilogue (kernels/cuda/gemm.c): aux the same bits, C cuBLASLt's GELU of the unrounded v,
     * within 2^-p (2 |C| + 2 |aux|) of the formula above, p the explicit mantissa bits of C's
     * dtype (23, 7, 10): an ulp of aux through GELU's slope (at most 1.13) and the roundings. */
    AMP_GEMM_EPILOGUE_GELU_TANH = 2,
    AMP_GEMM_EPILOGUE_GELU_ERF = 3,
} amp_gemm_epilogue;

static inline bool amp_gemm_epilogue_is_gelu(amp_gemm_epilogue e) {
    return e == AMP_GEMM_EPILOGUE_GELU_TANH || e == AMP_GEMM_EPILOGUE_GELU_ERF;
}

/* C[m,n] = epilogue(alpha * op(A)[m,k] @ op(B)[k,n] + beta * C (+ bias[n] broadcast over rows, if
 * set)). Leading dimensions are in elements; op(X) = X^T when trans_x. bias is f32.
 * Numerics: f32 accumulation, alpha, beta and the bias applied in f32, one rounding to C's dtype.
 * With an f16/bf16 C the bias is rounded to C's dtype before it is added, on both backends
 * (cuBLASLt's bias epilogue takes a bias of the output's dtype, and the CUDA backend so writes
 * half outputs directly; PyTorch's autocast also casts a linear's bias to the half type):
 * C = round(v + round(bias)), one rounding of the sum, the bias off by at most half a unit of
 * C's dtype (2^-9 |bias| for bf16, 2^-12 |bias| for f16).
 * Fields appended after bias (zero: the plain GEMM above):
 *  - epilogue: see amp_gemm_epilogue;
 *  - bias_grad: when set, bias_grad[i] = sum over p of op(A)[i, p] (f32, m elements, overwritten,
 *    not scaled by alpha): the bias gradient of a linear layer whose weight gradient this GEMM
 *    is (dW = dY^T X with A = dY, trans_a), read from A in the same pass on cuBLASLt (the
 *    BGRADB epilogue). Summed in f32 or better and rounded to f32 once; the order may differ
 *    from sum_rows'. Needs trans_a, and neither bias nor an epilogue (AMP_ERR_INVALID_ARG);
 *  - allow_tf32: the CUDA backend may round f32 inputs to TF32 (amp_ctx_opts.allow_tf32); the
 *    CPU backend ignores it and computes true f32;
 *  - batch, stride_a, stride_b, stride_c: a strided batch (cuBLASLt's batch count and strided
 *    offsets, oneDNN's batch dim): `batch` products, product i of the matrices at a + i stride_a,
 *    b + i stride_b into c + i stride_c (in elements); a stride of 0 for A or B uses one matrix
 *    for every product (a broadcast). batch 0 or 1: one product, strides unused. With a batch,
 *    bias (the same row for every product) and the epilogue apply to each product; bias_grad is
 *    refused. The products' C must not overlap (stride_c >= (m - 1) ldc + n);
 *  - aux: with a GELU epilogue, where the pre-activation goes: C's dtype, leading dimension ldc
 *    and stride_c (see amp_gemm_epilogue); unused otherwise. */
typedef struct amp_gemm_desc {
    bool trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const void *a; amp_dtype a_dtype; int64_t lda;
    const void *b; amp_dtype b_dtype; int64_t ldb;
    void *c; amp_dtype c_dtype; int64_t ldc;
    const float *bias;
    amp_gemm_epilogue epilogue;
    float *bias_grad;
    bool allow_tf32;
    int64_t batch;
    int64_t stride_a, stride_b, stride_c;
    void *aux;
    /* A GELU epilogue's C exactly the unary GELU of aux, on every backend (the CUDA backend then
     * never takes cuBLASLt's GELU_AUX_BIAS): what amp_linear_ex asks, so that C can be written
     * again from aux bit for bit (selective recomputation, nn/ops_linear.c). */
    bool gelu_exact;
} amp_gemm_desc;

/* 2-D convolution, NCHW x OIHW, groups 1, dilation 1, symmetric zero padding. x, w, y share
 * `dtype`; bias and dbias are f32 of c_out (NULL when absent). With an f16/bf16 y a backend may
 * round the bias to y's dtype before adding it (cuDNN takes it so): y = round(conv + bias'), one
 * rounding of the sum either way.
 * allow_tf32: the CUDA backend may round f32 inputs to TF32 (cuDNN tensor-op math); the CPU
 * backend computes true f32. allow_nondeterministic: the CUDA backend may choose algorithms
 * whose results vary from run to run (cuDNN's atomic backward algorithms); without it every
 * entry is deterministic. Both are amp_ctx_opts' switches, copied here by nn/. */
typedef struct amp_conv2d_desc {
    int64_t n, c_in, h_in, w_in;
    int64_t c_out, kh, kw;
    int64_t stride_h, stride_w, pad_h, pad_w;
    int64_t h_out, w_out;
    amp_dtype dtype;
    bool allow_tf32;
    bool allow_nondeterministic;
} amp_conv2d_desc;

/* Batch norm over N and HW of an [n, c, hw] tensor (x, y, dy, dx in `dtype`; every per-channel
 * vector f32). Training: save_mean/save_invstd = batch mean and 1/sqrt(biased var + eps);
 * running_* <- (1 - momentum) * running_* + momentum * batch stat, with the UNBIASED variance
 * (PyTorch). Eval: normalise with running_mean/running_var. gamma/beta may be NULL (1 and 0), and
 * so may the running stats (not tracked), save_*, dx and dgamma/dbeta (not wanted).
 * relu: the forward entries (bn_fwd_train, bn_fwd_eval) write y = relu(batch norm) in the same
 * pass (a batch norm followed by a ReLU: one pass and one tensor fewer); bn_bwd then takes that
 * y and lets dy through where ReLU's backward does (kernels/math/relu.h's amp_relu_bwd: 0 where
 * y <= 0), in its passes, as if dy had been masked with AMP_BINARY_RELU_BWD first (one pass and
 * one tensor fewer again). SyncBatchNorm's entries refuse it: their caller masks dy first. */
typedef struct amp_bn_desc {
    int64_t n, c, hw;
    float eps, momentum;
    amp_dtype dtype;
    bool relu;
} amp_bn_desc;

/* Max pooling, NCHW, square window k, stride, padding that never wins (PyTorch: -inf). */
typedef struct amp_pool_desc {
    int64_t n, c, h_in, w_in, h_out, w_out;
    int64_t k, stride, pad;
    amp_dtype dtype;
} amp_pool_desc;

/* The pointwise ops of the unary, binary and binary_bcast entries: core/pointwise_ops.def's list,
 * which says what each computes. */
typedef enum amp_unary_op {
#define AMP_UNARY_OP(name, element) AMP_UNARY_##name,
#include "core/pointwise_ops.def"
} amp_unary_op;

typedef enum amp_binary_op {
#define AMP_BINARY_OP(name, element) AMP_BINARY_##name,
#include "core/pointwise_ops.def"
} amp_binary_op;

/* Their counts, outside the enums so that a switch over every op needs no extra case. */
enum {
    AMP_UNARY_COUNT = 0
#define AMP_UNARY_OP(name, element) +1
#include "core/pointwise_ops.def"
};
enum {
    AMP_BINARY_COUNT = 0
#define AMP_BINARY_OP(name, element) +1
#include "core/pointwise_ops.def"
};
#define AMP_UNARY_LAST (AMP_UNARY_COUNT - 1)
#define AMP_BINARY_LAST (AMP_BINARY_COUNT - 1)

/* Strided views for the ops on dims (core/shape.h resolves PyTorch's rules into these): a
 * logical array of shape[0..ndim) whose element at multi-index i sits at sum_k i_k stride[k]
 * (in elements) from its base pointer; a stride of 0 repeats one element along that dim (a
 * broadcast). Strides are >= 0; the output's are the dense row-major ones unless given. */
#define AMP_BE_MAX_DIMS 8

/* y = op(a, b) elementwise over broadcast operands: y is dense of shape[0..ndim); a and b are
 * read through their strides. Any amp_binary_op; f32 arithmetic, one rounding (as binary). */
typedef struct amp_bcast_desc {
    amp_binary_op op;
    amp_dtype dt;
    int ndim;
    int64_t shape[AMP_BE_MAX_DIMS];
    int64_t a_stride[AMP_BE_MAX_DIMS], b_stride[AMP_BE_MAX_DIMS];
} amp_bcast_desc;

/* y = cond ? a : b (PyTorch's where) over shape[0..ndim), y dense, cond (i32, nonzero: true), a
 * and b through their strides (0 along the dims they are broadcast over); a, b and y in dt, the
 * chosen element's bits copied. */
typedef struct amp_where_desc {
    amp_dtype dt;
    int ndim;
    int64_t shape[AMP_BE_MAX_DIMS];
    int64_t cond_stride[AMP_BE_MAX_DIMS], a_stride[AMP_BE_MAX_DIMS], b_stride[AMP_BE_MAX_DIMS];
} amp_where_desc;

/* dst = src over shape[0..ndim), both through their strides (permute, narrow, cat, expand):
 * bits copied, any dtype (i32 too). dst's strides must not make two elements overlap. */
typedef struct amp_strided_desc {
    amp_dtype dt;
    int ndim;
    int64_t shape[AMP_BE_MAX_DIMS];
    int64_t src_stride[AMP_BE_MAX_DIMS], dst_stride[AMP_BE_MAX_DIMS];
} amp_strided_desc;

/* Reductions over the middle dim of a dense [outer, n, inner] array (reduce_dim). */
typedef enum amp_reduce_op {
    AMP_REDUCE_SUM, /* y = alpha * sum over j (alpha 1/n: the mean) */
    AMP_REDUCE_MAX, /* y = the largest x (NaN wins, as torch.max), idx = its first j */
} amp_reduce_op;

/* LayerNorm (or RMSNorm) over the last dim of a dense [rows, cols] x: y = (x - mean) rstd gamma
 * + beta, rstd = 1 / sqrt(var + eps) with the biased variance (PyTorch's), or for RMSNorm
 * y = x rstd gamma with rstd = 1 / sqrt(mean(x^2) + eps) (torch.nn.RMSNorm). x, y, dy, dx, and
 * the residual and sum of the fused forward, are in `dt`; gamma, beta, mean, rstd, dgamma and
 * dbeta are f32 (NULL gamma: 1, NULL beta: 0; mean is unused for RMSNorm). The arithmetic and its
 * order are kernels/math/layernorm.h's: the same bits on every backend. */
typedef struct amp_ln_desc {
    int64_t rows, cols;
    float eps;
    amp_dtype dt;   /* x, the sum and dx */
    amp_dtype r_dt; /* the residual: dt, or a half type widened as it is read when dt is f32 */
    amp_dtype y_dt; /* y and dy: dt, or a half type when dt is f32 (y straight in the dtype a
                       linear layer's autocast would cast it to) */
    bool rms;
    bool accumulate; /* layernorm_bwd adds dx into dx's old values (f32 only: the bits of dx
                        written to a temporary and added by axpy) */
} amp_ln_desc;

/* Rotary position embedding (RoPE) of a dense x [batch, seq, heads, head_dim] into y of the same
 * shape and dtype `dt`: heads [0, rot_heads) are rotated, the rest copied (the v part of a packed
 * q/k/v). Each pair (a, b) of a row, (i, i + head_dim / 2) in the rotate-half layout (Hugging
 * Face's) or (2i, 2i + 1) interleaved (Meta's, GPT-J's), at position p = offset + t becomes
 * (a c - b s, b c + a s) with c, s = table[p, i, 0], table[p, i, 1] (f32 [table_rows,
 * head_dim / 2, 2]); inverse uses -s (the backward: dx from dy). f32 arithmetic, each product
 * rounded before its add (kernels/math/rope.h): the same bits on every backend. */
typedef struct amp_rope_desc {
    int64_t batch, seq, heads, head_dim;
    int64_t rot_heads;  /* 0 <= rot_heads <= heads */
    int64_t offset;     /* the position of t = 0; offset + seq <= table_rows */
    int64_t table_rows; /* positions the table holds */
    amp_dtype dt;
    bool interleaved;
    bool inverse;
} amp_rope_desc;

/* Softmax (or log-softmax, `log`) over the last dim of a dense [rows, cols] array; x, y, dy and
 * dx in `dt`, arithmetic in f32 as kernels/math/softmax.h states it (the same bits on every
 * backend; a fully masked row, all -inf, gives 0, or -inf for log-softmax). */
typedef struct amp_softmax_desc {
    int64_t rows, cols;
    amp_dtype dt;
    bool log;
} amp_softmax_desc;

/* Softmax cross-entropy of a dense [rows, classes + padding] array of logits (in `dt`) against
 * i32 labels, the last `padding` columns of each row taking no part (no probability, gradient 0),
 * PyTorch's cross_entropy with ignore_index and label_smoothing, f32 arithmetic as
 * kernels/math/xent.h states it (the same bits on every backend). A row whose label is
 * ignore_index adds nothing (not to the count either); every other label must be in
 * [0, classes). The loss is the sum of the counted rows' losses, or with `sum` false their mean
 * (0 counted rows: NaN, as PyTorch). */
typedef struct amp_xent_desc {
    int64_t rows, classes;
    amp_dtype dt;
    int32_t ignore_index;
    float label_smoothing; /* in [0, 1] */
    bool sum;
    int64_t padding; /* columns after the classes in each row */
} amp_xent_desc;

/* Scaled dot-product attention over q, o (in `dt`) dense [batch, heads, seq, head_dim] and k, v
 * dense [batch, kv_heads, kv_seq, head_dim], or, when `packed`, in FlashAttention's qkvpacked
 * layout, the one a fused QKV projection writes: q, k and v (and dq, dk, dv) point at elements 0,
 * heads head_dim and (heads + kv_heads) head_dim of one [batch, seq, heads + 2 kv_heads,
 * head_dim] tensor, o (and dO) is [batch, seq, heads, head_dim] (kernels/math/attention.h:
 * amp_attn_row). Query head h reads key/value head h / (heads / kv_heads) (grouped-query
 * attention; multi-query at kv_heads 1), never a copy; dk and dv of a key/value head are the sum
 * over its group's heads, in head order, of each head's contribution rounded to dt, summed in
 * f64 and rounded once to f32 then dt: the bits of attention over k and v repeated to heads and
 * the repeat's gradient summed as amp_sum_dim sums it. FlashAttention's algorithm: y =
 * dropout(softmax(scale q k^T + mask)) v with only o and each row's logsumexp (f32 [batch, heads,
 * seq]) saved, the backward recomputing the scores from them.
 * Key j is hidden from query i when causal and j > i + kv_seq - seq (the mask aligned to the
 * end), or when j >= kv_len[b] (a padding mask given as each batch's number of valid keys, in
 * [0, kv_seq]; NULL: none). A row that sees no key gives 0 and logsumexp -inf. Dropout keeps
 * probability (b, h, i, j) when the Philox draw of stream `seed` at offset + ((b heads + h) seq +
 * i) kv_seq + j is >= dropout_p (kernels/math/dropout.h), the same draw on every backend, and
 * scales kept ones by 1 / (1 - p). */
typedef struct amp_attn_desc {
    int64_t batch, heads, seq, head_dim;
    int64_t kv_heads; /* dividing heads; 0: heads (multi-head) */
    int64_t kv_seq;   /* the keys' length; 0: seq (packed: seq) */
    amp_dtype dt;
    float scale;
    bool causal;
    float dropout_p; /* in [0, 1) */
    uint64_t seed, offset;
    bool packed; /* the qkvpacked layout above */
} amp_attn_desc;

/* SGD exactly as torch.optim.SGD (maximize=False):
 *   g = grad + weight_decay * p
 *   if momentum: buf = first_step ? g : momentum * buf + (1 - dampening) * g
 *                g = nesterov ? g + momentum * buf : buf
 *   p -= lr * g */
typedef struct amp_sgd_desc {
    float lr, momentum, dampening, weight_decay;
    bool nesterov, first_step;
    void *half_copy;      /* when set: half_copy[i] = (half_dtype) p[i] after the update, in the */
    amp_dtype half_dtype; /* same pass (the model's f16/bf16 weights next to f32 masters, O2) */
    float grad_scale;     /* each gradient is multiplied by it as it is loaded: the loss scale's
                             inverse, times a clipping coefficient (Apex's fused optimizers'
                             `scale`); 0 or 1: the gradient as is */
} amp_sgd_desc;

/* Adam/AdamW exactly as torch.optim.Adam/AdamW (amsgrad=False), step t >= 1:
 *   Adam:  g = grad + weight_decay * p          AdamW: p *= 1 - lr * weight_decay
 *   m = lerp(m, g, 1 - beta1) (torch: exp_avg.lerp_);  v = beta2 * v + (1 - beta2) * g^2
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps) */
typedef struct amp_adam_desc {
    float lr, beta1, beta2, eps, weight_decay;
    bool decoupled; /* AdamW */
    int64_t step;
    void *half_copy;      /* as in amp_sgd_desc */
    amp_dtype half_dtype;
    float grad_scale;     /* as in amp_sgd_desc */
} amp_adam_desc;

/* LAMB as Apex's FusedLAMB (kernels/math/lamb.h states the math and its conventions), one
 * parameter group at step t >= 1. The entry computes the global gradient norm (for
 * max_grad_norm), runs stage 1 over every element (moments), reduces ||x|| and ||u|| per tensor
 * in a fixed order, and runs stage 2, recomputing u from the stored moments instead of keeping it
 * (no extra buffer; the bits are those of a stored u). */
typedef struct amp_lamb_desc {
    float lr, beta1, beta2, eps, weight_decay;
    bool decoupled;       /* Apex adam_w_mode (default true) */
    bool bias_correction; /* default true */
    bool grad_averaging;  /* default true */
    bool adapt_all;       /* Apex use_nvlamb: trust ratio also where weight_decay is 0 */
    float max_grad_norm;  /* global clipping before the moments; <= 0: off (Apex default 1.0) */
    int64_t step;
    float grad_scale;     /* as in amp_sgd_desc */
} amp_lamb_desc;

/* The tensors of one fused optimizer pass (multi-tensor apply, core/multi_tensor.h): n tensors,
 * tensor i of numel[i] elements with its pointer in each array. Every array has n entries; an
 * array that is NULL is absent. One dtype per list. */
typedef struct amp_opt_tensors {
    int64_t n;
    const int64_t *numel;
    void *const *grad;        /* f32, f16 or bf16 (grad_dtype) */
    amp_dtype grad_dtype;
    float *const *param;      /* f32 parameters or masters; NULL: `half` holds the parameters
                                 (O3), widened, updated in f32 and rounded back in one pass */
    void *const *half;        /* half copies (O2) or half parameters (O3); NULL: none */
    amp_dtype half_dtype;
    float *const *state1;     /* SGD momentum buffers (NULL: no momentum); Adam/LAMB exp_avg */
    float *const *state2;     /* Adam/LAMB exp_avg_sq */
    int64_t *steps;           /* NULL: desc.step (Adam, LAMB) and desc.first_step (SGD) for every
                                 tensor. Else a backend array of n per-tensor step counts
                                 (torch's state['step'], kept on the device so a skipped step
                                 needs no host decision): tensor i is updated at step
                                 t = steps[i] + 1 (SGD: first_step = steps[i] == 0), its Adam/LAMB
                                 coefficients formed from t where the update runs, and steps[i]
                                 becomes t afterwards unless the update was skipped (found_inf).
                                 A tensor of numel 0 is not updated and its count not touched,
                                 so callers may pass a whole parameter list with the tensors not
                                 in this call at numel 0, and index steps by parameter. */
} amp_opt_tensors;

/* Scalars in backend memory that fused kernels read when they run, so that the host never waits
 * for the device within a step (the sync-free step). NULL: not used. */
typedef struct amp_step_scalars {
    const float *grad_scale; /* replaces desc.grad_scale / inv_scale: gradients are multiplied by
                                it as they are loaded (inverse loss scale times clip coefficient),
                                its value used as it is (0 zeroes them; only the descriptor's 0
                                means none); unscale_multi reads only this field */
    const float *found_inf;  /* != 0 when the kernel runs: it writes nothing (a skipped step) */
} amp_step_scalars;

/* Collectives over backend memory (coll_* entries below). */
typedef enum amp_coll_op { AMP_COLL_SUM = 0, AMP_COLL_MAX = 1 } amp_coll_op;
#define AMP_COLL_ID_BYTES 128 /* a communicator's id, made on rank 0 and broadcast (NCCL's: 128) */

/* The loss scaler's device state and configuration (kernels/math/scaler.h). */
typedef struct amp_scaler_dev amp_scaler_dev;
typedef struct amp_scaler_params amp_scaler_params;

/* A backend's device context: the state its entries work in, which each backend defines for
 * itself (kernels/cuda/cuda_backend.h: the device, its compute stream, the caching allocator,
 * the cuBLASLt and cuDNN handles and their plan caches, the copy stream; the CPU's holds nothing:
 * oneDNN's engine is the process's and its scratch is per thread). Every entry of the table takes
 * the table's `dev` first, so two tables of one backend (two devices, or two streams of one) share
 * no state. */
typedef struct amp_device_ctx amp_device_ctx;

/* AMP_KERNEL(...)'s parameter list with the device context first (the slots and kernels), or with
 * the backend first (the counting wrappers'). */
#define AMP_PREPEND_DEV(...) (amp_device_ctx * dev, __VA_ARGS__)
#define AMP_PREPEND_BE(...) (const amp_backend *be, __VA_ARGS__)
#define AMP_UNPAREN(...) __VA_ARGS__

/* The compute entries, one slot per line of core/backend_kernels.def (what each computes is
 * said there). */
typedef struct amp_kernels {
#define AMP_KERNEL(name, category, flops, check, params, args)                                     \
    amp_status(*name) AMP_PREPEND_DEV params;
#include "core/backend_kernels.def"
#undef AMP_KERNEL
} amp_kernels;

typedef struct amp_collectives {
    /* Collectives among the processes of a job over this backend's memory (DDP's gradient
     * buckets, the scaler's overflow flag, SyncBatchNorm's sums), for a backend whose memory MPI
     * cannot read (CUDA: NCCL). id writes a fresh id (AMP_COLL_ID_BYTES) on one rank, which the
     * caller broadcasts; create is collective over the `size` ranks given that id; free with
     * abort when a peer is lost (a plain free would wait for it). allreduce (in place) and
     * broadcast are queued after the compute work queued so far, on a stream of their own, and
     * return at once; join makes later compute wait for every collective queued so far (no host
     * wait); poll says whether some are still running, and returns an error when one failed (a
     * peer died). */
    amp_status (*id)(void *id);
    amp_status (*create)(amp_device_ctx *dev, const void *id, int rank, int size, void **comm);
    void (*free)(void *comm, bool abort);
    amp_status (*allreduce)(void *comm, void *buf, amp_dtype dt, int64_t n, amp_coll_op op);
    amp_status (*broadcast)(void *comm, void *buf, size_t nbytes, int root);
    amp_status (*join)(void *comm);
    amp_status (*poll)(void *comm, bool *pending);
} amp_collectives;

typedef struct amp_backend {
    const char *name;
    amp_device device;
    /* The device context every entry below takes first (amp_device_ctx above). */
    amp_device_ctx *dev;

    /* Memory. alloc returns 64-byte aligned memory (NULL + AMP_ERR_OOM on failure). */
    amp_status (*alloc)(amp_device_ctx *dev, size_t nbytes, void **out);
    void (*free)(amp_device_ctx *dev, void *p);
    amp_status (*memset_zero)(amp_device_ctx *dev, void *p, size_t nbytes);
    amp_status (*copy)(amp_device_ctx *dev, void *dst, const void *src,
                       size_t nbytes); /* within device */
    amp_status (*copy_to_host)(amp_device_ctx *dev, void *host, const void *src, size_t nbytes);
    amp_status (*copy_from_host)(amp_device_ctx *dev, void *dst, const void *host, size_t nbytes);
    amp_status (*sync)(amp_device_ctx *dev);
    /* Batches that do not make the host wait (PyTorch's pin_memory + non_blocking): upload_async
     * copies `host` into pinned staging memory at the call (the caller may reuse it at once) and
     * from there into dst on a copy stream, after the work the event `after` marks (NULL: no
     * wait), and makes the compute stream wait for the copy; nothing waits on the host but, at
     * worst, for a staging buffer's copy of several batches ago. dst must be a whole block from
     * alloc (the allocator then keeps it from reuse until the copy has run). mark records, into
     * *event (created at the first call), the compute work queued so far; event_free releases
     * it (NULL: no-op). The CPU backend copies at once and has no events. */
    amp_status (*upload_async)(amp_device_ctx *dev, void *dst, const void *host, size_t nbytes,
                               void *after);
    amp_status (*mark)(amp_device_ctx *dev, void **event);
    void (*event_free)(amp_device_ctx *dev, void *event);
    /* Bytes handed out by alloc and not freed, and their peak since the last reset: the device
     * context's on CUDA (each has its own allocator), the process's on the CPU. */
    void (*memory_stats)(amp_device_ctx *dev, size_t *in_use, size_t *peak);
    void (*memory_reset_peak)(amp_device_ctx *dev);
    /* Optional: gives back the backend's own scratch kept for the calling thread from call to
     * call (the CPU's oneDNN arenas), for amp_ctx_memory_trim; the next call takes it again. */
    void (*memory_trim)(amp_device_ctx *dev);
    /* Allocations made from the system (cudaMalloc; aligned_alloc on the CPU) since the process
     * started: after warm-up a training loop makes none (the caching allocator, the step arenas). */
    uint64_t (*system_allocs)(amp_device_ctx *dev);

    amp_kernels k;
    /* NULL: no collectives of its own (the CPU: MPI reads its memory). */
    const amp_collectives *coll;
} amp_backend;

/* The argument checks of the unscale entry, shared by every backend (core/backend_check.c):
 * AMP_OK, or the error naming fn and the culprit. AMP_OK with n == 0 means nothing to do. */
amp_status amp_backend_check_unscale(const char *fn, amp_dtype g_dt, int64_t n, const void *grad,
                                     float inv_scale, const float *out, const float *found_inf);
/* f32, f16 or bf16, else AMP_ERR_DTYPE naming fn. */
amp_status amp_backend_check_float(const char *fn, amp_dtype dt);
/* n >= 0, else AMP_ERR_INVALID_ARG naming fn. */
amp_status amp_backend_check_n(const char *fn, int64_t n);
/* mse's dtype, n and pointers. */
amp_status amp_backend_check_mse(const char *fn, amp_dtype dt, int64_t n, const void *a,
                                 const void *b);
/* where's descriptor: a float dtype, 1..AMP_BE_MAX_DIMS dims, extents and strides >= 0. */
amp_status amp_backend_check_where(const char *fn, const amp_where_desc *d);
/* attention's descriptor (a float dtype, batch, heads, seq >= 0, head_dim >= 1, a finite scale,
 * dropout_p in [0, 1)) and, when there is a row, its arrays (AMP_ERR_* naming fn and the
 * argument; kv_len may be NULL). */
amp_status amp_backend_check_attn_fwd(const char *fn, const amp_attn_desc *d, const void *q,
                                      const void *k, const void *v, const void *o,
                                      const float *lse);
amp_status amp_backend_check_attn_bwd(const char *fn, const amp_attn_desc *d, const void *q,
                                      const void *k, const void *v, const void *o,
                                      const void *dout, const float *lse, const float *delta,
                                      const void *dq, const void *dk, const void *dv);
/* xent's descriptor and labels pointer (the labels' range is each backend's: host or device
 * memory). */
amp_status amp_backend_check_xent(const char *fn, const amp_xent_desc *d, const int32_t *labels);
/* dropout's dtype, n >= 0 and p in [0, 1). */
amp_status amp_backend_check_dropout(const char *fn, amp_dtype dt, int64_t n, float p);
/* Which batch-norm entry checks its descriptor: the training forward, the eval forward, the
 * backward, or one of SyncBatchNorm's entries that take dy or only sum (sums, statistics,
 * elementwise backward). */
typedef enum amp_bn_pass {
    AMP_BN_PASS_TRAIN,
    AMP_BN_PASS_EVAL,
    AMP_BN_PASS_BWD,
    AMP_BN_PASS_SYNC
} amp_bn_pass;
/* Batch norm's descriptor: d set, a float dtype, n, c, hw >= 1; in training, also at least 2
 * values per channel (n * hw >= 2: the unbiased running variance divides by n * hw - 1); relu
 * not for SyncBatchNorm's entries. */
amp_status amp_backend_check_bn(const char *fn, const amp_bn_desc *d, amp_bn_pass pass);
/* bn_bwd's y: given exactly when d->relu is set (AMP_ERR_INVALID_ARG naming fn otherwise). */
amp_status amp_backend_check_bn_bwd_y(const char *fn, const amp_bn_desc *d, const void *y);
/* bn_bwd's whole check: the descriptor (AMP_BN_PASS_BWD) and y. */
amp_status amp_backend_check_bn_bwd(const char *fn, const amp_bn_desc *d, const void *y);
/* The synchronised batch norm entries' count: >= 1, and >= 2 where a variance is formed
 * (`unbiased`); AMP_ERR_INVALID_ARG naming fn. */
amp_status amp_backend_check_bn_count(const char *fn, int64_t count, bool unbiased);
/* bn_sync_stats' whole check: the descriptor (AMP_BN_PASS_SYNC) and the count (>= 2 with s2). */
amp_status amp_backend_check_bn_sync_stats(const char *fn, const amp_bn_desc *d, int64_t count,
                                           const float *s2);
/* bn_bwd_elemt's descriptor, count and pointers (gamma may be NULL), shared by every backend. */
amp_status amp_backend_check_bn_bwd_elemt(const char *fn, const amp_bn_desc *d, int64_t count,
                                          const void *x, const void *dy, const float *mean,
                                          const float *invstd, const float *sum_dy,
                                          const float *sum_dy_xmu, const void *dx);
/* Max pooling's descriptor: d set, a float dtype, non-empty input, kernel and stride >= 1, pad in
 * [0, kernel / 2], h_out and w_out as the window arithmetic gives them, a plane that an i32
 * argmax can index. */
amp_status amp_backend_check_pool(const char *fn, const amp_pool_desc *d);
/* The fields of amp_gemm_desc after bias: a known epilogue; bias_grad only with trans_a and
 * with neither a bias nor an epilogue; a GELU epilogue with beta 0 and an aux other than C
 * (AMP_ERR_INVALID_ARG naming fn). The shapes, dtypes and
 * pointers are each backend's. */
amp_status amp_backend_check_gemm_fused(const char *fn, const amp_gemm_desc *d);
/* The convolution descriptor of every conv2d entry: every size >= 1, stride >= 1, pad >= 0, the
 * window fits the padded input, h_out/w_out are PyTorch's floor((in + 2 pad - k) / stride) + 1
 * (AMP_ERR_SHAPE); dtype f32, f16 or bf16 (AMP_ERR_UNSUPPORTED). The pointers are each entry's. */
amp_status amp_backend_check_conv2d(const char *fn, const amp_conv2d_desc *d);

/* The embedding entries' sizes: a float dtype, n >= 0, dim and vocab >= 1, idx set when n > 0. */
amp_status amp_backend_check_embedding(const char *fn, amp_dtype dt, int64_t n, int64_t dim,
                                       int64_t vocab, const int32_t *idx);
/* Softmax's descriptor: set, a float dtype, rows >= 0, cols >= 1. */
amp_status amp_backend_check_softmax(const char *fn, const amp_softmax_desc *d);
/* LayerNorm's descriptor: set, a float dtype, rows >= 0, cols >= 1, eps >= 0 and finite. */
amp_status amp_backend_check_ln(const char *fn, const amp_ln_desc *d);
amp_status amp_backend_check_rope(const char *fn, const amp_rope_desc *d);
/* A float dtype, rows, cols >= 0 and a row stride ld >= cols (swiglu_*). */
amp_status amp_backend_check_rows(const char *fn, amp_dtype dt, int64_t rows, int64_t cols,
                                  int64_t ld);
/* reduce_dim's and scatter_dim's: a known op, a float dtype, outer, inner >= 0 and n >= 1
 * (AMP_ERR_INVALID_ARG / AMP_ERR_DTYPE naming fn). */
amp_status amp_backend_check_reduce_dim(const char *fn, amp_reduce_op op, amp_dtype dt,
                                        int64_t outer, int64_t n, int64_t inner);
/* binary_bcast's descriptor: set, a known op, a float dtype, 1 <= ndim <= AMP_BE_MAX_DIMS,
 * extents >= 0, strides >= 0. */
amp_status amp_backend_check_bcast(const char *fn, const amp_bcast_desc *d);
/* copy_strided's descriptor: set, a dtype, 1 <= ndim <= AMP_BE_MAX_DIMS, extents and strides
 * >= 0. */
amp_status amp_backend_check_strided(const char *fn, const amp_strided_desc *d);

/* The table's entries by name (core/backend_entries.c): how many there are, the name of entry i,
 * whether `be` fills it, and the first entry `be` leaves NULL (NULL when it has them all). The
 * sizes of all function pointers are assumed equal, as on every platform CUDA supports. */
int amp_backend_n_entries(void);
const char *amp_backend_entry_name(int i);
bool amp_backend_has_entry(const amp_backend *be, int i);
const char *amp_backend_missing_entry(const amp_backend *be);

/* The CPU backend: always present. */
const amp_backend *amp_backend_cpu(void);
/* The CUDA backend when built and a device answers, else NULL with amp_last_error saying why. */
const amp_backend *amp_backend_cuda(void);
/* The backends a context can be made on, as their getters (amp_backend_cpu, amp_backend_cuda).
 * core is below kernels/ and calls neither itself: the public amp_ctx_create, above core
 * (kernels/cpu/cpu_backend.c), hands them down (amp_ctx_create_from, core/ctx.h). */
typedef struct amp_backend_getters {
    const amp_backend *(*cpu)(void);
    const amp_backend *(*cuda)(void);
} amp_backend_getters;
/* The backend of a context asked for `want` (core/backend_select.c): CPU as asked; CUDA when
 * from->cuda() gives one, else AMP_ERR_NO_DEVICE with its reason; AUTO CUDA when it has every
 * entry of the table, else the CPU, with one log line saying why. */
amp_status amp_backend_pick(const amp_backend_getters *from, amp_device want,
                            const amp_backend **out);
/* Before the first context: makes the device backend use device local_rank % count (one GPU per
 * process of a node). AMP_OK without a device backend or a device (the context will say why). */
amp_status amp_backend_select_device(int local_rank);

#ifdef __cplusplus
}
#endif
#endif
