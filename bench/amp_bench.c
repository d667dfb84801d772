/* amp-bench: throughput, memory and model FLOP utilisation of every opt level side by side, and
 * PyTorch's in the same run.
 *
 *     amp-bench --model mlp --opt-level O0,O1,O2,O3 --half bf16 --compare-torch --plot mlp.png
 *
 * Every configuration (model x batch x level x half type; O0 has no half type) runs in a child
 * process of its own, so that its memory, its host RSS and its thread pools are its own, as a
 * PyTorch run is; the children run one after the other, never side by side. With
 * --compare-torch each configuration's PyTorch run (the same model, batch and precision:
 * autocast for the half levels, Apex's O1 being PyTorch's one mixed-precision mode) follows it
 * at once, so both see the machine in the same state. MFU is the GEMM/convolution FLOPs per
 * second (counted by the ops, amp/profile.h) over the peak that amp-bench measures through the
 * backend's own GEMM in the level's compute dtype (f32 at O0, the half type otherwise), before
 * and after the configurations, the better of the two kept.
 *
 * Under mpirun or srun (mpirun -np N amp-bench ...) every configuration trains with DDP over the
 * N ranks, each rank on its own batch of --batch samples with its share of the cores, after rank
 * 0 has trained it alone: the rows give the world's samples/s, per rank, and the scaling
 * efficiency against that one rank alone. The configurations then run inside the ranks' own
 * processes (an MPI process must not fork), so host RSS is the process's peak so far; only rank
 * 0 prints. PyTorch's runs are one-process runs: --compare-torch is refused there, and so is
 * --repeat (R runs of each configuration, the median kept), which needs the child processes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_libamp.h"
#include "bench/bench_machine.h"
#include "bench/bench_plot.h"
#include "bench/bench_torch.h"

#ifndef AMP_BENCH_SOURCE_DIR
#define AMP_BENCH_SOURCE_DIR "."
#endif
#ifndef AMP_BENCH_INSTALLED_SCRIPT
#define AMP_BENCH_INSTALLED_SCRIPT "../share/amp/pytorch_reference.py"
#endif
#define MAX_LIST 8
#define MAX_ROWS 256
#define MAX_REPEAT 15

typedef enum out_format { OUT_TABLE, OUT_JSON, OUT_CSV, OUT_MARKDOWN, OUT_N } out_format;

typedef struct bench_args {
    const char *models[MAX_LIST];
    int n_models;
    amp_opt_level levels[MAX_LIST];
    int n_levels;
    amp_half_type halves[MAX_LIST];
    int n_halves;
    int batches[MAX_LIST];
    int n_batches;
    amp_device device;
    int threads, steps, warmup, repeat;
    bool compare_torch, profile, threads_given, batch_given, quick_peak;
    amp_recompute recomputes[3]; /* --recompute LIST: the language models' */
    int zero_stage;              /* --zero N: under mpirun, a ZeRO row after each DDP row */
    int n_recomputes;
    bench_lm_shape gpt, llama; /* the shape options set both; --kv-heads, --intermediate the Llama's */
    const char *out_path[OUT_N]; /* NULL: not asked; "-": standard output */
    const char *plot;
    bench_torch_opts torch;
} bench_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: amp-bench [options]\n"
            "  --model LIST          mlp,convnet,resnet,gpt,llama (default mlp; resnet: the\n"
            "                        residual network of models/resnet.c; gpt: GPT-2 of\n"
            "                        models/gpt.c, llama: models/llama.c, on random tokens,\n"
            "                        AdamW, tokens/s)\n"
            "  --n-layer L --n-head H --n-embd C --block-size T --vocab-size V\n"
            "                        the language models' shape (GPT default 4, 4, 256, 128,\n"
            "                        256: amp-train's; Llama 4, 8, 256, 256, 256; a sample is a\n"
            "                        sequence of T tokens)\n"
            "  --kv-heads K --intermediate I\n"
            "                        the Llama's key/value heads and MLP width (default 2, 704)\n"
            "  --opt-level LIST      O0,O1,O2,O3 (default all four)\n"
            "  --half LIST           fp16,bf16 for O1-O3 (default bf16)\n"
            "  --batch LIST          samples per step (default 128; gpt: 16 sequences, llama: 8)\n"
            "  --steps N             timed steps (default 20)\n"
            "  --warmup W            untimed steps before them (default 5)\n"
            "  --repeat R            R runs of each configuration (alternating with PyTorch's),\n"
            "                        the one with the median step time kept (default 1)\n"
            "  --device cpu|cuda     (default cpu)\n"
            "  --threads T           CPU threads (default: all cores)\n"
            "  --compare-torch       run each configuration in PyTorch too, and give the ratio\n"
            "  --profile             time the step's op categories (extra steps)\n"
            "  --quick-peak          measure the GEMM peaks on 512^3 and 1024^3 products, twice\n"
            "                        each (default 1024^3 and 2048^3, 5 times): seconds instead\n"
            "                        of tens on a slow CPU, a peak that may read low (MFU high)\n"
            "  --json[=FILE] --csv[=FILE] --markdown[=FILE]\n"
            "                        that format to FILE, or instead of the table to stdout\n"
            "  --plot FILE.png       throughput and memory bars (gnuplot)\n"
            "  --zero N              under mpirun: after each DDP row, one with ZeRO stage N\n"
            "                        (the optimizer's state sharded over the ranks)\n"
            "  --recompute LIST      none,selective,full: the language models with every\n"
            "                        block's activations recomputed in backward (full), the\n"
            "                        norms' outputs (selective), or none (default); PyTorch:\n"
            "                        torch.utils.checkpoint per block for full, no selective run\n"
            "  --torch-attn sdpa|eager  transformers' attention for the Llama's PyTorch run\n"
            "                        (attn_implementation; default sdpa)\n"
            "  --torch-script PATH   bench/pytorch_reference.py (default: the source tree's, else\n"
            "                        the installed share/amp/pytorch_reference.py)\n");
}

/* Splits a comma list; each item through parse_one, which returns false for a bad item. */
static bool parse_list(const char *opt, const char *text, int *n, bool (*parse_one)(const char *,
                                                                                   void *, int),
                       void *out) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) {
            fprintf(stderr, "amp-bench: %s: at most %d values\n", opt, MAX_LIST);
            return false;
        }
        if (!parse_one(tok, out, (*n)++)) {
            fprintf(stderr, "amp-bench: %s: bad value '%s'\n", opt, tok);
            return false;
        }
    }
    return *n > 0;
}

static bool one_model(const char *s, void *out, int i) {
    static const char *const models[] = {"mlp", "convnet", "resnet", "gpt", "llama"};
    for (size_t k = 0; k < sizeof models / sizeof *models; k++)
        if (!strcmp(s, models[k])) return ((const char **)out)[i] = models[k], true;
    return false;
}

static bool one_level(const char *s, void *out, int i) {
    if ((s[0] != 'O' && s[0] != 'o') || s[1] < '0' || s[1] > '3' || s[2]) return false;
    ((amp_opt_level *)out)[i] = (amp_opt_level)(s[1] - '0');
    return true;
}

static bool one_half(const char *s, void *out, int i) {
    if (!strcmp(s, "bf16")) ((amp_half_type *)out)[i] = AMP_HALF_BF16;
    else if (!strcmp(s, "fp16") || !strcmp(s, "f16")) ((amp_half_type *)out)[i] = AMP_HALF_F16;
    else return false;
    return true;
}

static bool one_recompute(const char *s, void *out, int i) {
    if (i >= 3) return false;
    if (!strcmp(s, "none")) ((amp_recompute *)out)[i] = AMP_RECOMPUTE_NONE;
    else if (!strcmp(s, "selective")) ((amp_recompute *)out)[i] = AMP_RECOMPUTE_SELECTIVE;
    else if (!strcmp(s, "full")) ((amp_recompute *)out)[i] = AMP_RECOMPUTE_FULL;
    else return false;
    return true;
}

static bool one_batch(const char *s, void *out, int i) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 1 << 20) return false;
    ((int *)out)[i] = (int)v;
    return true;
}

static bool parse_int(const char *opt, const char *s, int lo, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || !*s || v < lo || v > 1 << 24) {
        fprintf(stderr, "amp-bench: %s: want an integer >= %d, got '%s'\n", opt, lo, s);
        return false;
    }
    *out = (int)v;
    return true;
}

/* --json / --json=FILE and the like. */
static bool parse_format(const char *arg, bench_args *a) {
    static const char *names[OUT_N] = {NULL, "--json", "--csv", "--markdown"};
    for (int f = 1; f < OUT_N; f++) {
        size_t n = strlen(names[f]);
        if (strncmp(arg, names[f], n)) continue;
        if (arg[n] == '\0') a->out_path[f] = "-";
        else if (arg[n] == '=' && arg[n + 1]) a->out_path[f] = arg + n + 1;
        else continue;
        return true;
    }
    return false;
}

/* The PyTorch script: the source tree's where it is there (a build), else the one installed
 * beside this program (bin/../share/amp/). */
static const char *default_torch_script(void) {
    static char path[4096 + 64];
    const char *source = AMP_BENCH_SOURCE_DIR "/bench/pytorch_reference.py";
    if (access(source, R_OK) == 0) return source;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return source;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return source;
    *slash = 0;
    snprintf(path, sizeof path, "%s/%s", exe, AMP_BENCH_INSTALLED_SCRIPT);
    return access(path, R_OK) == 0 ? path : source;
}

static int parse_args(int argc, char **argv, bench_args *a) {
    *a = (bench_args){.models = {"mlp"}, .n_models = 1, .levels = {AMP_O0, AMP_O1, AMP_O2, AMP_O3},
                      .n_levels = 4, .halves = {AMP_HALF_BF16}, .n_halves = 1, .batches = {128},
                      .n_batches = 1, .device = AMP_DEVICE_CPU, .steps = 20, .warmup = 5, .repeat = 1,
                      .n_recomputes = 1,
                      .gpt = {.n_layer = 4, .n_head = 4, .n_embd = 256, .block_size = 128,
                              .vocab_size = 256},
                      /* the README's default Llama: 8 heads over 2 key/value heads, T 256, an
                       * intermediate of 2.75 x hidden (Llama 2's 11008 / 4096 is 2.69) */
                      .llama = {.n_layer = 4, .n_head = 8, .n_embd = 256, .block_size = 256,
                                .vocab_size = 256, .kv_heads = 2, .intermediate = 704},
                      .torch = {.script = default_torch_script(),
                                .python = getenv("PYTHON") ? getenv("PYTHON") : "python3",
                                .llama_attn = "sdpa"}};
    a->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true, ok = true;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(o, "--compare-torch")) a->compare_torch = true, takes = false;
        else if (!strcmp(o, "--profile")) a->profile = true, takes = false;
        else if (!strcmp(o, "--quick-peak")) a->quick_peak = true, takes = false;
        else if (parse_format(o, a)) takes = false;
        else if (!v) {
            fprintf(stderr, "amp-bench: %s: unknown option or missing value (--help)\n", o);
            return 2;
        } else if (!strcmp(o, "--model")) ok = parse_list(o, v, &a->n_models, one_model, a->models);
        else if (!strcmp(o, "--opt-level")) ok = parse_list(o, v, &a->n_levels, one_level, a->levels);
        else if (!strcmp(o, "--half")) ok = parse_list(o, v, &a->n_halves, one_half, a->halves);
        else if (!strcmp(o, "--zero")) {
            a->zero_stage = atoi(v);
            ok = !strcmp(v, "1") || !strcmp(v, "2"); /* the library says which it has */
            if (!ok) fprintf(stderr, "amp-bench: --zero '%s': want 1 or 2\n", v);
        } else if (!strcmp(o, "--recompute"))
            ok = parse_list(o, v, &a->n_recomputes, one_recompute, a->recomputes);
        else if (!strcmp(o, "--batch"))
            ok = parse_list(o, v, &a->n_batches, one_batch, a->batches), a->batch_given = true;
        else if (!strcmp(o, "--n-layer"))
            ok = parse_int(o, v, 1, &a->gpt.n_layer), a->llama.n_layer = a->gpt.n_layer;
        else if (!strcmp(o, "--n-head"))
            ok = parse_int(o, v, 1, &a->gpt.n_head), a->llama.n_head = a->gpt.n_head;
        else if (!strcmp(o, "--n-embd"))
            ok = parse_int(o, v, 1, &a->gpt.n_embd), a->llama.n_embd = a->gpt.n_embd;
        else if (!strcmp(o, "--block-size"))
            ok = parse_int(o, v, 1, &a->gpt.block_size), a->llama.block_size = a->gpt.block_size;
        else if (!strcmp(o, "--vocab-size"))
            ok = parse_int(o, v, 1, &a->gpt.vocab_size), a->llama.vocab_size = a->gpt.vocab_size;
        else if (!strcmp(o, "--kv-heads")) ok = parse_int(o, v, 1, &a->llama.kv_heads);
        else if (!strcmp(o, "--intermediate")) ok = parse_int(o, v, 1, &a->llama.intermediate);
        else if (!strcmp(o, "--steps")) ok = parse_int(o, v, 1, &a->steps);
        else if (!strcmp(o, "--warmup")) ok = parse_int(o, v, 0, &a->warmup);
        else if (!strcmp(o, "--repeat")) {
            ok = parse_int(o, v, 1, &a->repeat) && a->repeat <= MAX_REPEAT;
            if (ok == false && a->repeat > MAX_REPEAT)
                fprintf(stderr, "amp-bench: --repeat: at most %d\n", MAX_REPEAT);
        }
        else if (!strcmp(o, "--threads")) ok = parse_int(o, v, 1, &a->threads), a->threads_given = true;
        else if (!strcmp(o, "--plot")) a->plot = v;
        else if (!strcmp(o, "--torch-script")) a->torch.script = v;
        else if (!strcmp(o, "--torch-attn")) {
            ok = !strcmp(v, "sdpa") || !strcmp(v, "eager");
            if (ok) a->torch.llama_attn = v;
            else fprintf(stderr, "amp-bench: --torch-attn '%s': want sdpa or eager\n", v);
        }
        else if (!strcmp(o, "--device")) {
            if (!strcmp(v, "cpu")) a->device = AMP_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) a->device = AMP_DEVICE_CUDA;
            else ok = false, fprintf(stderr, "amp-bench: --device: want cpu or cuda, got '%s'\n", v);
        } else {
            fprintf(stderr, "amp-bench: unknown option %s (--help)\n", o);
            return 2;
        }
        if (!ok) return 2;
        if (takes) i++;
    }
    return -1; /* go on */
}

/* What a child sends back: its row, or its error. */
typedef struct child_result {
    amp_status status;
    bench_row row;
    double peaks[3];
    char torch_version[32];
    char message[1024];
} child_result;

typedef enum child_job { JOB_PEAKS, JOB_LIBAMP, JOB_TORCH } child_job;

static void child_run(child_job job, const bench_args *a, const bench_cfg *cfg, child_result *r) {
    memset(r, 0, sizeof *r);
    if (job == JOB_PEAKS)
        r->status = bench_measure_peaks(a->device, a->threads, a->quick_peak, &r->peaks[0],
                                        &r->peaks[1], &r->peaks[2]);
    else if (job == JOB_LIBAMP) r->status = bench_libamp_run(cfg, &r->row);
    else r->status = bench_torch_run(&a->torch, cfg, &r->row, r->torch_version,
                                     sizeof r->torch_version);
    if (r->status != AMP_OK) snprintf(r->message, sizeof r->message, "%s", bench_last_error());
}

/* The run whose step time is the median of n (the lower middle one for even n). */
static const child_result *median_run(const child_result *runs, int n) {
    int order[MAX_REPEAT];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by step time */
        for (int j = i; j > 0 && runs[order[j]].row.step_ms_median <
                                     runs[order[j - 1]].row.step_ms_median; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    return &runs[order[(n - 1) / 2]];
}

/* Runs a job in a child process and reads its result through a pipe. */
static amp_status in_child(child_job job, const bench_args *a, const bench_cfg *cfg,
                           child_result *r) {
    int fd[2];
    if (pipe(fd)) return bench_fail(AMP_ERR_IO, "pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return bench_fail(AMP_ERR_IO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fd[0]);
        child_result mine;
        child_run(job, a, cfg, &mine);
        const char *p = (const char *)&mine;
        for (size_t off = 0; off < sizeof mine;) {
            ssize_t n = write(fd[1], p + off, sizeof mine - off);
            if (n <= 0) _exit(1);
            off += (size_t)n;
        }
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    char *p = (char *)r;
    for (ssize_t n; got < sizeof *r && (n = read(fd[0], p + got, sizeof *r - got)) > 0;)
        got += (size_t)n;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof *r)
        return bench_fail(AMP_ERR_IO, "the benchmark process died (%s %d) before it reported",
                          WIFSIGNALED(status) ? "signal" : "exit status",
                          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    if (r->status != AMP_OK) return bench_fail(r->status, "%s", r->message);
    return AMP_OK;
}

/* The progress line on a terminal: "[ 3/8] convnet O1 bf16 batch 128 (pytorch)". */
static void progress(int done, int total, const char *what) {
    if (!isatty(STDERR_FILENO)) return;
    const int width = 24;
    int filled = total ? done * width / total : width;
    fprintf(stderr, "\r[%.*s%*s] %d/%d %-48s", filled, "########################", width - filled,
            "", done, total, what);
    if (done == total) fprintf(stderr, "\r%*s\r", width + 60, "");
    fflush(stderr);
}

/* Model x batch x level x half type (O0 has none), in that nesting. */
static int expand_configs(const bench_args *a, bench_cfg *cfgs) {
    int n = 0;
    for (int m = 0; m < a->n_models; m++) {
        /* a language model's default batch is 16 sequences (the Llama's 8 of 256), not 128
         * images */
        bool llama = !strcmp(a->models[m], "llama");
        bool gpt_default = !a->batch_given && (llama || !strcmp(a->models[m], "gpt"));
        bool lm = llama || !strcmp(a->models[m], "gpt");
        for (int b = 0; b < (gpt_default ? 1 : a->n_batches); b++)
            for (int l = 0; l < a->n_levels; l++)
                for (int h = 0; h < (a->levels[l] == AMP_O0 ? 1 : a->n_halves); h++)
                    for (int r = 0; r < (lm ? a->n_recomputes : 1); r++)
                        if (n < MAX_ROWS / 2)
                            cfgs[n++] = (bench_cfg){
                                .model = a->models[m], .level = a->levels[l],
                                .half = a->halves[h],
                                .batch = gpt_default ? (llama ? 8 : 16) : a->batches[b],
                                .lm = llama ? a->llama : a->gpt, .device = a->device,
                                .threads = a->threads, .steps = a->steps, .warmup = a->warmup,
                                .profile = a->profile,
                                .recompute = lm ? a->recomputes[r] : AMP_RECOMPUTE_NONE};
    }
    return n;
}

static const char *cfg_name(const bench_cfg *c, char *buf, size_t size) {
    snprintf(buf, size, "%s%s%s O%d %s batch %d", c->model, c->recompute ? "/" : "",
             c->recompute ? bench_recompute_name(c->recompute) : "",
             (int)c->level, c->level == AMP_O0 ? "f32" : c->half == AMP_HALF_BF16 ? "bf16" : "fp16",
             c->batch);
    return buf;
}

static double peak_for(const bench_run_header *h, const bench_row *r) {
    if (!strcmp(r->half, "bf16")) return h->peak_gflops_bf16;
    if (!strcmp(r->half, "fp16")) return h->peak_gflops_f16;
    return h->peak_gflops_f32;
}

/* The language models' shapes in the run's header, when one is among the models. */
static void note_models(const bench_args *a, bench_run_header *h) {
    size_t len = 0;
    for (int m = 0; m < a->n_models && len < sizeof h->model_note; m++) {
        const bench_lm_shape *g = &a->gpt, *l = &a->llama;
        if (!strcmp(a->models[m], "gpt"))
            len += (size_t)snprintf(h->model_note + len, sizeof h->model_note - len,
                                    "%sgpt: %d layers, %d heads, %d wide, sequences of %d tokens, "
                                    "vocabulary %d (models/gpt.c; PyTorch: bench/gpt_reference.py)",
                                    len ? "; " : "", g->n_layer, g->n_head, g->n_embd,
                                    g->block_size, g->vocab_size);
        else if (!strcmp(a->models[m], "llama"))
            len += (size_t)snprintf(h->model_note + len, sizeof h->model_note - len,
                                    "%sllama: %d layers, %d heads over %d key/value heads, %d wide, "
                                    "intermediate %d, sequences of %d tokens, vocabulary %d "
                                    "(models/llama.c; PyTorch: transformers' LlamaForCausalLM, "
                                    "%s attention)",
                                    len ? "; " : "", l->n_layer, l->n_head, l->kv_heads, l->n_embd,
                                    l->intermediate, l->block_size, l->vocab_size,
                                    a->torch.llama_attn);
    }
}

static int write_outputs(const bench_args *a, const bench_run_header *h, const bench_row *rows,
                         int n) {
    bool table = true;
    for (int f = 1; f < OUT_N; f++)
        if (a->out_path[f] && !strcmp(a->out_path[f], "-")) table = false;
    int rc = 0;
    if (table && bench_write_table(stdout, h, rows, n) != AMP_OK) rc = 1;
    for (int f = 1; f < OUT_N; f++) {
        if (!a->out_path[f]) continue;
        bool std = !strcmp(a->out_path[f], "-");
        FILE *out = std ? stdout : fopen(a->out_path[f], "w");
        if (!out) {
            fprintf(stderr, "amp-bench: cannot write %s: %s\n", a->out_path[f], strerror(errno));
            rc = 1;
            continue;
        }
        amp_status s = f == OUT_JSON ? bench_write_json(out, h, rows, n)
                       : f == OUT_CSV ? bench_write_csv(out, rows, n)
                                      : bench_write_markdown(out, h, rows, n);
        if (!std && fclose(out) != 0) s = AMP_ERR_IO;
        if (s != AMP_OK) {
            fprintf(stderr, "amp-bench: writing %s: %s\n", a->out_path[f], bench_last_error());
            rc = 1;
        }
    }
    if (a->plot && bench_plot_png(a->plot, h, rows, n) != AMP_OK) {
        fprintf(stderr, "amp-bench: --plot: %s\n", bench_last_error());
        rc = 1;
    }
    return rc;
}

/* Whether any rank failed (every rank calls it with its own outcome). */
static bool any_rank_failed(amp_comm *comm, bool mine) {
    double f = mine;
    return amp_comm_allreduce_max_f64(comm, &f, 1) != AMP_OK || f != 0;
}

static int run_distributed(bench_args *a, amp_comm *comm) {
    int rank = amp_comm_rank(comm), world = amp_comm_size(comm);
    if (a->compare_torch) {
        if (rank == 0)
            fprintf(stderr, "amp-bench: --compare-torch runs PyTorch in one process: compare "
                            "without mpirun\n");
        return 2;
    }
    if (a->repeat > 1) {
        if (rank == 0)
            fprintf(stderr, "amp-bench: --repeat is for one-process runs (each a child process); "
                            "under mpirun, run amp-bench again instead\n");
        return 2;
    }
    if (!a->threads_given) { /* the node's cores shared by its ranks */
        int share = a->threads / (amp_comm_local_size(comm) > 0 ? amp_comm_local_size(comm) : 1);
        a->threads = share > 0 ? share : 1;
    }
    if (a->device == AMP_DEVICE_CUDA && amp_comm_select_device(comm) != AMP_OK) {
        fprintf(stderr, "amp-bench (rank %d): %s\n", rank, amp_last_error());
        return 1;
    }
    bench_run_header h;
    bench_run_header_init(&h);
    bench_machine_describe(&h, a->threads, a->device == AMP_DEVICE_CUDA);
    note_models(a, &h);
    h.peak_quick = a->quick_peak;
    amp_status s = AMP_OK; /* the peaks of one rank's share of the cores, measured by rank 0 alone */
    if (rank == 0)
        s = bench_measure_peaks(a->device, a->threads, a->quick_peak, &h.peak_gflops_f32,
                                &h.peak_gflops_bf16, &h.peak_gflops_f16);
    if (any_rank_failed(comm, s != AMP_OK)) {
        if (rank == 0) fprintf(stderr, "amp-bench: measuring the GEMM peaks: %s\n", bench_last_error());
        return 1;
    }
    bench_cfg cfgs[MAX_ROWS];
    int n_cfg = expand_configs(a, cfgs), n_rows = 0, failures = 0;
    static bench_row rows[MAX_ROWS * 2]; /* alone, DDP and ZeRO rows: 3 a config */
    for (int i = 0; i < n_cfg; i++) {
        char what[96];
        cfg_name(&cfgs[i], what, sizeof what);
        if (rank == 0) progress(i, n_cfg, what);
        bench_row alone, all, zero;
        s = rank == 0 ? bench_libamp_run(&cfgs[i], &alone) : AMP_OK; /* the others wait */
        bool failed = any_rank_failed(comm, s != AMP_OK);
        if (!failed) {
            bench_cfg ddp = cfgs[i];
            ddp.comm = comm;
            s = bench_libamp_run(&ddp, &all);
            failed = any_rank_failed(comm, s != AMP_OK);
        }
        if (!failed && a->zero_stage) {
            bench_cfg z = cfgs[i];
            z.comm = comm;
            z.zero_stage = a->zero_stage;
            s = bench_libamp_run(&z, &zero);
            failed = any_rank_failed(comm, s != AMP_OK);
        }
        if (failed) {
            if (s != AMP_OK) fprintf(stderr, "\namp-bench (rank %d): %s: %s\n", rank, what,
                                     bench_last_error());
            failures++;
            continue;
        }
        if (rank != 0) continue;
        alone.mfu = alone.gflop_per_s / peak_for(&h, &alone);
        all.mfu = all.gflop_per_s / (world * peak_for(&h, &all));
        all.scaling_efficiency = all.samples_per_s / (world * alone.samples_per_s);
        rows[n_rows++] = alone;
        rows[n_rows++] = all;
        if (a->zero_stage) {
            zero.mfu = zero.gflop_per_s / (world * peak_for(&h, &zero));
            zero.scaling_efficiency = zero.samples_per_s / (world * alone.samples_per_s);
            rows[n_rows++] = zero;
        }
    }
    if (rank != 0) return failures ? 1 : 0;
    progress(n_cfg, n_cfg, "");
    int rc = write_outputs(a, &h, rows, n_rows);
    return failures || rc ? 1 : 0;
}

int main(int argc, char **argv) {
    bench_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (amp_comm_launched()) {
        /* Rank 0's one-rank runs keep the others waiting in a collective far longer than a
         * training step: give that wait an hour unless told otherwise. */
        setenv("AMP_COMM_TIMEOUT", getenv("AMP_COMM_TIMEOUT") ? getenv("AMP_COMM_TIMEOUT") : "3600", 1);
        amp_comm *comm;
        if (amp_comm_create(&comm) != AMP_OK) {
            fprintf(stderr, "amp-bench: %s\n", amp_last_error());
            return 1;
        }
        if (amp_comm_size(comm) > 1) {
            rc = run_distributed(&a, comm);
            amp_comm_free(comm);
            return rc;
        }
        amp_comm_free(comm); /* a world of one: the one-process path below */
    }
    bench_run_header h;
    bench_run_header_init(&h);
    bench_machine_describe(&h, a.threads, a.device == AMP_DEVICE_CUDA);
    note_models(&a, &h);
    h.peak_quick = a.quick_peak;
    child_result r;
    if (in_child(JOB_PEAKS, &a, NULL, &r) != AMP_OK) {
        fprintf(stderr, "amp-bench: measuring the GEMM peaks: %s\n", bench_last_error());
        return 1;
    }
    h.peak_gflops_f32 = r.peaks[0];
    h.peak_gflops_bf16 = r.peaks[1];
    h.peak_gflops_f16 = r.peaks[2];

    bench_cfg cfgs[MAX_ROWS];
    int n_cfg = expand_configs(&a, cfgs);
    static bench_row rows[MAX_ROWS];
    int n_rows = 0, failures = 0, per = a.repeat * (a.compare_torch ? 2 : 1);
    int total = n_cfg * per, done = 0;
    bool torch_ok = a.compare_torch;
    for (int i = 0; i < n_cfg; i++, done = i * per) {
        const bench_cfg *c = &cfgs[i];
        char what[96], twhat[128];
        cfg_name(c, what, sizeof what);
        snprintf(twhat, sizeof twhat, "%s (pytorch)", what);
        /* PyTorch's run of the same precision, once per model, recomputation, batch and
         * precision. */
        bool want_torch = torch_ok && c->recompute != AMP_RECOMPUTE_SELECTIVE;
        const char *recompute = bench_recompute_name(c->recompute);
        for (int k = 0; k < n_rows && want_torch; k++)
            if (!strcmp(rows[k].impl, "pytorch") && !strcmp(rows[k].model, c->model) &&
                (rows[k].seq_len == 0 || !strcmp(rows[k].recompute, recompute)) &&
                rows[k].batch == c->batch && !strcmp(rows[k].half, c->level == AMP_O0 ? "-"
                                                                   : bench_torch_precision(c)))
                want_torch = false;
        /* --repeat runs, libamp's and PyTorch's alternating so that both see the same minutes of
         * a shared machine; each keeps the run with the median step time. */
        static child_result lib_runs[MAX_REPEAT], torch_runs[MAX_REPEAT];
        int n_lib = 0, n_torch = 0;
        for (int rep = 0; rep < a.repeat; rep++) {
            progress(done, total, what);
            if (in_child(JOB_LIBAMP, &a, c, &lib_runs[n_lib]) != AMP_OK) {
                fprintf(stderr, "\namp-bench: %s: %s\n", what, bench_last_error());
                failures++;
                break;
            }
            n_lib++;
            progress(++done, total, what);
            if (!want_torch) continue;
            progress(done, total, twhat);
            amp_status s = in_child(JOB_TORCH, &a, c, &torch_runs[n_torch]);
            if (s == AMP_OK) {
                n_torch++;
            } else {
                fprintf(stderr, "\namp-bench: --compare-torch: %s\n", bench_last_error());
                failures++;
                want_torch = false;
                torch_ok = s != AMP_ERR_UNSUPPORTED; /* no torch: say it once */
            }
            progress(++done, total, what);
        }
        if (n_lib) rows[n_rows++] = median_run(lib_runs, n_lib)->row;
        if (n_torch) {
            const child_result *m = median_run(torch_runs, n_torch);
            snprintf(h.torch_version, sizeof h.torch_version, "%s", m->torch_version);
            rows[n_rows++] = m->row;
        }
    }
    progress(total, total, "");
    /* The peaks once more after the runs, the best of both kept: a shared machine's busy minute
     * at the start lowered a peak by 40 % and lifted every MFU with it. */
    if (in_child(JOB_PEAKS, &a, NULL, &r) == AMP_OK) {
        h.peak_gflops_f32 = fmax(h.peak_gflops_f32, r.peaks[0]);
        h.peak_gflops_bf16 = fmax(h.peak_gflops_bf16, r.peaks[1]);
        h.peak_gflops_f16 = fmax(h.peak_gflops_f16, r.peaks[2]);
    }
    for (int i = 0; i < n_rows; i++) {
        if (strcmp(rows[i].impl, "libamp")) continue;
        double peak = peak_for(&h, &rows[i]);
        rows[i].mfu = peak > 0 ? rows[i].gflop_per_s / peak : NAN;
    }
    /* The ratios, each libamp row against PyTorch's of its model, batch and precision. */
    for (int i = 0; i < n_rows; i++) {
        int k = bench_find_pytorch_match(rows, n_rows, i);
        if (k >= 0 && rows[k].samples_per_s > 0)
            rows[i].ratio_vs_pytorch = rows[i].samples_per_s / rows[k].samples_per_s;
    }
    rc = write_outputs(&a, &h, rows, n_rows);
    return failures || rc ? 1 : 0;
}
