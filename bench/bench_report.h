/* amp-bench's results: one bench_row per measured configuration (libamp or PyTorch), one
 * bench_run_header per run, and writers that print them as a terminal table, JSON, CSV or the
 * Markdown that bench/RESULTS.md is made of.
 *
 * Unknown values: doubles are NaN and byte counts are -1 (bench_row_init sets every metric so).
 * The table and Markdown print them as "-", JSON as null, CSV as an empty field.
 *
 * Errors: every function returning amp_status leaves a message in bench_last_error() on failure
 * (thread-local, valid until the next failure on that thread). AMP_ERR_INVALID_ARG for a NULL
 * stream, header or rows (rows may be NULL when n_rows == 0), AMP_ERR_IO when the stream fails,
 * AMP_ERR_OOM. The support library does not link libamp: amp_status is only the type. */
#ifndef AMP_BENCH_REPORT_H
#define AMP_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "amp/status.h"

/* Peak memory by kind; the order of the columns everywhere. Values only appended. */
typedef enum bench_mem_kind {
    BENCH_MEM_PARAMS,
    BENCH_MEM_GRADS,
    BENCH_MEM_MASTERS,
    BENCH_MEM_OPTIMIZER,
    BENCH_MEM_ACTIVATIONS,
    BENCH_MEM_WORKSPACE,
    BENCH_MEM_OTHER,
    BENCH_MEM_RECOMPUTE,
    BENCH_MEM_N_KINDS
} bench_mem_kind;

/* Profile categories: seconds per step spent in each. Values only appended. */
typedef enum bench_prof_cat {
    BENCH_PROF_GEMM_CONV,
    BENCH_PROF_NORM,
    BENCH_PROF_ELEMENTWISE,
    BENCH_PROF_CAST,
    BENCH_PROF_OPTIMIZER,
    BENCH_PROF_OVERHEAD,
    BENCH_PROF_N_CATS
} bench_prof_cat;

/* "params", "grads", "masters", "optimizer", "activations", "workspace", "other", "recompute";
 * "?" if out of range. The JSON keys and CSV column suffixes. */
const char *bench_mem_kind_name(int kind);
/* "gemm_conv", "norm", "elementwise", "cast", "optimizer", "overhead"; "?" if out of range. */
const char *bench_prof_cat_name(int cat);

/* One measured configuration. Strings are copied in (NUL-terminated, truncated to fit). */
typedef struct bench_row {
    /* configuration */
    char impl[16];      /* "libamp" or "pytorch" */
    char model[32];     /* "mlp", "convnet" */
    char recompute[12]; /* a language model's: "none", "selective", "full"; "-" otherwise */
    char opt_level[16]; /* "O0".."O3"; PyTorch: "fp32", "autocast-bf16", "autocast-fp16" */
    char half[8];       /* "fp16", "bf16", or "-" (PyTorch rows, fp32) */
    int batch;          /* samples per step (per rank) */
    char device[8];     /* "cpu", "cuda" */
    int threads;
    int world_size;     /* ranks; 1 without DDP */
    int zero_stage;     /* under DDP: ZeRO's stage (0: replicas) */
    int seq_len;        /* tokens per sample (a GPT's sequence length); 0: not a token model */
    /* metrics; doubles NaN and byte counts -1 when unknown */
    int n_steps;                                /* measured steps (after warm-up) */
    double step_ms_median, step_ms_p10, step_ms_p90;
    double samples_per_s;                       /* batch / median step time */
    double gflop_per_step;                      /* the model's FLOP per training step / 1e9 */
    double gflop_per_s;                         /* gflop_per_step / median step time */
    double mfu;                                 /* fraction of the measured peak, 0..1 */
    int64_t mem_peak_nbytes[BENCH_MEM_N_KINDS]; /* what each kind held when the total peaked */
    int64_t mem_peak_total_nbytes;              /* the peak of the sum */
    int64_t host_peak_rss_nbytes;               /* getrusage ru_maxrss */
    int64_t skipped_steps;                      /* steps the scaler skipped (inf/NaN grads) */
    double host_syncs_per_step;                 /* device-to-host waits per step */
    /* samples_per_s / PyTorch's of the same configuration; when NaN, the table and Markdown
     * compute it from the matching PyTorch row (bench_find_pytorch_match), if there is one */
    double ratio_vs_pytorch;
    double scaling_efficiency; /* under mpirun: samples_per_s / (world_size x one rank alone's) */
    double prof_s_per_step[BENCH_PROF_N_CATS]; /* NaN when not profiled */
} bench_row;

/* The run: where and with what it was measured. */
typedef struct bench_run_header {
    char date[32];          /* "2026-11-24 10:31 UTC" */
    char cpu_model[128];    /* /proc/cpuinfo "model name" (core/cpu_info.h) */
    char isa[160];          /* e.g. "avx2 fma f16c" or "avx512f avx512_bf16 amx_bf16" */
    char gpu_model[128];    /* "" when no GPU was used */
    int threads;            /* CPU threads the run used */
    double peak_gflops_f32; /* measured peaks (GEMM), NaN when not measured */
    double peak_gflops_bf16;
    double peak_gflops_f16;
    bool peak_quick;        /* measured by amp-bench --quick-peak: small products, may read low */
    char lib_version[32];   /* libamp's version */
    char torch_version[32]; /* "" when PyTorch was not run */
    char model_note[400];   /* the shapes of models that take them (a GPT's, a Llama's), "" when none */
} bench_run_header;

/* Message of the last failure on this thread; "" when none. Never NULL. */
const char *bench_last_error(void);
/* Records a message for bench_last_error() and returns s. For the bench support files. */
amp_status bench_fail(amp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* half "-" and the other strings "", batch/threads/n_steps 0, world_size 1, every double NaN,
 * every byte count and skipped_steps -1. */
void bench_row_init(bench_row *row);

/* Sets date (now, UTC), cpu_model and isa "unknown" (amp-bench's bench_machine_describe fills
 * them from core/cpu_info.h), peaks NaN, threads 0 and the other strings "". */
void bench_run_header_init(bench_run_header *run);

/* The PyTorch configuration that matches a libamp row's precision ("fp32" for O0, otherwise
 * "autocast-" + half), or NULL when the row is not a libamp row. */
const char *bench_pytorch_config_for(const bench_row *libamp_row);
/* Index of the PyTorch row measured with the same model, batch, device, threads, world size and
 * matching precision as rows[i] (a libamp row), or -1. */
int bench_find_pytorch_match(const bench_row *rows, int n_rows, int i);

/* Aligned columns for a terminal (~150 characters): the throughput block, then the memory split
 * in MiB, then (when any row was profiled) milliseconds per step by category, then (when any row
 * is a token model's) tokens/s. */
amp_status bench_write_table(FILE *f, const bench_run_header *run, const bench_row *rows,
                             int n_rows);
/* One JSON object {"run": {...}, "rows": [{...}, ...]} with every field; NaN and -1 as null. */
amp_status bench_write_json(FILE *f, const bench_run_header *run, const bench_row *rows,
                            int n_rows);
/* RFC 4180 CSV: one header line and one line per row with every row field (the run header is
 * not in it); strings quoted when they hold a comma, quote or newline. */
amp_status bench_write_csv(FILE *f, const bench_row *rows, int n_rows);
/* A "CPU: ..." line, then a throughput table (libamp rows, each with its matching PyTorch row's
 * samples/s and the ratio beside it; PyTorch rows with no libamp match get their own line), then
 * a memory table (one line per row), then (when any row is a token model's) a tokens/s table. */
amp_status bench_write_markdown(FILE *f, const bench_run_header *run, const bench_row *rows,
                                int n_rows);

#endif
