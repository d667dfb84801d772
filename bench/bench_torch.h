/* amp-bench's PyTorch side: the same model, batch and precision run by
 * bench/pytorch_reference.py --bench in a Python of its own, read back as a result row. */
#ifndef AMP_BENCH_TORCH_H
#define AMP_BENCH_TORCH_H

#include "bench/bench_libamp.h"

/* Where the script is and which Python runs it ($PYTHON, else python3); the Llama's
 * transformers attention ("sdpa" or "eager", attn_implementation). */
typedef struct bench_torch_opts {
    const char *script;
    const char *python;
    const char *llama_attn;
} bench_torch_opts;

/* PyTorch's precision for a libamp level: "fp32" at O0, else torch.autocast with the half type
 * ("bf16", "fp16": PyTorch's one mixed-precision mode, Apex's O1). */
const char *bench_torch_precision(const bench_cfg *cfg);

/* Runs the reference for cfg (steps, warm-up, threads, device as cfg says) and fills row, and
 * version (size bytes) with torch's version.
 * AMP_ERR_UNSUPPORTED with the script's message when torch cannot be imported, AMP_ERR_IO when
 * the script fails or prints no result. */
amp_status bench_torch_run(const bench_torch_opts *o, const bench_cfg *cfg, bench_row *row,
                           char *version, size_t size);

#endif
