/* bench_torch.h: runs the PyTorch reference script and reads its one JSON line. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bench/bench_stats.h"
#include "bench/bench_torch.h"

#define EXIT_NO_TORCH 3 /* pytorch_reference.py's status when torch cannot be imported */

const char *bench_torch_precision(const bench_cfg *cfg) {
    if (cfg->level == AMP_O0) return "fp32";
    return cfg->half == AMP_HALF_BF16 ? "bf16" : "fp16";
}

/* The result line's fields into row. */
static amp_status read_result(json_t *j, const bench_cfg *cfg, bench_row *row) {
    json_t *steps = json_object_get(j, "step_ms");
    size_t n = json_array_size(steps);
    if (!n) return bench_fail(AMP_ERR_IO, "PyTorch's result has no step times");
    double *ms = malloc(n * sizeof *ms);
    if (!ms) return bench_fail(AMP_ERR_OOM, "out of memory");
    for (size_t i = 0; i < n; i++) ms[i] = json_number_value(json_array_get(steps, i));
    bench_summary sum;
    amp_status s = bench_summarize(ms, (int)n, &sum);
    free(ms);
    if (s != AMP_OK) return s;
    const char *prec = bench_torch_precision(cfg);
    snprintf(row->impl, sizeof row->impl, "pytorch");
    snprintf(row->model, sizeof row->model, "%s", cfg->model);
    snprintf(row->opt_level, sizeof row->opt_level, "%s%s", strcmp(prec, "fp32") ? "autocast-" : "",
             prec);
    snprintf(row->half, sizeof row->half, "%s", strcmp(prec, "fp32") ? prec : "-");
    snprintf(row->device, sizeof row->device, "%s", cfg->device == AMP_DEVICE_CUDA ? "cuda" : "cpu");
    row->batch = cfg->batch;
    row->threads = (int)json_integer_value(json_object_get(j, "threads"));
    row->world_size = 1;
    bool lm = !strcmp(cfg->model, "gpt") || !strcmp(cfg->model, "llama");
    row->seq_len = lm ? cfg->lm.block_size : 0;
    if (lm)
        snprintf(row->recompute, sizeof row->recompute, "%s", bench_recompute_name(cfg->recompute));
    row->n_steps = (int)n;
    row->step_ms_median = sum.median;
    row->step_ms_p10 = sum.p10;
    row->step_ms_p90 = sum.p90;
    row->samples_per_s = (double)cfg->batch / (sum.median * 1e-3);
    row->host_peak_rss_nbytes = (int64_t)json_integer_value(json_object_get(j, "peak_rss_bytes"));
    json_t *dev_peak = json_object_get(j, "cuda_peak_bytes");
    if (json_is_integer(dev_peak)) row->mem_peak_total_nbytes = (int64_t)json_integer_value(dev_peak);
    return AMP_OK;
}

amp_status bench_torch_run(const bench_torch_opts *o, const bench_cfg *cfg, bench_row *row,
                           char *version, size_t size) {
    bench_row_init(row);
    char cmd[2048], shape[240] = "";
    const bench_lm_shape *l = &cfg->lm;
    bool llama = !strcmp(cfg->model, "llama");
    if (!strcmp(cfg->model, "gpt") || llama)
        snprintf(shape, sizeof shape, " --n-layer %d --n-head %d --n-embd %d --block-size %d "
                 "--vocab-size %d --kv-heads %d --intermediate %d%s%s%s", l->n_layer, l->n_head,
                 l->n_embd, l->block_size, l->vocab_size, l->kv_heads, l->intermediate,
                 llama ? " --attn " : "", llama && o->llama_attn ? o->llama_attn : llama ? "sdpa" : "",
                 cfg->recompute ? " --recompute full" : "");
    snprintf(cmd, sizeof cmd,
             "'%s' '%s' --bench --model %s --precision %s --batch-size %d --steps %d --warmup %d "
             "--threads %d --device %s%s 2>&1",
             o->python, o->script, cfg->model, bench_torch_precision(cfg), cfg->batch, cfg->steps,
             cfg->warmup, cfg->threads, cfg->device == AMP_DEVICE_CUDA ? "cuda" : "cpu", shape);
    FILE *p = popen(cmd, "r");
    if (!p) return bench_fail(AMP_ERR_IO, "cannot run %s: %s", o->python, cmd);
    char line[65536], last[512] = "";
    json_t *result = NULL;
    while (fgets(line, sizeof line, p)) {
        if (line[0] == '{' && !result) result = json_loads(line, 0, NULL);
        else if (line[0] != '\n') { /* the last words of an error, kept for its message */
            size_t n = strnlen(line, sizeof last - 1);
            memcpy(last, line, n);
            last[n] = '\0';
        }
    }
    int status = pclose(p);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    size_t len = strlen(last);
    if (len && last[len - 1] == '\n') last[len - 1] = '\0';
    if (code == EXIT_NO_TORCH) {
        json_decref(result);
        return bench_fail(AMP_ERR_UNSUPPORTED, "PyTorch not importable (%s): %s; install it "
                          "with scripts/setup.sh --bench", o->python, last);
    }
    if (code != 0 || !result) {
        json_decref(result);
        return bench_fail(AMP_ERR_IO, "the PyTorch reference failed (exit %d): %s [%s]", code,
                          last, cmd);
    }
    amp_status s = read_result(result, cfg, row);
    const char *v = json_string_value(json_object_get(result, "torch"));
    if (version && size) snprintf(version, size, "%s", v ? v : "?");
    json_decref(result);
    return s;
}
