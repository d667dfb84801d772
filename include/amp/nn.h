/* libamp neural-network ops, autograd and models.
 *
 * Ops validate their inputs, run on the inputs' backend and return a step tensor (see tensor.h).
 * When gradients are enabled and an input requires grad, the op is recorded on the context's tape;
 * amp_backward(loss) walks the tape in reverse and ACCUMULATES into the .grad of every tensor
 * that requires grad (parameters' gradients add up until amp_zero_grad). The tensors an op's
 * backward reads must not be written between the forward and the backward: amp_backward refuses
 * instead, naming the op and the input (amp/mixed_precision.h). */
#ifndef AMP_NN_H
#define AMP_NN_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ops (outputs first in the backend; here the result comes back through `out`) ---- */
/* y = x @ w^T + b: x [n, in] or [..., in] (any leading dims, as a [B, T, C] activation: one
 * GEMM over them all), w [out, in], b [out] or NULL; y [..., out]. */
amp_status amp_linear(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor **out);
/* y = relu(x @ w^T + b) as one op (the bias in the GEMM's epilogue, the ReLU in place on its
 * output: one tensor instead of two), which a sequential model uses for a linear layer directly
 * followed by a ReLU. Values and gradients are those of amp_linear followed by amp_relu, NaN
 * included (a NaN in x reaches y, the loss and w's gradient), except where x @ w^T + b is -0: y
 * is then +0. Backward: dy masked by y > 0, then linear's backward, with the bias gradient taken
 * in the weight gradient's GEMM. */
amp_status amp_linear_relu(amp_tensor *x, amp_tensor *w, amp_tensor *b, amp_tensor **out);
/* y = gelu(x @ w^T + b) as one op (Apex's FusedDense GELU; the GPT MLP's c_fc): the GEMM writes
 * the pre-activation z, which the op keeps for its backward, and the GELU (tanh approximation or
 * exact erf, as amp_gelu) follows in the GEMM's epilogue. Values and gradients are those of
 * amp_linear followed by amp_gelu, bit for bit on the CPU; on CUDA the tanh form may be
 * cuBLASLt's GELU_AUX_BIAS epilogue, its GELU of the unrounded z, within 2^-p (2 |y| + 2 |z|) of
 * that (p: the mantissa bits of y's dtype, 23, 7 or 10), the gradients still bit for bit (they
 * are computed from z). Backward: dz = GELU'(z) dy, then linear's backward. Autocast as linear. */
amp_status amp_linear_gelu(amp_tensor *x, amp_tensor *w, amp_tensor *b, bool tanh_approximation,
                           amp_tensor **out);
/* The three above as one op with options: the activation, and recompute_input (selective
 * recomputation, llm.c's -r): x is not kept for the backward, which writes it again from its
 * producer when w's gradient needs it. x must be the output of amp_norm, of amp_linear_swiglu
 * or of amp_linear_ex with a GELU (directly or through amp_reshape), in the dtype the GEMM
 * reads (AMP_NORM_OUT_FOR_LINEAR under O1), and not written in place since it was made, else
 * AMP_ERR_INVALID_ARG; drop x after the call (amp_tensor_drop) for its memory to go back at
 * once. The same values and gradients, bit for bit, one more norm, SwiGLU or GELU pass in
 * backward. A GELU here is always GELU(z) of the rounded z, the unary kernel's bits (on CUDA
 * never cuBLASLt's fused GELU_AUX_BIAS, which amp_linear_gelu may take: 2 m n s more bytes of
 * traffic than it), so that a reader can write it again exactly and a model gives the same bits
 * with and without recomputation on either backend. */
typedef enum amp_linear_act {
    AMP_LINEAR_NONE = 0,
    AMP_LINEAR_RELU,
    AMP_LINEAR_GELU,      /* exact erf */
    AMP_LINEAR_GELU_TANH, /* the tanh approximation (GPT-2's) */
} amp_linear_act;
typedef struct amp_linear_opts {
    amp_linear_act activation;
    bool recompute_input;
} amp_linear_opts;
amp_status amp_linear_ex(amp_tensor *x, amp_tensor *w, amp_tensor *b, const amp_linear_opts *opts,
                         amp_tensor **out);
/* SwiGLU, the Llama family's MLP activation: y = silu(gate) * up (Shazeer's GLU variant; Hugging
 * Face's LlamaMLP computes down_proj(act_fn(gate_proj(x)) * up_proj(x))).
 * amp_swiglu takes both halves in one tensor, gu [..., 2F] (the gate's F, then the up
 * projection's F: a fused gate_up projection's output), and gives y [..., F].
 * amp_linear_swiglu(x [..., in], w_gate [F, in], w_up [F, in]) makes gu with the projections'
 * GEMM, one GEMM of 2F outputs when w_up directly follows w_gate in memory (a model's two
 * consecutive parameters, gate_proj then up_proj, as Llama registers them; two GEMMs into gu's
 * halves otherwise) and feeds it to the same fused op, keeping only gu for the backward (no
 * silu output or product stored), whose dx is one GEMM over both halves of dgu when joined.
 * Values and gradients are amp_silu then amp_mul's bit for bit, given gu (the same roundings in
 * every dtype); the GEMMs are amp_linear's (without a bias), to their rounding when joined (one
 * GEMM over 2F outputs, dx one sum over 2F terms instead of two added). Autocast as linear: the
 * half type under O1. */
amp_status amp_swiglu(amp_tensor *gu, amp_tensor **out);
amp_status amp_linear_swiglu(amp_tensor *x, amp_tensor *w_gate, amp_tensor *w_up,
                             amp_tensor **out);
/* amp_linear_swiglu with amp_linear_ex's options: recompute_input as there (x not kept, written
 * again by its producer, amp_norm's under the Llama, for the weight gradients); activation
 * must be AMP_LINEAR_NONE (the SwiGLU is the activation). */
amp_status amp_linear_swiglu_ex(amp_tensor *x, amp_tensor *w_gate, amp_tensor *w_up,
                                const amp_linear_opts *opts, amp_tensor **out);
/* y = a @ b: a [m, k], b [k, n]. */
amp_status amp_matmul(amp_tensor *a, amp_tensor *b, amp_tensor **out);
/* x [n, c_in, h, w], w [c_out, c_in, kh, kw], b [c_out] or NULL. */
amp_status amp_conv2d(amp_tensor *x, amp_tensor *w, amp_tensor *b, int stride, int padding,
                      amp_tensor **out);
/* x [n, c, h, w]; gamma, beta, running_mean, running_var [c]. training: batch statistics, and
 * the running ones are updated with `momentum` (PyTorch's convention); else running statistics. */
amp_status amp_batchnorm2d(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                           amp_tensor *running_mean, amp_tensor *running_var, bool training,
                           float momentum, float eps, amp_tensor **out);
/* y = relu(batchnorm2d(x)) in one pass over x, and no tensor between the two (a sequential
 * model runs a batch norm directly followed by a ReLU as this op, SyncBatchNorm layers too).
 * Values and gradients are those of amp_batchnorm2d followed by amp_relu, except that a negative
 * value that rounds to -0 in a half dtype comes out +0 (the ReLU is applied before rounding).
 * Backward: dy masked by y > 0, then batch norm's backward. */
amp_status amp_batchnorm2d_relu(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                                amp_tensor *running_mean, amp_tensor *running_var, bool training,
                                float momentum, float eps, amp_tensor **out);
/* Normalisation over the last dim, one op for both kinds, with or without a residual add before
 * it and with the output a following linear reads:
 *   AMP_NORM_LAYER (torch.nn.functional.layer_norm with normalized_shape = the last extent):
 *     y = (h - mean) / sqrt(var + eps) * gamma + beta, the biased variance;
 *   AMP_NORM_RMS (torch.nn.RMSNorm, Hugging Face's LlamaRMSNorm): y = h / sqrt(mean(h^2) + eps)
 *     * gamma (no beta: passing one is refused);
 * where h = x, or with a residual h = *sum = x + residual (rounded to their dtype, the next
 * block's residual stream; llm.c's fused residual forward), in one pass with the bits of amp_add
 * followed by the norm. gamma and beta f32 [C] or NULL (1 and 0). Statistics in f32 whatever x's
 * dtype (Apex FusedLayerNorm's numerics), the same bits on every backend; the mean and 1/rms are
 * saved, f32 [rows], for the one-pass backward. gamma and beta stay f32 at every opt level, O2 and
 * O3 included (Apex O2 casts LayerNorm to fp16; keep_batchnorm_fp32 extends to every norm).
 * Under autocast (O1) x runs in f32 and y is f32 (torch.amp's fp32 list). The residual may be
 * narrower than an f32 x (a half branch joining the f32 stream under O1): it is widened as it is
 * read, PyTorch's promotion of x + residual, and *sum is f32; never wider.
 * .out = AMP_NORM_OUT_FOR_LINEAR is for a norm read only by a linear layer (a transformer's ln_1
 * before c_attn, input_layernorm before q/k/v, the final norm before the head): under autocast y
 * comes out in the autocast half type, the bits the linear's cast of the f32 y would give,
 * without that f32 y and its f32 gradient held for the step (TransformerEngine's LayerNormLinear
 * fuses the same cast). The gradient reaching the norm is then the linear's half dX, as
 * torch.autocast computes it; with AMP_NORM_OUT_NORM the linear writes dX in f32 straight into
 * the f32 y's gradient (nn/gemm.c), a rounding fewer. Without autocast the two are the same.
 * opts NULL: LayerNorm, eps 1e-5, AMP_NORM_OUT_NORM. sum: required with a residual, else unused
 * (may be NULL). eps: finite, >= 0. */
typedef enum amp_norm_kind { AMP_NORM_LAYER = 0, AMP_NORM_RMS } amp_norm_kind;
typedef enum amp_norm_out { AMP_NORM_OUT_NORM = 0, AMP_NORM_OUT_FOR_LINEAR } amp_norm_out;
typedef struct amp_norm_opts {
    amp_norm_kind kind;
    float eps;
    amp_norm_out out;
} amp_norm_opts;
amp_status amp_norm(amp_tensor *x, amp_tensor *residual, amp_tensor *gamma, amp_tensor *beta,
                    const amp_norm_opts *opts, amp_tensor **sum, amp_tensor **out);
/* Rotary position embeddings (RoPE; Su et al.), as the Llama family applies them to q and k.
 * amp_rope_table_create makes the table of cos and sin, f32 [max_positions, head_dim / 2, 2], a
 * caller-owned tensor (amp_tensor_free), from integer positions: angle(p, i) = p * inv_freq[i],
 * inv_freq[i] = 1 / theta^(2i / head_dim), in f32 as Hugging Face's LlamaRotaryEmbedding computes
 * them, cos and sin of each angle rounded once to f32; never accumulated, and the same table on
 * every backend, so both give the same bits. AMP_ROPE_LLAMA3 is Llama 3.1's frequency scaling
 * (rope_scaling {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings}): wavelengths above original / low_freq_factor divided by
 * factor, below original / high_freq_factor kept, a smooth blend between.
 * amp_rope rotates x [batch, seq, heads, head_dim] (a q or k projection reshaped, or a packed
 * q/k/v [batch, seq, heads + 2 kv_heads, head_dim] with opts.heads = heads + kv_heads: q and k
 * rotated, v copied) at positions offset .. offset + seq - 1 (a sampler's offset is the length of
 * the cache). The pair (a, b) becomes (a cos - b sin, b cos + a sin): the pairs (i, i +
 * head_dim / 2) for AMP_ROPE_HALF (Hugging Face's rotate_half, the layout HF Llama checkpoints
 * store q_proj and k_proj in), (2i, 2i + 1) for AMP_ROPE_INTERLEAVED (Meta's and GPT-J's code).
 * f32 arithmetic, each product rounded before the add, y in x's dtype (rounded once); no autocast
 * category (x's dtype kept). Backward: the inverse rotation of dy; the table gets no gradient.
 * A position past the table (max_positions) is refused. */
typedef enum amp_rope_type { AMP_ROPE_DEFAULT = 0, AMP_ROPE_LLAMA3 } amp_rope_type;
typedef struct amp_rope_config {
    int64_t head_dim;      /* even */
    int64_t max_positions; /* rows of the table: positions 0 .. max_positions - 1 */
    float theta;           /* rope_theta (10000 Llama 2, 500000 Llama 3); 0: 10000 */
    amp_rope_type type;
    /* AMP_ROPE_LLAMA3 only */
    float factor, low_freq_factor, high_freq_factor;
    int64_t original_max_positions;
} amp_rope_config;
amp_status amp_rope_table_create(amp_ctx *ctx, const amp_rope_config *cfg, amp_tensor **table);
typedef enum amp_rope_layout { AMP_ROPE_HALF = 0, AMP_ROPE_INTERLEAVED } amp_rope_layout;
typedef struct amp_rope_opts {
    amp_rope_layout layout;
    int64_t heads;  /* the first `heads` heads are rotated, the rest copied; 0: all */
    int64_t offset; /* the position of x's first row, >= 0 */
} amp_rope_opts;
/* opts NULL: rotate-half, every head, from position 0. */
amp_status amp_rope(amp_tensor *x, amp_tensor *table, const amp_rope_opts *opts,
                    amp_tensor **out);
/* torch.nn.SyncBatchNorm: in training the statistics are those of the global batch of every rank
 * of the context's collective (amp_model_convert_sync_batchnorm in amp/parallel.h sets it; none:
 * this process alone, the values of amp_batchnorm2d to rounding). The running statistics take the
 * global unbiased variance; gamma's and beta's gradients are this rank's (DDP averages them), x's
 * the global batch's. Collective in training, forward and backward: every rank must call it, in
 * the same order, the ranks' x agreeing in c, h and w (n may differ). Eval: amp_batchnorm2d. */
amp_status amp_sync_batchnorm2d(amp_tensor *x, amp_tensor *gamma, amp_tensor *beta,
                                amp_tensor *running_mean, amp_tensor *running_var, bool training,
                                float momentum, float eps, amp_tensor **out);
amp_status amp_relu(amp_tensor *x, amp_tensor **out);
amp_status amp_maxpool2d(amp_tensor *x, int kernel, int stride, int padding, amp_tensor **out);
/* Same data, new shape (same numel). */
amp_status amp_reshape(amp_tensor *x, int ndim, const int64_t *shape, amp_tensor **out);
/* [n, ...] -> [n, rest]. */
amp_status amp_flatten(amp_tensor *x, amp_tensor **out);
/* Elementwise a + b, a - b, a * b, a / b (IEEE division), in the wider of the two dtypes
 * (PyTorch's type promotion), computed in f32 with one rounding. Shapes broadcast as PyTorch's
 * (aligned at the last dim, each pair of extents equal or one of them 1): a bias [C] over
 * [B, T, C], a mask [1, 1, T, T] over [B, H, T, T]; the gradient of a repeated operand is summed
 * over the dims it was repeated along. */
amp_status amp_add(amp_tensor *a, amp_tensor *b, amp_tensor **out);
amp_status amp_sub(amp_tensor *a, amp_tensor *b, amp_tensor **out);
amp_status amp_mul(amp_tensor *a, amp_tensor *b, amp_tensor **out);
amp_status amp_div(amp_tensor *a, amp_tensor *b, amp_tensor **out);
/* Pointwise functions: e^x, ln x, tanh x, sigmoid(x) = 1 / (1 + e^-x), silu(x) = x sigmoid(x),
 * in x's dtype, computed in f32 by one implementation shared by every backend (the same bits on
 * the CPU and CUDA; within 1 ulp of the exact value for exp, log and tanh, 2 for sigmoid, 3 for
 * SiLU). Under autocast (O1) exp and log run in f32 (torch.amp's fp32 list); tanh, sigmoid and
 * SiLU keep their input's dtype. Gradients as PyTorch's: dy e^x, dy / x, dy (1 - y^2),
 * dy y (1 - y), dy s (1 + x (1 - s)). */
amp_status amp_exp(amp_tensor *x, amp_tensor **out);
amp_status amp_log(amp_tensor *x, amp_tensor **out);
amp_status amp_tanh(amp_tensor *x, amp_tensor **out);
amp_status amp_sigmoid(amp_tensor *x, amp_tensor **out);
amp_status amp_silu(amp_tensor *x, amp_tensor **out);
/* GELU: exact, x Phi(x) (torch's approximate='none'), or GPT-2's tanh approximation
 * (approximate='tanh'); x's dtype, f32 arithmetic, the same bits on every backend. Gradients as
 * PyTorch's gelu_backward. */
amp_status amp_gelu(amp_tensor *x, bool tanh_approximation, amp_tensor **out);
/* x * s, x + s, x / s with a number s (PyTorch's `loss / accumulation_steps`): x's dtype kept (a
 * scalar does not promote, as in PyTorch), computed in f32 with one rounding; x / s is a true
 * division, as is its gradient dy / s. */
amp_status amp_mul_scalar(amp_tensor *x, float s, amp_tensor **out);
amp_status amp_add_scalar(amp_tensor *x, float s, amp_tensor **out);
amp_status amp_div_scalar(amp_tensor *x, float s, amp_tensor **out);
/* Reductions over one dim (a negative dim counts from the end; keepdim keeps it, of extent 1):
 * x.sum(dim), x.mean(dim), and x.max(dim) with the index of the maximum (i32, the first place
 * it occurs; a NaN counts as the maximum, as in torch.max; indices may be NULL). Sums in f64 in
 * index order, rounded once to f32 then to x's dtype: the same bits on every backend. Under
 * autocast (O1) sum runs in f32 (torch.amp's fp32 list), mean and max in x's dtype. The gradient
 * of max goes to the index it took. */
amp_status amp_sum_dim(amp_tensor *x, int dim, bool keepdim, amp_tensor **out);
amp_status amp_mean_dim(amp_tensor *x, int dim, bool keepdim, amp_tensor **out);
amp_status amp_max_dim(amp_tensor *x, int dim, bool keepdim, amp_tensor **values,
                       amp_tensor **indices);
/* Rearranging dims. Tensors are dense row-major, so a piece along dim is a view that costs
 * nothing when it is one block of memory (every dim before dim of extent 1), else one strided
 * copy; a permutation and a concatenation are one strided copy each (PyTorch's
 * .permute(...).contiguous(), torch.cat). Gradients flow back through the same copies.
 *   narrow:    [start, start + length) along dim;
 *   split:     pieces of `size` along dim (the last may be shorter), n_outs of them exactly;
 *   chunk:     `chunks` equal pieces along dim (the extent must divide);
 *   permute:   y's dim k is x's dim dims[k] (x.permute(dims));
 *   transpose: dims dim0 and dim1 swapped;
 *   cat:       1 to 8 tensors of one dtype and shape but along dim, joined along it. */
amp_status amp_narrow(amp_tensor *x, int dim, int64_t start, int64_t length, amp_tensor **out);
amp_status amp_split(amp_tensor *x, int64_t size, int dim, amp_tensor **outs, int n_outs);
amp_status amp_chunk(amp_tensor *x, int chunks, int dim, amp_tensor **outs);
amp_status amp_permute(amp_tensor *x, const int *dims, amp_tensor **out);
amp_status amp_transpose(amp_tensor *x, int dim0, int dim1, amp_tensor **out);
amp_status amp_cat(amp_tensor *const *xs, int n, int dim, amp_tensor **out);
/* softmax and log_softmax over dim (torch.softmax, torch.log_softmax), computed in f32 with the
 * same bits on every backend; a row entirely -inf (a fully masked attention row) gives 0 from
 * softmax and -inf from log_softmax, where PyTorch gives NaN. The last dim runs in one pass;
 * another is moved last and back. Under autocast (O1) both run in f32 and return f32. */
amp_status amp_softmax(amp_tensor *x, int dim, amp_tensor **out);
amp_status amp_log_softmax(amp_tensor *x, int dim, amp_tensor **out);
/* The embedding (torch.nn.functional.embedding): y [..., dim] = weight[idx[...], :] for i32 token
 * ids idx of any shape and weight [vocab, dim], in the weight's dtype (token and position
 * embeddings). The weight's gradient is a deterministic scatter-add in index order (no float
 * atomics: the same bits on every backend and run). An id outside [0, vocab) is refused naming
 * it on the CPU; on CUDA, which does not wait for the device, its row is NaN and the next call
 * that waits for the device (a read back to the host, the step's outcome, a cross-entropy)
 * fails naming amp_embedding, the id and its position, once (PyTorch's device-side assert). */
amp_status amp_embedding(amp_tensor *idx, amp_tensor *weight, amp_tensor **out);
/* torch.where: y = cond ? a : b elementwise, the three broadcast together (PyTorch's rules);
 * cond is i32 (nonzero: true), a and b one float dtype (under autocast the wider of the two).
 * torch.Tensor.masked_fill: y = mask ? value : x, value in x's dtype. Gradients flow to a and b
 * (x) where they were chosen, summed over their broadcast dims. */
amp_status amp_where(amp_tensor *cond, amp_tensor *a, amp_tensor *b, amp_tensor **out);
amp_status amp_masked_fill(amp_tensor *x, amp_tensor *mask, float value, amp_tensor **out);
/* Fused scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention) of
 * q [batch, heads, seq, head_dim] and k, v [batch, kv_heads, kv_seq, head_dim] (one float
 * dtype): y [batch, heads, seq, head_dim] = dropout(softmax(scale q k^T + mask)) v, computed by FlashAttention's algorithm (tiles, online softmax): only y and
 * each row's f32 logsumexp are kept for the backward, which recomputes the probabilities, so
 * memory grows as batch heads seq, never seq^2. Under autocast (O1) it runs in the half type,
 * with f32 arithmetic. A query that sees no key (every key padded away) gives 0, not NaN.
 * Grouped-query attention (Llama 2 70B, Llama 3, Mistral; multi-query at kv_heads 1): kv_heads
 * divides heads and query head h reads key/value head h / (heads / kv_heads), where it is: k and
 * v are never repeated, their memory and their gradients' are kv_heads / heads of multi-head's.
 * dk and dv sum the group's heads in head order (each head's part rounded to the dtype, the sum
 * in f64, rounded once): the same bits as repeating k and v to heads (repeat_interleave) and
 * summing the repeat's gradient as amp_sum_dim does. Keys may outnumber the queries (a key/value
 * cache: kv_seq > seq); the causal mask is then aligned to the end, query i seeing keys j <= i +
 * kv_seq - seq (PyTorch's causal_lower_right; SDPA's is_causal when kv_seq = seq), and causal
 * attention refuses more queries than keys. */
typedef struct amp_attention_options {
    bool causal;        /* query i sees keys j <= i + kv_seq - seq (GPT's mask at kv_seq = seq) */
    float scale;        /* 0: 1 / sqrt(head_dim) */
    float dropout_p;    /* on the probabilities, in [0, 1); only while training */
    bool training;      /* as amp_dropout's: dropout off in evaluation */
    amp_tensor *kv_len; /* i32 [batch]: batch b's keys >= kv_len[b] are padding; NULL: none.
                         * A value outside [0, kv_seq] is refused on the CPU; on CUDA that batch's
                         * outputs are NaN and the next wait for the device names it. */
    int64_t kv_heads;   /* the qkvpacked form's key/value heads (0: 3 x heads packed as
                         * [batch, seq, 3, heads, head_dim]); the other form takes k's shape and
                         * refuses a kv_heads that differs from it */
} amp_attention_options;
amp_status amp_scaled_dot_product_attention(amp_tensor *q, amp_tensor *k, amp_tensor *v,
                                            const amp_attention_options *options,
                                            amp_tensor **out);
/* The same attention with q, k and v packed as a fused QKV projection writes them
 * (FlashAttention's flash_attn_qkvpacked_func): qkv [batch, seq, 3, heads, head_dim], which is
 * a linear layer's [batch, seq, 3 heads head_dim] output reshaped, gives y [batch, seq, heads,
 * head_dim], which reshapes to [batch, seq, heads head_dim] for the output projection. Equal bit
 * for bit to splitting qkv into q, k, v, permuting each to [batch, heads, seq, head_dim],
 * amp_scaled_dot_product_attention and permuting y back, without those copies (or their
 * gradients') in memory or time. Grouped-query: options.kv_heads > 0 and qkv [batch, seq, heads
 * + 2 kv_heads, head_dim] (a projection of (heads + 2 kv_heads) head_dim outputs, Llama's q_proj,
 * k_proj and v_proj rows stacked), q, k and v its first heads, next kv_heads and last kv_heads;
 * seq is the keys' too. */
amp_status amp_scaled_dot_product_attention_qkvpacked(amp_tensor *qkv,
                                                      const amp_attention_options *options,
                                                      amp_tensor **out);
/* Mean of every element: a one-element tensor. */
amp_status amp_mean(amp_tensor *x, amp_tensor **out);
/* Softmax cross-entropy (torch.nn.functional.cross_entropy) of logits [n, classes] (any float
 * dtype, read as it is: f32 arithmetic) against i32 labels [n], fused as llm.c's classifier: the
 * backward recomputes the softmax from the logits and each row's saved logsumexp, so no
 * probability tensor of n * classes is ever kept (reshape [B, T, V] logits to [B * T, V]).
 * amp_cross_entropy takes PyTorch's defaults: the mean over rows whose label is not -100. */
typedef struct amp_xent_options {
    int32_t ignore_index;  /* rows with this label add nothing, to the loss or to the count */
    float label_smoothing; /* in [0, 1]: the target (1 - eps) onehot + eps / classes */
    bool sum;              /* the sum over the counted rows instead of their mean */
    int64_t classes;       /* 0: every column is a class; else only the first `classes` are, and
                              the rest of each row is padding (a vocabulary padded for the GEMMs,
                              llm.c's classifier): never scored, its gradient 0 */
} amp_xent_options;
/* PyTorch's defaults: ignore_index -100, no smoothing, the mean. */
amp_xent_options amp_xent_defaults(void);
amp_status amp_cross_entropy(amp_tensor *logits, amp_tensor *labels, amp_tensor **out);
/* The same with options; a label outside [0, classes) that is not ignore_index is refused
 * naming its row (on CUDA the forward waits for the device once to learn it). The mean over no
 * counted rows is NaN, as PyTorch's. */
amp_status amp_cross_entropy_ex(amp_tensor *logits, amp_tensor *labels,
                                const amp_xent_options *options, amp_tensor **out);
/* mean((a - b)^2), same shapes. */
amp_status amp_mse_loss(amp_tensor *a, amp_tensor *b, amp_tensor **out);
/* x converted to dt (f32, f16 or bf16; round to nearest even); the gradient is converted back. */
amp_status amp_cast(amp_tensor *x, amp_dtype dt, amp_tensor **out);
/* Inverted dropout with drop probability p in [0, 1); identity when !training. */
amp_status amp_dropout(amp_tensor *x, float p, bool training, amp_tensor **out);
/* acc += x element by element, in place and outside autograd (nothing recorded): PyTorch's
 * `running_loss += loss.detach()`, which sums a loss over steps on the device without the host
 * waiting for it at each step; read acc (amp_tensor_item) only when printing. acc: a tensor of
 * x's dtype (f32, f16 or bf16), shape and context, caller-owned to keep it across steps. */
amp_status amp_accumulate(amp_tensor *acc, const amp_tensor *x);
/* dst[..., start : start + n, ...] = src along dim (n = src's extent there, every other extent
 * dst's): PyTorch's `cache[:, :, pos:pos + t] = k`, in place and outside autograd (nothing
 * recorded; what read dst's old values for a backward is refused by it, as for any write), for
 * a key/value cache a sampler fills. dst: a tensor of src's dtype and backend (the cache: one of
 * the caller's own, amp_tensor_create, which outlives the step); refused, unchanged, when src
 * does not fit. */
amp_status amp_tensor_write_slice(amp_tensor *dst, int dim, int64_t start, const amp_tensor *src);

/* ---- autograd ---- */
/* Backward passes: amp_backward(loss) in amp/mixed_precision.h (d loss = 1, or the loss scale
 * once amp_initialize ran). */
/* Gradient recording on (default) or off, e.g. for evaluation. Returns the previous setting. */
bool amp_set_grad_enabled(amp_ctx *ctx, bool enabled);
/* Marks a leaf tensor (made with amp_tensor_create) as needing a gradient. */
amp_status amp_tensor_set_requires_grad(amp_tensor *t, bool requires_grad);
/* The gradient written since the last zero_grad (AMP_ERR_STATE when none), as backward wrote
 * it: under amp with a loss scale it is scaled until amp_step, and at O2 it is the half model's
 * half gradient; amp_unscaled_grad_to_host (amp/mixed_precision.h) reads the unscaled one. */
amp_status amp_tensor_get_grad(const amp_tensor *t, amp_tensor **out);
/* Forgets a leaf's gradient: the next backward overwrites instead of accumulating. */
void amp_tensor_zero_grad(amp_tensor *t);

/* ---- models: PyTorch's nn.Module in C ----
 * A model is named parameters, buffers and children plus a forward the user writes with the ops
 * above. Parameters and buffers are registered before the model is built; the build (first
 * forward, amp_model_build, or anything that needs the storage: an optimizer, amp_initialize,
 * DDP, a checkpoint) gives the whole tree one block of parameters, one of gradients and one of
 * buffers, names every entry by its dotted path as PyTorch's state_dict does
 * ("layer1.0.conv1.weight": a node's own entries first, then its children's in the order they
 * were added), and draws the initial values from the context's RNG in that order. Optimizers,
 * amp_initialize, DDP, SyncBatchNorm conversion, checkpoints and amp-bench take any model. */
typedef struct amp_model amp_model;

/* The forward: self is the model being run; inputs as given to amp_model_forward(_n). It reads
 * its parameters with amp_model_param(self, index) (the index its registration returned) and
 * runs its children with amp_model_forward. */
typedef amp_status (*amp_forward_fn)(amp_model *self, amp_tensor *const *inputs, int n_inputs,
                                     amp_tensor **out);

/* How a parameter or buffer starts (drawn from the context's RNG, in registration order). */
typedef enum amp_init_kind {
    AMP_INIT_ZEROS = 0,
    AMP_INIT_ONES,
    /* PyTorch's Linear/Conv default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform_ with
     * a = sqrt(5) for weights; the same bound for their biases). fan_in: .fan_in, or when 0 the
     * tensor's shape[1] * shape[2] * ... (a weight's). */
    AMP_INIT_TORCH_DEFAULT,
    AMP_INIT_NORMAL,  /* N(a, b^2): mean a, standard deviation b (GPT-2's normal(0, 0.02)) */
    AMP_INIT_UNIFORM, /* U(a, b) */
    AMP_INIT_CALLER,  /* zeros; the caller writes it after amp_model_build (copy from host) */
} amp_init_kind;
typedef struct amp_init {
    amp_init_kind kind;
    float a, b;
    int64_t fan_in;
} amp_init;
#define AMP_INIT_ZERO_VALUES ((amp_init){.kind = AMP_INIT_ZEROS})
#define AMP_INIT_ONE_VALUES ((amp_init){.kind = AMP_INIT_ONES})
#define AMP_INIT_NORMAL_OF(mean, std) ((amp_init){.kind = AMP_INIT_NORMAL, .a = (mean), .b = (std)})
#define AMP_INIT_UNIFORM_OF(lo, hi) ((amp_init){.kind = AMP_INIT_UNIFORM, .a = (lo), .b = (hi)})
#define AMP_INIT_TORCH_FAN_IN(n) ((amp_init){.kind = AMP_INIT_TORCH_DEFAULT, .fan_in = (n)})

/* A model with no entries. forward may be NULL for a container whose parent runs its children
 * itself (forwarding it is then an error). user is handed back by amp_model_user; free_user (may
 * be NULL) is called with it when the model goes. */
amp_status amp_model_create(amp_ctx *ctx, amp_forward_fn forward, void *user,
                            void (*free_user)(void *user), amp_model **out);
void *amp_model_user(const amp_model *m);
/* The forward m was created with (NULL for a container): `type(m) is GPT` for code that holds
 * a model of its own making, as models/ checks the model handed to it. */
amp_forward_fn amp_model_forward_fn(const amp_model *m);
/* Registers a parameter (trainable, with a gradient) or a buffer (state such as running
 * statistics: saved, broadcast by DDP, never stepped) of m itself; *index (may be NULL) is what
 * amp_model_param / amp_model_buffer take in m's forward. Names: 1..63 characters without a
 * '.' (as torch's register_parameter/register_buffer/add_module: "fc.weight" is the entry
 * "weight" of a child "fc"), unique among m's parameters, buffers and children. Before the model
 * is built only. */
amp_status amp_model_register_param(amp_model *m, const char *name, int ndim,
                                    const int64_t *shape, amp_init init, int *index);
amp_status amp_model_register_buffer(amp_model *m, const char *name, int ndim,
                                     const int64_t *shape, amp_init init, int *index);
/* Makes child a part of parent under `name` (its entries become "name.<entry>"; the name is
 * checked as a parameter's, no '.' in it). The parent owns
 * it from then on: amp_model_free(parent) frees it, and the child alone cannot be freed,
 * optimised or saved. Both unbuilt, on one context; a child belongs to one parent. */
amp_status amp_model_add_child(amp_model *parent, const char *name, amp_model *child);
int amp_model_n_children(const amp_model *m);
amp_model *amp_model_child(const amp_model *m, int i);
const char *amp_model_name(const amp_model *m); /* its name under its parent ("" for a root) */
/* Marks m as a normalisation module (BatchNorm, LayerNorm, RMSNorm): its parameters and buffers
 * stay f32 where keep_batchnorm_fp32 holds (O2, O3), as the library's batch norm does. */
amp_status amp_model_set_norm(amp_model *m, bool norm);
/* Activation recomputation (torch.utils.checkpoint, Megatron's full recompute) of a child with a
 * forward of its own. AMP_RECOMPUTE_FULL: while gradients are recorded, the child's forward runs
 * without keeping its intermediates (their memory is reused at once); only its inputs and its
 * output stay for the backward. When backward reaches it, its forward runs again with the
 * autocast state, the training flags and the RNG counter of the first run (so the same dtypes
 * and dropout masks), then its backward: gradients are the same bits as without recomputation.
 * Batch norms inside update their running statistics once, in the first run. Under no-grad
 * (evaluation) the child runs as usual. What is refused, and why (the error says which):
 *  - the root model (nothing would be saved), and a container without a forward;
 *  - a change while a graph is pending (between a forward and its backward);
 *  - a forward that writes its inputs, its parameters or a buffer other than a library batch
 *    norm's running statistics in place: the recomputation would read or write them again;
 *  - a recomputation that draws another amount of random numbers, or gives an output of another
 *    shape or dtype, than the first run (a forward that depends on state outside its inputs).
 * Tensors the forward made other than its output are gone once it returns: a forward must not
 * hand them out by another way (its user data). A child set to recompute inside one that is runs
 * as a part of it. Nothing of this is saved in checkpoints: it is a choice of how to run. */
typedef enum amp_recompute {
    AMP_RECOMPUTE_NONE = 0,
    AMP_RECOMPUTE_FULL = 1,
    /* Selective (llm.c's -r): which op outputs are written again instead of kept is a model's
     * choice of ops (amp_linear_ex's recompute_input), so only models take it (models/:
     * amp_gpt_set_recompute, amp_llama_set_recompute); amp_model_set_recompute refuses it. */
    AMP_RECOMPUTE_SELECTIVE = 2,
} amp_recompute;
amp_status amp_model_set_recompute(amp_model *child, amp_recompute mode);
amp_recompute amp_model_get_recompute(const amp_model *m);
/* What recomputation did for a child in its last forward and backward of the step: kept_bytes,
 * what its forward kept for the backward (the copy of its output; its inputs are its caller's
 * tensors), and transient_bytes, the most the recomputation arena (AMP_MEM_RECOMPUTE,
 * amp/memory.h) held for it, in its first run or its replay: the peak of the intermediates it
 * did not keep. Both 0 for a child not recomputed (or not run) since the step began. */
typedef struct amp_recompute_memory {
    size_t kept_bytes, transient_bytes;
} amp_recompute_memory;
amp_status amp_model_recompute_memory(const amp_model *child, amp_recompute_memory *out);

/* The library's modules, each a model of the API above (torch.nn's names and defaults). */
amp_status amp_module_linear(amp_ctx *ctx, int64_t in, int64_t out, bool bias, amp_model **m);
amp_status amp_module_conv2d(amp_ctx *ctx, int64_t c_in, int64_t c_out, int kernel, int stride,
                             int padding, bool bias, amp_model **m);
/* weight 1, bias 0, running_mean 0, running_var 1; momentum 0.1, eps 1e-5. */
amp_status amp_module_batchnorm2d(amp_ctx *ctx, int64_t c, amp_model **m);
amp_status amp_module_relu(amp_ctx *ctx, amp_model **m);
amp_status amp_module_maxpool2d(amp_ctx *ctx, int kernel, int stride, amp_model **m);
amp_status amp_module_flatten(amp_ctx *ctx, amp_model **m);
amp_status amp_module_dropout(amp_ctx *ctx, float p, amp_model **m);
/* LayerNorm over the last dim (weight 1 and, with bias, bias 0; PyTorch's eps 1e-5) and RMSNorm
 * (weight 1): norms, so f32 at every opt level (keep_batchnorm_fp32 holds for every norm).
 * Embedding [vocab, dim], N(0, 1) as torch.nn.Embedding (its forward takes i32 ids). GELU, exact
 * or the tanh approximation (GPT-2's). */
amp_status amp_module_layer_norm(amp_ctx *ctx, int64_t dim, float eps, bool bias, amp_model **m);
amp_status amp_module_rms_norm(amp_ctx *ctx, int64_t dim, float eps, amp_model **m);
amp_status amp_module_embedding(amp_ctx *ctx, int64_t vocab, int64_t dim, amp_model **m);
amp_status amp_module_gelu(amp_ctx *ctx, bool tanh_approx, amp_model **m);

/* Sequential: a model whose forward runs its children in order (a Linear or BatchNorm2d
 * directly followed by a ReLU, and a Linear directly followed by a GELU, run as the fused op).
 * amp_seq_add adds any model as the next child; `name` NULL names it by its index. The amp_seq_add_<layer> calls add a library module. */
amp_status amp_seq_create(amp_ctx *ctx, amp_model **out);
amp_status amp_seq_add(amp_model *seq, const char *name, amp_model *child);
amp_status amp_seq_add_linear(amp_model *m, const char *name, int64_t in, int64_t out, bool bias);
amp_status amp_seq_add_conv2d(amp_model *m, const char *name, int64_t c_in, int64_t c_out,
                              int kernel, int stride, int padding, bool bias);
amp_status amp_seq_add_batchnorm2d(amp_model *m, const char *name, int64_t c);
amp_status amp_seq_add_relu(amp_model *m, const char *name);
amp_status amp_seq_add_maxpool2d(amp_model *m, const char *name, int kernel, int stride);
amp_status amp_seq_add_flatten(amp_model *m, const char *name);
amp_status amp_seq_add_dropout(amp_model *m, const char *name, float p);
/* Allocates and initialises the parameters and buffers of the whole tree (see above). A child
 * is built by building its root. */
amp_status amp_model_build(amp_model *m);

/* Runs m's forward (building the tree first when needed). On a root it also applies the
 * boundary casts of O2/O3 (float inputs to the model's dtype, the output to f32). */
amp_status amp_model_forward(amp_model *m, amp_tensor *x, amp_tensor **out);
amp_status amp_model_forward_n(amp_model *m, amp_tensor *const *inputs, int n_inputs,
                               amp_tensor **out);
/* Training mode (default) or eval, for m and every model below it (torch's module.train()). */
amp_status amp_model_train(amp_model *m, bool training);
bool amp_model_is_training(const amp_model *m);
amp_ctx *amp_model_ctx(const amp_model *m);
void amp_model_free(amp_model *m); /* NULL is a no-op */

/* Parameters (trainable, with .grad) and buffers (running statistics) of m's subtree: m's own
 * in registration order, then its children's, as torch's named_parameters(). Names are dotted
 * from m (a child's "conv1.weight", its root's "layer1.0.conv1.weight"). Tensors are NULL, and
 * counts those registered so far, until the model is built. An index out of range, or a model
 * not built yet, answers NULL with the reason in amp_last_error (as amp_model_child does). */
int amp_model_n_params(const amp_model *m);
amp_tensor *amp_model_param(const amp_model *m, int i);
const char *amp_model_param_name(const amp_model *m, int i);
int amp_model_n_buffers(const amp_model *m);
amp_tensor *amp_model_buffer(const amp_model *m, int i);
const char *amp_model_buffer_name(const amp_model *m, int i);
/* Looks a parameter or buffer up by its dotted name. */
amp_status amp_model_find(const amp_model *m, const char *name, amp_tensor **out);
int64_t amp_model_numel(const amp_model *m); /* parameters only */

#ifdef __cplusplus
}
#endif
#endif
