/* The Llama family (Llama 2 and 3, Mistral, Qwen2, SmolLM, TinyLlama: Hugging Face's
 * LlamaForCausalLM) written with the model API over the public headers (models/llama.c reads top
 * to bottom): token embedding; pre-RMSNorm blocks of grouped-query causal self-attention with
 * rotary position embeddings and a SwiGLU MLP, with residual adds; a final RMSNorm; a head, tied
 * to the embedding or its own.
 *
 * Names are Hugging Face's LlamaForCausalLM state_dict, so a checkpoint's model.safetensors loads
 * into it with strict=True and a Hugging Face model.safetensors loads as it is:
 *   model.embed_tokens.weight [vocab, hidden]
 *   model.layers.<l>.input_layernorm.weight [hidden]
 *   model.layers.<l>.self_attn.{q_proj [heads d, hidden], k_proj, v_proj [kv_heads d, hidden],
 *                               o_proj [hidden, heads d]}.weight (and .bias with attention_bias)
 *   model.layers.<l>.post_attention_layernorm.weight [hidden]
 *   model.layers.<l>.mlp.{gate_proj, up_proj [intermediate, hidden], down_proj}.weight
 *   model.norm.weight, lm_head.weight [vocab, hidden] unless tie_word_embeddings.
 * Initialisation is Hugging Face's (LlamaPreTrainedModel._init_weights): every linear and the
 * embedding N(0, initializer_range), biases 0, norms 1. q_proj and k_proj hold the rotate-half
 * layout, as Hugging Face's checkpoints store them. The vocabulary is not padded: the family's
 * vocabularies (32000, 32768, 49152, 128256, 151936) are multiples of 64 already, and a padded
 * embedding would not load into LlamaForCausalLM. */
#ifndef AMP_MODELS_LLAMA_H
#define AMP_MODELS_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/models/lm.h"
#include "amp/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The fields of a Hugging Face LlamaConfig, under its names. */
typedef struct amp_llama_config {
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers;
    int64_t num_attention_heads, num_key_value_heads; /* 0: num_attention_heads */
    int64_t head_dim;                                 /* 0: hidden_size / num_attention_heads */
    int64_t max_position_embeddings;
    float rms_norm_eps, rope_theta; /* rope_theta 0: 10000 */
    amp_rope_type rope_type;        /* rope_scaling's (rope_parameters') "rope_type" */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_position_embeddings;
    bool tie_word_embeddings, attention_bias;
    float attention_dropout;
    float initializer_range; /* 0: 0.02 */
} amp_llama_config;

/* The defaults amp_llama_create fills in for the fields left 0: num_key_value_heads =
 * num_attention_heads, head_dim = hidden_size / num_attention_heads, rope_theta 10000,
 * initializer_range 0.02. */
void amp_llama_config_defaults(amp_llama_config *cfg);
/* The fields where a and b (their defaults filled in) differ, as "name A vs B, ..." into out
 * (may be NULL; cut at size), and their number: 0 when they make the same model. The Llama 3
 * numbers count only where both are rope_type llama3. */
int amp_llama_config_differences(const amp_llama_config *a, const amp_llama_config *b, char *out,
                                 size_t size);

/* The Llama of cfg, unbuilt (amp_model_build, or anything that needs the storage, draws Hugging
 * Face's init from the context's RNG). Its forward takes idx [B, T] (i32 token ids, 1 <= T <=
 * max_position_embeddings) and gives logits [B, T, vocab_size]. Errors name the field. */
amp_status amp_llama_create(amp_ctx *ctx, const amp_llama_config *cfg, amp_model **out);
/* The config m was made with; AMP_ERR_INVALID_ARG when m is not a Llama of amp_llama_create. */
amp_status amp_llama_config_of(const amp_model *m, amp_llama_config *cfg);
/* The mean next-token cross-entropy of idx [B, T] against targets [B, T] (amp_lm_loss). */
amp_status amp_llama_loss(amp_model *m, amp_tensor *idx, amp_tensor *targets, amp_tensor **loss);
/* The logits of the last position of idx only, [B, 1, vocab]: the head on one row each. */
amp_status amp_llama_forward_last(amp_model *m, amp_tensor *idx, amp_tensor **logits);
/* Parameters (the embedding once when tied), and the model FLOPs of one token's forward and
 * backward at length T: 6 N for the GEMMs (the embedding's lookup excluded: N less vocab x
 * hidden unless the head is tied to it, where it is the head's GEMM) plus the attention's
 * 6 layers T heads head_dim (causal). -1 and 0 when m is not a Llama. */
int64_t amp_llama_n_params(const amp_model *m);
double amp_llama_flops_per_token(const amp_model *m, int64_t T);

/* Activation recomputation of every decoder layer (amp_model_set_recompute on
 * "model.layers.<i>"), as amp_gpt_set_recompute; AMP_RECOMPUTE_SELECTIVE keeps neither norm's
 * output (input_layernorm's, post_attention_layernorm's) nor the SwiGLU product (written
 * again, from the norms' inputs and from the gate and up projections, for the q/k/v, gate/up
 * and down projections' weight gradients). Between steps only. */
amp_status amp_llama_set_recompute(amp_model *m, amp_recompute mode);
/* Generation. amp_llama_forward_cached runs idx [B, t] (no gradients: amp_set_grad_enabled off)
 * at positions len .. len + t - 1 of the cache c (amp_lm_cache_create with the model's layers),
 * appends their keys and values and gives the logits of the last new position [B, 1, vocab]:
 * the prompt once, then one token at a time, each costing one position's forward over the
 * cache (O(T)), where a full forward costs the window's. The attention over the cache is the
 * fused kernel's with the causal mask aligned to the end. A position past max_position_embeddings
 * is refused.
 * amp_llama_generate draws n tokens after the prompt into out (amp_lm_draw from the last
 * position's logits, opts' temperature, top_k and seed), with the cache or (use_cache false) by
 * full forwards of the last max_position_embeddings tokens (nanoGPT's generate), the model in
 * eval mode and gradients off for the call (restored after), the context's step ended after
 * each token (amp_ctx_reset_step). The same seed draws the same tokens either way, up to a
 * draw within a rounding of a boundary (the two forwards' logits agree to rounding). */
amp_status amp_llama_forward_cached(amp_model *m, amp_lm_cache *c, amp_tensor *idx,
                                    amp_tensor **logits);
amp_status amp_llama_generate(amp_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n,
                              const amp_lm_sample_opts *opts, bool use_cache, int32_t *out);

/* Hugging Face folders (models/llama_hf.c). amp_llama_config_load reads a config.json as either
 * generation of transformers writes it (4.x: rope_theta and rope_scaling {"rope_type" or "type",
 * factor, low_freq_factor, high_freq_factor, original_max_position_embeddings} at the top level;
 * 5.x: rope_parameters holding rope_theta and rope_type with the same numbers); fields it does
 * not use (bos_token_id, torch_dtype, ...) are ignored, and absent ones keep amp_llama_create's
 * defaults. Refused, naming the file and the field, and cfg unchanged: a known field of the
 * wrong JSON type, a rope type other than "default" or "llama3", a model_type other than
 * "llama", a hidden_act other than "silu", mlp_bias, pretraining_tp other than 1.
 * amp_llama_from_pretrained makes the Llama of DIR/config.json, built, with DIR/model.safetensors'
 * weights, or those of the shards DIR/model.safetensors.index.json's weight_map names (strict over
 * them all: every tensor present once with its shape, nothing unexpected; f32, f16 or bf16; a
 * shard the index names that is not there is refused, naming it). */
amp_status amp_llama_config_load(const char *path, amp_llama_config *cfg);
amp_status amp_llama_from_pretrained(amp_ctx *ctx, const char *dir, amp_model **out);
/* The same reading from a JSON text (a checkpoint's metadata); origin names it in errors. */
amp_status amp_llama_config_parse(const char *json, const char *origin, amp_llama_config *cfg);

/* Into a model of the caller's (built, amp_initialize'd or not): DIR's weights as
 * amp_llama_from_pretrained reads them, the masters too after amp_initialize with masters (opt
 * may be NULL without). DIR/config.json must describe m's config (else refused, naming every
 * field that differs: another head count can give the same tensor shapes), as amp-train's
 * --init-weights DIR loads. */
amp_status amp_llama_load_pretrained(amp_model *m, amp_optimizer *opt, const char *dir);

/* Hugging Face folders out: cfg (its defaults filled in) as transformers' config.json, readable by
 * both generations (rope_parameters for 5.x, and rope_theta with rope_scaling at the top level
 * for 4.x), reals in the shortest decimal of their f32 value, keys sorted, into out;
 * amp_llama_config_save writes it as a file; amp_llama_save_pretrained makes DIR (if missing)
 * with config.json and model.safetensors (m's weights, amp_model_save_weights): what
 * LlamaForCausalLM.from_pretrained(DIR) and amp_llama_from_pretrained load. */
#define AMP_LLAMA_CONFIG_JSON_MAX 4096
amp_status amp_llama_config_to_json(const amp_llama_config *cfg, char *out, size_t size);
amp_status amp_llama_config_save(const amp_llama_config *cfg, const char *path);
amp_status amp_llama_save_pretrained(amp_model *m, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
