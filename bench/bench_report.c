/* amp-bench's rows and their writers (bench_report.h): terminal table, JSON (jansson), CSV and
 * the Markdown of bench/RESULTS.md. Unknown values (NaN, -1 bytes) print as "-", null or "". */
#define _POSIX_C_SOURCE 200809L /* localtime_r */
#include "bench/bench_report.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#define BENCH_MIB (1024.0 * 1024.0)

static _Thread_local char bench_error[2048];

const char *bench_last_error(void) { return bench_error; }

amp_status bench_fail(amp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bench_error, sizeof bench_error, fmt, ap);
    va_end(ap);
    return s;
}

static const char *const bench_mem_names[BENCH_MEM_N_KINDS] = {
    "params", "grads", "masters", "optimizer", "activations", "workspace", "other", "recompute"};
static const char *const bench_prof_names[BENCH_PROF_N_CATS] = {
    "gemm_conv", "norm", "elementwise", "cast", "optimizer", "overhead"};

const char *bench_mem_kind_name(int kind) {
    return kind >= 0 && kind < BENCH_MEM_N_KINDS ? bench_mem_names[kind] : "?";
}

const char *bench_prof_cat_name(int cat) {
    return cat >= 0 && cat < BENCH_PROF_N_CATS ? bench_prof_names[cat] : "?";
}

void bench_row_init(bench_row *row) {
    memset(row, 0, sizeof *row);
    strcpy(row->half, "-");
    strcpy(row->recompute, "-");
    row->world_size = 1;
    row->step_ms_median = row->step_ms_p10 = row->step_ms_p90 = NAN;
    row->samples_per_s = row->gflop_per_step = row->gflop_per_s = row->mfu = NAN;
    for (int k = 0; k < BENCH_MEM_N_KINDS; k++) row->mem_peak_nbytes[k] = -1;
    row->mem_peak_total_nbytes = row->host_peak_rss_nbytes = row->skipped_steps = -1;
    row->host_syncs_per_step = row->ratio_vs_pytorch = row->scaling_efficiency = NAN;
    for (int c = 0; c < BENCH_PROF_N_CATS; c++) row->prof_s_per_step[c] = NAN;
}

/* The machine's fields stay "unknown" until bench_machine_describe (core/cpu_info.h) fills them:
 * this library does not read /proc/cpuinfo a second time. */
void bench_run_header_init(bench_run_header *run) {
    memset(run, 0, sizeof *run);
    run->peak_gflops_f32 = run->peak_gflops_bf16 = run->peak_gflops_f16 = NAN;
    time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc)) strftime(run->date, sizeof run->date, "%Y-%m-%d %H:%M UTC", &utc);
    strcpy(run->cpu_model, "unknown");
    strcpy(run->isa, "unknown");
}

const char *bench_pytorch_config_for(const bench_row *r) {
    if (strcmp(r->impl, "libamp") != 0) return NULL;
    if (!strcmp(r->opt_level, "O0") || !strcmp(r->half, "-")) return "fp32";
    return !strcmp(r->half, "fp16") ? "autocast-fp16" : "autocast-bf16";
}

int bench_find_pytorch_match(const bench_row *rows, int n_rows, int i) {
    const char *want = bench_pytorch_config_for(&rows[i]);
    if (!want) return -1;
    for (int j = 0; j < n_rows; j++) {
        const bench_row *a = &rows[i], *b = &rows[j];
        if (!strcmp(b->impl, "pytorch") && !strcmp(b->opt_level, want) &&
            !strcmp(b->model, a->model) && !strcmp(b->recompute, a->recompute) &&
            !strcmp(b->device, a->device) &&
            b->batch == a->batch && b->threads == a->threads && b->world_size == a->world_size &&
            b->zero_stage == a->zero_stage)
            return j;
    }
    return -1;
}

/* rows[i]'s ratio: its own when set, else from its PyTorch match; NaN without one. */
static double bench_ratio(const bench_row *rows, int n_rows, int i, int match) {
    if (!isnan(rows[i].ratio_vs_pytorch)) return rows[i].ratio_vs_pytorch;
    return match >= 0 ? rows[i].samples_per_s / rows[match].samples_per_s : NAN;
}

/* samples/s times the sequence length; NaN for a model without tokens. */
static double bench_tokens_per_s(const bench_row *r) {
    return r->seq_len > 0 ? r->samples_per_s * r->seq_len : NAN;
}

/* printf of one number into a small buffer, "-" when unknown. */
typedef struct bench_cell {
    char s[32];
} bench_cell;

static bench_cell bench_num(double v, const char *fmt) {
    bench_cell c;
    if (isnan(v)) strcpy(c.s, "-");
    else snprintf(c.s, sizeof c.s, fmt, v);
    return c;
}

static bench_cell bench_mib(int64_t nbytes) {
    return bench_num(nbytes < 0 ? NAN : (double)nbytes / BENCH_MIB, "%.1f");
}

/* The model as the tables name it: "gpt", "gpt/full" (every block recomputed), "gpt/sel", and
 * " zero1" after it for a ZeRO row. */
static bench_cell bench_model(const bench_row *r) {
    bench_cell c;
    if (!strcmp(r->recompute, "full")) snprintf(c.s, sizeof c.s, "%.20s/full", r->model);
    else if (!strcmp(r->recompute, "selective")) snprintf(c.s, sizeof c.s, "%.20s/sel", r->model);
    else snprintf(c.s, sizeof c.s, "%.20s", r->model);
    if (r->zero_stage > 0) {
        size_t n = strlen(c.s);
        snprintf(c.s + n, sizeof c.s - n, " zero%d", r->zero_stage);
    }
    return c;
}

static bench_cell bench_int(int64_t v) { return bench_num(v < 0 ? NAN : (double)v, "%.0f"); }

static amp_status bench_check_args(const char *who, FILE *f, const void *run, bool need_run,
                                   const bench_row *rows, int n_rows) {
    if (!f) return bench_fail(AMP_ERR_INVALID_ARG, "%s: argument 'f' is NULL", who);
    if (need_run && !run) return bench_fail(AMP_ERR_INVALID_ARG, "%s: argument 'run' is NULL", who);
    if (n_rows < 0 || (!rows && n_rows > 0))
        return bench_fail(AMP_ERR_INVALID_ARG, "%s: %d rows at %p", who, n_rows, (void *)rows);
    return AMP_OK;
}

static amp_status bench_check_stream(const char *who, FILE *f) {
    return ferror(f) ? bench_fail(AMP_ERR_IO, "%s: writing failed", who) : AMP_OK;
}

/* Token models' rows: tokens/s, MFU, and PyTorch's tokens/s with the ratio (libamp rows with a
 * match); as aligned columns or as Markdown. Nothing when no row has tokens. */
static void bench_tokens_table(FILE *f, const bench_row *rows, int n_rows, bool markdown) {
    bool any = false;
    for (int i = 0; i < n_rows; i++) any |= rows[i].seq_len > 0;
    if (!any) return;
    if (markdown)
        fputs("\nTokens per second (tokens/s = samples/s x sequence length)\n\n"
              "| impl | model | batch | seq | level | half | tokens/s | MFU | PyTorch tokens/s | "
              "libamp / PyTorch |\n|---|---|---:|---:|---|---|---:|---:|---:|---:|\n", f);
    else
        fprintf(f, "\ntokens/s\n%-7s %-7s %-13s %-4s %5s %5s %10s %5s %10s %5s\n", "impl", "model",
                "level", "half", "batch", "seq", "tokens/s", "MFU%", "PyTorch", "vs pt");
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        if (r->seq_len <= 0) continue;
        int match = bench_find_pytorch_match(rows, n_rows, i);
        double pt = match >= 0 ? bench_tokens_per_s(&rows[match]) : NAN;
        double ratio = bench_ratio(rows, n_rows, i, match);
        if (markdown)
            fprintf(f, "| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", r->impl, bench_model(r).s,
                    r->batch, r->seq_len, r->opt_level, r->half,
                    bench_num(bench_tokens_per_s(r), "%.0f").s,
                    bench_num(100.0 * r->mfu, "%.1f %%").s, bench_num(pt, "%.0f").s,
                    bench_num(ratio, "%.2f").s);
        else
            fprintf(f, "%-7s %-7s %-13s %-4s %5d %5d %10s %5s %10s %5s\n", r->impl, bench_model(r).s,
                    r->opt_level, r->half, r->batch, r->seq_len,
                    bench_num(bench_tokens_per_s(r), "%.0f").s, bench_num(100.0 * r->mfu, "%.1f").s,
                    bench_num(pt, "%.0f").s, bench_num(ratio, "%.2f").s);
    }
}

amp_status bench_write_table(FILE *f, const bench_run_header *run, const bench_row *rows,
                             int n_rows) {
    amp_status s = bench_check_args(__func__, f, run, true, rows, n_rows);
    if (s != AMP_OK) return s;
    fprintf(f, "%s  %s  [%s]  %d threads%s%s%s\n", run->date, run->cpu_model, run->isa,
            run->threads, run->gpu_model[0] ? "  GPU: " : "", run->gpu_model,
            run->peak_quick ? "  (peaks by --quick-peak: MFU may read high)" : "");
    if (run->model_note[0]) fprintf(f, "%s\n", run->model_note);
    fprintf(f,
            "%-7s %-7s %-13s %-4s %5s %-4s %3s %2s %8s %7s %7s %9s %7s %5s %8s %7s %4s %5s %5s\n",
            "impl", "model", "level", "half", "batch", "dev", "thr", "ws", "ms med", "ms p10",
            "ms p90", "samples/s", "GFLOP/s", "MFU%", "peak MiB", "RSS MiB", "skip", "syncs",
            "vs pt");
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        double ratio = bench_ratio(rows, n_rows, i, bench_find_pytorch_match(rows, n_rows, i));
        fprintf(f,
                "%-7s %-7s %-13s %-4s %5d %-4s %3d %2d %8s %7s %7s %9s %7s %5s %8s %7s %4s %5s "
                "%5s\n",
                r->impl, bench_model(r).s, r->opt_level, r->half, r->batch, r->device, r->threads,
                r->world_size, bench_num(r->step_ms_median, "%.2f").s,
                bench_num(r->step_ms_p10, "%.2f").s, bench_num(r->step_ms_p90, "%.2f").s,
                bench_num(r->samples_per_s, "%.0f").s, bench_num(r->gflop_per_s, "%.1f").s,
                bench_num(100.0 * r->mfu, "%.1f").s, bench_mib(r->mem_peak_total_nbytes).s,
                bench_mib(r->host_peak_rss_nbytes).s, bench_int(r->skipped_steps).s,
                bench_num(r->host_syncs_per_step, "%.1f").s, bench_num(ratio, "%.2f").s);
    }
    fprintf(f, "\npeak memory by kind, MiB\n%-7s %-7s %-13s %-4s %5s", "impl", "model", "level",
            "half", "batch");
    /* The recomputation arena's column only where a run recomputed (the table stays narrow). */
    int n_kinds = BENCH_MEM_RECOMPUTE;
    for (int i = 0; i < n_rows; i++)
        if (rows[i].mem_peak_nbytes[BENCH_MEM_RECOMPUTE] > 0) n_kinds = BENCH_MEM_N_KINDS;
    for (int k = 0; k < n_kinds; k++) fprintf(f, " %11s", bench_mem_names[k]);
    fprintf(f, " %9s %8s\n", "total", "RSS");
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        fprintf(f, "%-7s %-7s %-13s %-4s %5d", r->impl, bench_model(r).s, r->opt_level, r->half, r->batch);
        for (int k = 0; k < n_kinds; k++)
            fprintf(f, " %11s", bench_mib(r->mem_peak_nbytes[k]).s);
        fprintf(f, " %9s %8s\n", bench_mib(r->mem_peak_total_nbytes).s,
                bench_mib(r->host_peak_rss_nbytes).s);
    }
    bool profiled = false;
    for (int i = 0; i < n_rows; i++)
        for (int c = 0; c < BENCH_PROF_N_CATS; c++) profiled |= !isnan(rows[i].prof_s_per_step[c]);
    if (profiled) {
        fprintf(f, "\nprofile, ms per step\n%-7s %-7s %-13s %-4s %5s", "impl", "model", "level",
                "half", "batch");
        for (int c = 0; c < BENCH_PROF_N_CATS; c++) fprintf(f, " %11s", bench_prof_names[c]);
        fputc('\n', f);
        for (int i = 0; i < n_rows; i++) {
            const bench_row *r = &rows[i];
            fprintf(f, "%-7s %-7s %-13s %-4s %5d", r->impl, bench_model(r).s, r->opt_level, r->half,
                    r->batch);
            for (int c = 0; c < BENCH_PROF_N_CATS; c++)
                fprintf(f, " %11s", bench_num(1e3 * r->prof_s_per_step[c], "%.3f").s);
            fputc('\n', f);
        }
    }
    bool scaled = false;
    for (int i = 0; i < n_rows; i++) scaled |= !isnan(rows[i].scaling_efficiency);
    if (scaled) {
        fprintf(f, "\nscaling (DDP)\n%-7s %-13s %-4s %5s %5s %10s %10s %10s\n", "model", "level",
                "half", "batch", "ranks", "samples/s", "per rank", "efficiency");
        for (int i = 0; i < n_rows; i++) {
            const bench_row *r = &rows[i];
            if (isnan(r->scaling_efficiency)) continue;
            fprintf(f, "%-7s %-13s %-4s %5d %5d %10.1f %10.1f %9.1f%%\n", bench_model(r).s, r->opt_level,
                    r->half, r->batch, r->world_size, r->samples_per_s,
                    r->samples_per_s / r->world_size, 100.0 * r->scaling_efficiency);
        }
    }
    bench_tokens_table(f, rows, n_rows, false);
    return bench_check_stream(__func__, f);
}

/* JSON values for unknowns: null. json_object_set_new takes NULL values as a failure, so every
 * value goes through these. */
static json_t *bench_json_real(double v) {
    return isnan(v) || isinf(v) ? json_null() : json_real(v);
}
static json_t *bench_json_bytes(int64_t v) { return v < 0 ? json_null() : json_integer(v); }

static json_t *bench_json_run(const bench_run_header *run) {
    json_t *peaks = json_pack("{s:o, s:o, s:o}", "f32", bench_json_real(run->peak_gflops_f32),
                              "bf16", bench_json_real(run->peak_gflops_bf16), "f16",
                              bench_json_real(run->peak_gflops_f16));
    return json_pack("{s:s, s:s, s:s, s:s, s:i, s:o, s:b, s:s, s:s}", "date", run->date,
                     "cpu_model", run->cpu_model, "isa", run->isa, "gpu_model", run->gpu_model,
                     "threads", run->threads, "peak_gflops", peaks, "peak_quick",
                     (int)run->peak_quick, "lib_version", run->lib_version, "torch_version",
                     run->torch_version);
}

static json_t *bench_json_row_fields(const bench_row *r);

static json_t *bench_json_row(const bench_row *r) {
    json_t *o = bench_json_row_fields(r);
    if (o && (json_object_set_new(o, "scaling_efficiency", bench_json_real(r->scaling_efficiency)) ||
              json_object_set_new(o, "seq_len", json_integer(r->seq_len)) ||
              json_object_set_new(o, "tokens_per_s", bench_json_real(bench_tokens_per_s(r))))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *bench_json_row_fields(const bench_row *r) {
    json_t *mem = json_object(), *prof = json_object();
    for (int k = 0; mem && k < BENCH_MEM_N_KINDS; k++)
        json_object_set_new(mem, bench_mem_names[k], bench_json_bytes(r->mem_peak_nbytes[k]));
    if (mem) json_object_set_new(mem, "total", bench_json_bytes(r->mem_peak_total_nbytes));
    for (int c = 0; prof && c < BENCH_PROF_N_CATS; c++)
        json_object_set_new(prof, bench_prof_names[c], bench_json_real(r->prof_s_per_step[c]));
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:i, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, "
        "s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
        "impl", r->impl, "model", r->model, "recompute", r->recompute, "opt_level", r->opt_level, "half", r->half, "batch",
        r->batch, "device", r->device, "threads", r->threads, "world_size", r->world_size,
        "zero_stage", r->zero_stage,
        "n_steps", r->n_steps, "step_ms_median", bench_json_real(r->step_ms_median), "step_ms_p10",
        bench_json_real(r->step_ms_p10), "step_ms_p90", bench_json_real(r->step_ms_p90),
        "samples_per_s", bench_json_real(r->samples_per_s), "gflop_per_step",
        bench_json_real(r->gflop_per_step), "gflop_per_s", bench_json_real(r->gflop_per_s), "mfu",
        bench_json_real(r->mfu), "mem_peak_bytes", mem, "host_peak_rss_bytes",
        bench_json_bytes(r->host_peak_rss_nbytes), "skipped_steps",
        bench_json_bytes(r->skipped_steps), "host_syncs_per_step",
        bench_json_real(r->host_syncs_per_step), "ratio_vs_pytorch",
        bench_json_real(r->ratio_vs_pytorch), "prof_s_per_step", prof);
}

amp_status bench_write_json(FILE *f, const bench_run_header *run, const bench_row *rows,
                            int n_rows) {
    amp_status s = bench_check_args(__func__, f, run, true, rows, n_rows);
    if (s != AMP_OK) return s;
    json_t *array = json_array();
    for (int i = 0; array && i < n_rows; i++)
        if (json_array_append_new(array, bench_json_row(&rows[i])) != 0) {
            json_decref(array);
            array = NULL;
        }
    /* json_pack's "o" steals its reference even on failure, so nothing leaks on the way out. */
    json_t *jrun = bench_json_run(run);
    if (jrun && run->model_note[0])
        json_object_set_new(jrun, "model_note", json_string(run->model_note));
    json_t *root = json_pack("{s:o, s:o}", "run", jrun, "rows", array);
    if (!root) return bench_fail(AMP_ERR_OOM, "%s: building the JSON document failed", __func__);
    /* 10 significant digits: exact for any timing or count here, and no 1.8999999999999999. */
    int rc = json_dumpf(root, f, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (rc != 0 || fputc('\n', f) == EOF)
        return bench_fail(AMP_ERR_IO, "%s: writing failed", __func__);
    return bench_check_stream(__func__, f);
}

/* One CSV field: quoted (quotes doubled) when it holds a separator, quote or line break. */
static void bench_csv_str(FILE *f, const char *s, bool last) {
    if (strpbrk(s, ",\"\r\n")) {
        fputc('"', f);
        for (const char *p = s; *p; p++) {
            if (*p == '"') fputc('"', f);
            fputc(*p, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
    fputc(last ? '\n' : ',', f);
}

static void bench_csv_real(FILE *f, double v) {
    if (!isnan(v)) fprintf(f, "%.10g", v);
    fputc(',', f);
}

static void bench_csv_bytes(FILE *f, int64_t v) {
    if (v >= 0) fprintf(f, "%lld", (long long)v);
    fputc(',', f);
}

amp_status bench_write_csv(FILE *f, const bench_row *rows, int n_rows) {
    amp_status s = bench_check_args(__func__, f, NULL, false, rows, n_rows);
    if (s != AMP_OK) return s;
    fputs("impl,model,opt_level,half,batch,device,threads,world_size,n_steps,step_ms_median,"
          "step_ms_p10,step_ms_p90,samples_per_s,gflop_per_step,gflop_per_s,mfu",
          f);
    for (int k = 0; k < BENCH_MEM_N_KINDS; k++)
        fprintf(f, ",mem_peak_%s_bytes", bench_mem_names[k]);
    fputs(",mem_peak_total_bytes,host_peak_rss_bytes,skipped_steps,host_syncs_per_step,"
          "ratio_vs_pytorch",
          f);
    for (int c = 0; c < BENCH_PROF_N_CATS; c++)
        fprintf(f, ",prof_%s_s_per_step", bench_prof_names[c]);
    fputs(",scaling_efficiency,seq_len,tokens_per_s,recompute,zero_stage\n", f);
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        bench_csv_str(f, r->impl, false);
        bench_csv_str(f, r->model, false);
        bench_csv_str(f, r->opt_level, false);
        bench_csv_str(f, r->half, false);
        fprintf(f, "%d,", r->batch);
        bench_csv_str(f, r->device, false);
        fprintf(f, "%d,%d,%d,", r->threads, r->world_size, r->n_steps);
        bench_csv_real(f, r->step_ms_median);
        bench_csv_real(f, r->step_ms_p10);
        bench_csv_real(f, r->step_ms_p90);
        bench_csv_real(f, r->samples_per_s);
        bench_csv_real(f, r->gflop_per_step);
        bench_csv_real(f, r->gflop_per_s);
        bench_csv_real(f, r->mfu);
        for (int k = 0; k < BENCH_MEM_N_KINDS; k++) bench_csv_bytes(f, r->mem_peak_nbytes[k]);
        bench_csv_bytes(f, r->mem_peak_total_nbytes);
        bench_csv_bytes(f, r->host_peak_rss_nbytes);
        bench_csv_bytes(f, r->skipped_steps);
        bench_csv_real(f, r->host_syncs_per_step);
        bench_csv_real(f, r->ratio_vs_pytorch);
        for (int c = 0; c < BENCH_PROF_N_CATS; c++) {
            if (!isnan(r->prof_s_per_step[c])) fprintf(f, "%.10g", r->prof_s_per_step[c]);
            fputc(',', f);
        }
        bench_csv_real(f, r->scaling_efficiency);
        fprintf(f, "%d,", r->seq_len);
        if (r->seq_len > 0) fprintf(f, "%.10g", bench_tokens_per_s(r));
        fputc(',', f);
        bench_csv_str(f, r->recompute, false);
        fprintf(f, "%d\n", r->zero_stage);
    }
    return bench_check_stream(__func__, f);
}

static void bench_md_throughput_row(FILE *f, const bench_row *r, const char *level,
                                    const char *half, const bench_row *pt, double ratio) {
    char step[112]; /* "median (p10–p90)", or the median alone when the spread is unknown */
    if (isnan(r->step_ms_p10) || isnan(r->step_ms_p90))
        snprintf(step, sizeof step, "%s", bench_num(r->step_ms_median, "%.2f").s);
    else
        snprintf(step, sizeof step, "%s (%s–%s)", bench_num(r->step_ms_median, "%.2f").s,
                 bench_num(r->step_ms_p10, "%.2f").s, bench_num(r->step_ms_p90, "%.2f").s);
    fprintf(f,
            "| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
            bench_model(r).s, r->device, r->threads, r->world_size, r->batch, level, half, step,
            bench_num(r->samples_per_s, "%.1f").s, bench_num(r->gflop_per_s, "%.1f").s,
            bench_num(100.0 * r->mfu, "%.1f %%").s,
            bench_int(r->skipped_steps).s, bench_num(r->host_syncs_per_step, "%.2f").s,
            pt ? pt->opt_level : "-", bench_num(pt ? pt->samples_per_s : NAN, "%.1f").s,
            bench_num(ratio, "%.2f").s);
}

static bool bench_any_profile(const bench_row *rows, int n_rows) {
    for (int i = 0; i < n_rows; i++)
        for (int c = 0; c < BENCH_PROF_N_CATS; c++)
            if (!isnan(rows[i].prof_s_per_step[c])) return true;
    return false;
}

static bool bench_any_scaling(const bench_row *rows, int n_rows) {
    for (int i = 0; i < n_rows; i++)
        if (!isnan(rows[i].scaling_efficiency)) return true;
    return false;
}

/* Where a step's time goes, per op category (amp-bench --profile). */
static void bench_md_profile(FILE *f, const bench_row *rows, int n_rows) {
    if (!bench_any_profile(rows, n_rows)) return;
    fputs("\nWhere a step's time goes, ms per step (the op categories timed one call at a time; "
          "overhead: the rest of the step)\n\n| model | batch | level | half |", f);
    for (int c = 0; c < BENCH_PROF_N_CATS; c++) fprintf(f, " %s |", bench_prof_names[c]);
    fputs("\n|---|---:|---|---|", f);
    for (int c = 0; c < BENCH_PROF_N_CATS; c++) fputs("---:|", f);
    fputc('\n', f);
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        if (isnan(r->prof_s_per_step[BENCH_PROF_GEMM_CONV])) continue;
        fprintf(f, "| %s | %d | %s | %s |", bench_model(r).s, r->batch, r->opt_level, r->half);
        for (int c = 0; c < BENCH_PROF_N_CATS; c++)
            fprintf(f, " %s |", bench_num(1e3 * r->prof_s_per_step[c], "%.2f").s);
        fputc('\n', f);
    }
}

/* Under mpirun: the world's samples/s against one rank alone's (the world-of-one row). */
static void bench_md_scaling(FILE *f, const bench_row *rows, int n_rows) {
    if (!bench_any_scaling(rows, n_rows)) return;
    fputs("\nScaling (DDP): samples/s of all ranks, per rank, and against one rank alone\n\n"
          "| model | batch per rank | level | half | ranks | threads per rank | samples/s | "
          "per rank | scaling efficiency |\n|---|---:|---|---|---:|---:|---:|---:|---:|\n", f);
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        if (isnan(r->scaling_efficiency)) continue;
        fprintf(f, "| %s | %d | %s | %s | %d | %d | %s | %s | %s |\n", bench_model(r).s, r->batch,
                r->opt_level, r->half, r->world_size, r->threads,
                bench_num(r->samples_per_s, "%.1f").s,
                bench_num(r->samples_per_s / r->world_size, "%.1f").s,
                bench_num(100.0 * r->scaling_efficiency, "%.1f %%").s);
    }
}

amp_status bench_write_markdown(FILE *f, const bench_run_header *run, const bench_row *rows,
                                int n_rows) {
    amp_status s = bench_check_args(__func__, f, run, true, rows, n_rows);
    if (s != AMP_OK) return s;
    fprintf(f, "%s — CPU: %s; ISA: %s; %d threads%s%s; measured peak GFLOP/s%s: f32 %s, bf16 %s, "
               "f16 %s; libamp %s%s%s\n\n",
            run->date, run->cpu_model, run->isa, run->threads, run->gpu_model[0] ? "; GPU: " : "",
            run->gpu_model, run->peak_quick ? " (--quick-peak: small products, may read low)" : "",
            bench_num(run->peak_gflops_f32, "%.1f").s,
            bench_num(run->peak_gflops_bf16, "%.1f").s, bench_num(run->peak_gflops_f16, "%.1f").s,
            run->lib_version, run->torch_version[0] ? ", PyTorch " : "", run->torch_version);
    if (run->model_note[0]) fprintf(f, "%s\n\n", run->model_note);
    fputs("| model | device | threads | ranks | batch | level | half | "
          "step ms median (p10–p90) | samples/s | GFLOP/s | MFU | skipped | syncs/step | "
          "PyTorch | PyTorch samples/s | libamp / PyTorch |\n"
          "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n",
          f);
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        if (!strcmp(r->impl, "pytorch")) {
            /* Shown beside a libamp row when one matches, else on its own line. */
            bool matched = false;
            for (int j = 0; j < n_rows && !matched; j++)
                matched = bench_find_pytorch_match(rows, n_rows, j) == i;
            if (!matched) {
                char level[40];
                snprintf(level, sizeof level, "PyTorch %s", r->opt_level);
                bench_md_throughput_row(f, r, level, r->half, NULL, NAN);
            }
            continue;
        }
        int match = bench_find_pytorch_match(rows, n_rows, i);
        bench_md_throughput_row(f, r, r->opt_level, r->half, match >= 0 ? &rows[match] : NULL,
                                bench_ratio(rows, n_rows, i, match));
    }
    fputs("\nPeak memory, MiB (what each kind held when their sum peaked)\n\n"
          "| impl | model | device | batch | level | half |",
          f);
    for (int k = 0; k < BENCH_MEM_N_KINDS; k++) fprintf(f, " %s |", bench_mem_names[k]);
    fputs(" total | host RSS |\n|---|---|---|---:|---|---|", f);
    for (int k = 0; k < BENCH_MEM_N_KINDS + 2; k++) fputs("---:|", f);
    fputc('\n', f);
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        fprintf(f, "| %s | %s | %s | %d | %s | %s |", r->impl, bench_model(r).s, r->device, r->batch,
                r->opt_level, r->half);
        for (int k = 0; k < BENCH_MEM_N_KINDS; k++)
            fprintf(f, " %s |", bench_mib(r->mem_peak_nbytes[k]).s);
        fprintf(f, " %s | %s |\n", bench_mib(r->mem_peak_total_nbytes).s,
                bench_mib(r->host_peak_rss_nbytes).s);
    }
    bench_md_profile(f, rows, n_rows);
    bench_md_scaling(f, rows, n_rows);
    bench_tokens_table(f, rows, n_rows, true);
    return bench_check_stream(__func__, f);
}
