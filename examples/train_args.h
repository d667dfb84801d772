/* amp-train's command line. */
#ifndef AMP_EXAMPLES_TRAIN_ARGS_H
#define AMP_EXAMPLES_TRAIN_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/models/llama.h"
#include "amp/status.h"

typedef struct train_args {
    const char *model;     /* convnet | mlp | gpt | llama */
    const char *optimizer; /* sgd | adam */
    const char *data_dir;
    int epochs;
    int64_t batch_size;
    float lr, momentum;
    uint64_t seed;
    int64_t max_steps; /* 0: no limit */
    int threads;       /* 0: all cores */
    bool json;
    int device;            /* 0 auto (CUDA when a device answers), 1 cpu, 2 cuda */
    int64_t log_every;     /* 0: no per-step log; N: loss, scale, skip flag every N steps */
    bool no_eval;          /* skip the test-set evaluation after each epoch (tests, benchmarks) */
    int opt_level;         /* 0..3 */
    bool bf16;             /* --half bf16 (default fp16) */
    float loss_scale;      /* 0: the level's; -1: dynamic; > 0: static */
    float init_scale;      /* dynamic scaler's first scale; 0: 65536 */
    int skip_nonfinite;    /* 0: the level's; 1: on; -1: off */
    const char *checkpoint_dir; /* NULL: no checkpoints */
    int64_t save_every;    /* steps between saves; 0: only at the end (and on SIGTERM/SIGINT) */
    int keep;              /* newest step folders kept; 0: all */
    const char *resume;    /* NULL, "latest" (in checkpoint_dir) or a step folder */
    const char *init_weights; /* a safetensors file of weights to start from (PyTorch's, ...) */
    bool sync_bn;          /* --sync-bn: batch norm statistics over every rank's batch (DDP) */
    bool allreduce_fp32;   /* --allreduce-fp32: half gradients all-reduced in f32 */
    int zero_stage;        /* --zero N: ZeRO's stage under mpirun (0: DDP) */
    int64_t accumulate;    /* --accumulate K: micro-batches per optimizer step (default 1) */
    bool allow_tf32;       /* --allow-tf32: f32 GEMMs and convolutions in TF32 on CUDA */
    bool nondeterministic; /* --nondeterministic: cuDNN may pick non-deterministic algorithms */
    bool batch_per_process; /* --batch-per-process: under mpirun, --batch-size is each process's
                               (PyTorch's DistributedSampler + DataLoader); else the global
                               batch, split over the processes */
    /* --model gpt and llama (examples/train_lm.c); block_size is the GPT's shape and the
       Llama's training window */
    int n_layer, n_head, n_embd, block_size, vocab_size;
    struct { /* the shape options given on the command line: a resume takes the others from the
                checkpoint's model_args and refuses these where they differ */
        bool n_layer, n_head, n_embd, block_size, vocab_size;
    } given;
    float dropout, min_lr, weight_decay, grad_clip, temperature;
    bool data_order_sequential;
    int64_t warmup_steps, eval_every, eval_batches, sample;
    int64_t lr_decay_steps; /* where the cosine reaches --min-lr; 0: --max-steps */
    int top_k;
    const char *tokenizer; /* --tokenizer FILE: llm.c's tokenizer .bin, samples printed as text */
    bool eval_only;        /* --eval-only: the validation loss and sample of the loaded weights */
    const char *start;     /* --start TEXT: the sample's prompt, as bytes (a byte-level model) */
    const char *start_ids; /* --start-ids I,J,...: the sample's prompt as token ids */
    int recompute;         /* --recompute: AMP_RECOMPUTE_NONE, _SELECTIVE or _FULL */
    /* --model llama (examples/train_lm_models.c): --config FILE (a Hugging Face config.json),
       then its fields as options over it, under their names */
    const char *llama_config;
    amp_llama_config llama;
    struct llama_given {
        bool hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
            num_key_value_heads, head_dim, max_position_embeddings, rope_theta, rms_norm_eps,
            tie_word_embeddings;
    } llama_given;
} train_args;

/* Fills args from argv; returns 0 to go on, 1 after printing help, -1 after printing an error. */
int train_args_parse(int argc, char **argv, train_args *args);
/* Where --resume reads: *resume false without --resume; --resume latest: the step folder that
 * checkpoint_dir/latest names, or, where no save has completed there (a job killed before its
 * first save, a requeued one run with the same command line), *resume false after clearing what
 * the killed save left, with one line on stderr when `say` (rank 0) that the run starts from
 * step 0, as Megatron and DeepSpeed do; --resume PATH: PATH itself (a step folder or checkpoint
 * directory that does not exist stays the load's error). */
amp_status train_resume_source(const train_args *args, bool say, char *from, size_t size,
                               bool *resume);
/* amp-train --model gpt and --model llama: returns the process's exit code. */
int amp_train_lm(const train_args *args);

#endif
