/* One amp-bench configuration run in libamp, and the machine's GEMM peaks as libamp's backend
 * reaches them. Both run in the calling process (amp_bench.c runs each in a child of its own,
 * so that every configuration starts from a fresh process: its memory and RSS are its own). */
#ifndef AMP_BENCH_LIBAMP_H
#define AMP_BENCH_LIBAMP_H

#include <stdbool.h>

#include "amp/amp.h"
#include "bench/bench_report.h"

/* A language model's shape: the GPT's (models/gpt.c; amp-bench's defaults are amp-train's) or
 * the Llama's (models/llama.c: kv_heads and intermediate its own). */
typedef struct bench_lm_shape {
    int n_layer, n_head, n_embd, block_size, vocab_size;
    int kv_heads, intermediate; /* the Llama's */
} bench_lm_shape;

typedef struct bench_cfg {
    const char *model;      /* "mlp", "convnet", "resnet", "gpt" or "llama" */
    bench_lm_shape lm;      /* "gpt", "llama": the shape; a sample is a sequence of block_size */
    amp_opt_level level;
    amp_half_type half;     /* ignored at O0 */
    int batch;
    amp_device device;      /* AMP_DEVICE_CPU or AMP_DEVICE_CUDA */
    int threads;
    int steps, warmup;      /* timed steps, and untimed ones before them */
    bool profile;           /* also time the step's op categories (extra steps, after) */
    amp_recompute recompute; /* "gpt", "llama": every block's (amp_model_set_recompute) */
    amp_comm *comm;         /* several ranks: DDP over them (amp/parallel.h); NULL: one process */
    int zero_stage;         /* under DDP: amp_ddp_opts.zero_stage */
} bench_cfg;

/* Trains cfg's model on one synthetic batch (fixed random images, labels i % 10), SGD with
 * momentum as amp-train (a GPT or a Llama: fixed random token sequences, AdamW as amp-train
 * --model gpt configures it, the gradient norm clipped at 1): warm-up steps, then `steps` timed steps (the host waits for the device
 * at each step's end, so a step's time is its own), then one step counted by the op profile
 * (FLOPs, host waits) and, with cfg->profile, `steps` timed-profile steps. Fills the row's
 * configuration and measurements (MFU is left for the caller, who knows the peaks). Under DDP
 * (cfg->comm with several ranks; every rank calls it) each rank trains its batch of cfg->batch
 * samples: samples/s and GFLOP are the world's (the sum over the ranks), step times, memory and
 * RSS this rank's. */
amp_status bench_libamp_run(const bench_cfg *cfg, bench_row *row);
/* "none", "selective", "full": a row's recompute. */
const char *bench_recompute_name(amp_recompute mode);

/* The best GFLOP/s of square GEMMs (f32, bf16, f16 inputs, f32 accumulation, output in the
 * input's dtype) through the backend of `device` with `threads` threads: the roofline amp-bench
 * computes MFU against. A dtype the backend cannot multiply gives NaN. quick: smaller products,
 * fewer calls (amp-bench --quick-peak: a tenth of the time, a peak that may be low). */
amp_status bench_measure_peaks(amp_device device, int threads, bool quick, double *f32,
                               double *bf16, double *f16);

#endif
