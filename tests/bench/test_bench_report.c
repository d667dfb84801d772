/* bench_report: JSON written and parsed back with jansson (fields equal, NaN and -1 as null), CSV
 * with as many fields on every line as in its header (a quoted comma included), Markdown with its
 * header line and one table line per row (PyTorch rows beside their libamp row), the table's
 * width, and the argument errors. */
#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include "bench/bench_report.h"
#include "test_util.h"

/* Everything a writer put into a temporary file, NUL-terminated; the caller frees it. */
static char *bench_capture(amp_status (*write)(FILE *, const bench_run_header *,
                                               const bench_row *, int),
                           const bench_run_header *run, const bench_row *rows, int n,
                           amp_status *status) {
    FILE *f = tmpfile();
    if (!f) return NULL;
    *status = write(f, run, rows, n);
    long size = ftell(f);
    char *text = size >= 0 ? malloc((size_t)size + 1) : NULL;
    rewind(f);
    if (text) text[fread(text, 1, (size_t)size, f)] = '\0';
    fclose(f);
    return text;
}

static amp_status bench_csv_adapter(FILE *f, const bench_run_header *run, const bench_row *rows,
                                    int n) {
    (void)run;
    return bench_write_csv(f, rows, n);
}

static void fill_rows(bench_run_header *run, bench_row rows[4]) {
    bench_run_header_init(run);
    snprintf(run->date, sizeof run->date, "2026-11-24 10:31");
    snprintf(run->cpu_model, sizeof run->cpu_model, "Test CPU 9000");
    snprintf(run->isa, sizeof run->isa, "avx512f avx512_bf16");
    snprintf(run->lib_version, sizeof run->lib_version, "0.1.0");
    snprintf(run->torch_version, sizeof run->torch_version, "2.15.0");
    run->threads = 2;
    run->peak_gflops_f32 = 190.5;
    const char *impl[4] = {"libamp", "libamp", "pytorch", "libamp"};
    const char *level[4] = {"O0", "O1", "fp32", "O2"};
    const char *half[4] = {"-", "bf16", "-", "fp16"};
    for (int i = 0; i < 4; i++) {
        bench_row *r = &rows[i];
        bench_row_init(r);
        snprintf(r->impl, sizeof r->impl, "%s", impl[i]);
        snprintf(r->model, sizeof r->model, "%s", i == 3 ? "mlp,wide" : "mlp");
        snprintf(r->opt_level, sizeof r->opt_level, "%s", level[i]);
        snprintf(r->half, sizeof r->half, "%s", half[i]);
        snprintf(r->device, sizeof r->device, "cpu");
        r->batch = 128;
        r->threads = 2;
        r->n_steps = 50;
        r->step_ms_median = 20.0 + i;
        r->step_ms_p10 = 19.5 + i;
        r->step_ms_p90 = 21.25 + i;
        r->samples_per_s = 128.0 / (r->step_ms_median * 1e-3);
        r->gflop_per_step = 4.3;
        r->gflop_per_s = r->gflop_per_step / (r->step_ms_median * 1e-3);
        r->host_peak_rss_nbytes = 500ll << 20;
        if (i != 2) {
            r->mfu = 0.25 + 0.01 * i;
            for (int k = 0; k < BENCH_MEM_N_KINDS; k++) r->mem_peak_nbytes[k] = (k + 1) * 1048576;
            r->mem_peak_nbytes[BENCH_MEM_RECOMPUTE] = 0; /* an MLP recomputes nothing */
            r->mem_peak_total_nbytes = 30ll << 20;
            r->skipped_steps = i;
            r->host_syncs_per_step = 0.0;
        }
    }
    rows[1].prof_s_per_step[BENCH_PROF_GEMM_CONV] = 0.015;
}

static double json_num(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void test_json(const bench_run_header *run, const bench_row *rows) {
    amp_status s = AMP_ERR_IO;
    char *text = bench_capture(bench_write_json, run, rows, 4, &s);
    CHECK(s == AMP_OK && text);
    json_error_t error;
    json_t *root = text ? json_loads(text, 0, &error) : NULL;
    CHECK_MSG(root != NULL, "JSON does not parse: %s (line %d)", root ? "" : error.text,
              root ? 0 : error.line);
    if (root) {
        json_t *jrun = json_object_get(root, "run"), *jrows = json_object_get(root, "rows");
        CHECK(json_is_object(jrun) && json_is_array(jrows) && json_array_size(jrows) == 4);
        CHECK(!strcmp(json_string_value(json_object_get(jrun, "cpu_model")), "Test CPU 9000"));
        CHECK(!strcmp(json_string_value(json_object_get(jrun, "torch_version")), "2.15.0"));
        CHECK(json_integer_value(json_object_get(jrun, "threads")) == 2);
        json_t *peaks = json_object_get(jrun, "peak_gflops");
        CHECK(json_num(peaks, "f32") == 190.5 && json_is_null(json_object_get(peaks, "bf16")));
        for (int i = 0; i < 4 && json_array_size(jrows) == 4; i++) {
            json_t *r = json_array_get(jrows, i);
            CHECK(!strcmp(json_string_value(json_object_get(r, "impl")), rows[i].impl));
            CHECK(!strcmp(json_string_value(json_object_get(r, "model")), rows[i].model));
            CHECK(!strcmp(json_string_value(json_object_get(r, "opt_level")), rows[i].opt_level));
            CHECK(!strcmp(json_string_value(json_object_get(r, "half")), rows[i].half));
            CHECK(json_integer_value(json_object_get(r, "batch")) == 128);
            CHECK(json_integer_value(json_object_get(r, "world_size")) == 1);
            CHECK(json_num(r, "step_ms_median") == rows[i].step_ms_median);
            CHECK(fabs(json_num(r, "samples_per_s") / rows[i].samples_per_s - 1) < 1e-9);
            CHECK(json_integer_value(json_object_get(r, "host_peak_rss_bytes")) == 500ll << 20);
            CHECK(json_is_null(json_object_get(r, "ratio_vs_pytorch")));
            CHECK(json_is_null(json_object_get(r, "scaling_efficiency")));
            json_t *mem = json_object_get(r, "mem_peak_bytes");
            json_t *prof = json_object_get(r, "prof_s_per_step");
            CHECK(json_object_size(mem) == BENCH_MEM_N_KINDS + 1 &&
                  json_object_size(prof) == BENCH_PROF_N_CATS);
            if (i == 2) { /* the PyTorch row: no MFU, no memory split */
                CHECK(json_is_null(json_object_get(r, "mfu")));
                CHECK(json_is_null(json_object_get(mem, "params")));
                CHECK(json_is_null(json_object_get(mem, "total")));
                CHECK(json_is_null(json_object_get(r, "skipped_steps")));
            } else {
                CHECK(json_num(r, "mfu") == rows[i].mfu);
                CHECK(json_integer_value(json_object_get(mem, "optimizer")) == 4 * 1048576);
                CHECK(json_integer_value(json_object_get(mem, "total")) == 30ll << 20);
                CHECK(json_integer_value(json_object_get(r, "skipped_steps")) == i);
            }
            double gemm = json_num(prof, "gemm_conv");
            CHECK(i == 1 ? gemm == 0.015 : json_is_null(json_object_get(prof, "gemm_conv")));
        }
        json_decref(root);
    }
    free(text);
}

/* Fields of one CSV line, commas inside quotes not counted. */
static int csv_fields(const char *line, size_t len) {
    int n = 1;
    bool quoted = false;
    for (size_t i = 0; i < len; i++) {
        if (line[i] == '"') quoted = !quoted;
        else if (line[i] == ',' && !quoted) n++;
    }
    return n;
}

static void test_csv(const bench_run_header *run, const bench_row *rows) {
    amp_status s = AMP_ERR_IO;
    char *text = bench_capture(bench_csv_adapter, run, rows, 4, &s);
    CHECK(s == AMP_OK && text);
    if (!text) return;
    int n_lines = 0, header_fields = 0;
    for (char *line = text; *line;) {
        char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        int fields = csv_fields(line, len);
        if (n_lines == 0) header_fields = fields;
        CHECK_MSG(fields == header_fields, "line %d: %d fields, header %d", n_lines, fields,
                  header_fields);
        n_lines++;
        line += len + (end != NULL);
    }
    CHECK_MSG(n_lines == 5, "%d lines, want 1 + 4", n_lines);
    CHECK(header_fields == 9 + 7 + BENCH_MEM_N_KINDS + 1 + 4 + BENCH_PROF_N_CATS + 5);
    CHECK(strstr(text, ",scaling_efficiency,seq_len,tokens_per_s,recompute,zero_stage\n") != NULL);
    CHECK(strstr(text, "\"mlp,wide\"") != NULL);
    CHECK(strncmp(text, "impl,model,opt_level,half,batch,", 32) == 0);
    free(text);
}

/* Lines of the first Markdown table that are rows (not its header or |---| separator). */
static int md_table_rows(const char *text) {
    int n = 0, seen = 0;
    for (const char *line = strstr(text, "\n|"); line && line[1] == '|';
         line = strchr(line + 1, '\n')) {
        if (seen++ >= 2) n++;
        if (!strchr(line + 1, '\n')) break;
    }
    return n;
}

static void test_markdown(const bench_run_header *run, bench_row *rows) {
    amp_status s = AMP_ERR_IO;
    /* libamp rows only: one table line per row. */
    bench_row libamp_only[2] = {rows[0], rows[1]};
    char *text = bench_capture(bench_write_markdown, run, libamp_only, 2, &s);
    CHECK(s == AMP_OK && text);
    if (text) {
        const char *head = "2026-11-24 10:31 — CPU: Test CPU 9000; ISA: avx512f avx512_bf16;";
        CHECK(strncmp(text, head, strlen(head)) == 0);
        CHECK(strstr(text, "f32 190.5, bf16 -, f16 -") != NULL);
        CHECK_MSG(md_table_rows(text) == 2, "%d throughput lines, want 2", md_table_rows(text));
        CHECK(strstr(text, "| libamp | mlp | cpu | 128 | O1 | bf16 | 1.0 | 2.0 |") != NULL);
        free(text);
    }
    /* The PyTorch fp32 row goes beside the O0 row, with the ratio 22 ms / 20 ms = 1.10. */
    CHECK(bench_find_pytorch_match(rows, 4, 0) == 2 && bench_find_pytorch_match(rows, 4, 1) < 0);
    CHECK(bench_find_pytorch_match(rows, 4, 2) < 0);
    CHECK(!strcmp(bench_pytorch_config_for(&rows[1]), "autocast-bf16"));
    CHECK(!strcmp(bench_pytorch_config_for(&rows[3]), "autocast-fp16"));
    text = bench_capture(bench_write_markdown, run, rows, 4, &s);
    CHECK(s == AMP_OK && text);
    if (text) {
        CHECK_MSG(md_table_rows(text) == 3, "%d throughput lines, want 3", md_table_rows(text));
        CHECK(strstr(text, "| fp32 | 5818.2 | 1.10 |") != NULL);
        CHECK(strstr(text, "Scaling (DDP)") == NULL); /* no row has an efficiency */
        free(text);
    }
    /* A DDP row (mpirun): the scaling table, per rank = samples/s over the ranks. */
    bench_row ddp = rows[0];
    ddp.world_size = 2;
    ddp.samples_per_s = 1000.0;
    ddp.scaling_efficiency = 0.8;
    text = bench_capture(bench_write_markdown, run, &ddp, 1, &s);
    CHECK(s == AMP_OK && text);
    if (text) {
        CHECK(strstr(text, "Scaling (DDP)") != NULL);
        CHECK_MSG(strstr(text, "| mlp | 128 | O0 | - | 2 | 2 | 1000.0 | 500.0 | 80.0 % |") != NULL,
                  "%s", text);
        free(text);
    }
}

/* A token model's rows (a GPT's, sequences of 128): tokens/s = samples/s x 128 and the ratio to
 * PyTorch's in the table, the Markdown, JSON and CSV; the run's model note printed. Rows
 * without tokens get no tokens table. */
static void test_tokens(const bench_run_header *run, const bench_row *rows) {
    bench_run_header h = *run;
    snprintf(h.model_note, sizeof h.model_note, "gpt: 4 layers, 4 heads");
    bench_row gpt[2] = {rows[0], rows[2]}; /* libamp O0 and PyTorch fp32: 20 and 22 ms */
    for (int i = 0; i < 2; i++) {
        snprintf(gpt[i].model, sizeof gpt[i].model, "gpt");
        gpt[i].seq_len = 128;
        gpt[i].samples_per_s = i == 0 ? 80.0 : 50.0;
    }
    gpt[0].mfu = 0.5;
    amp_status s = AMP_ERR_IO;
    char *text = bench_capture(bench_write_table, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text);
    if (text) {
        CHECK(strstr(text, "gpt: 4 layers, 4 heads\n") != NULL);
        CHECK_MSG(strstr(text, "  10240  50.0       6400  1.60\n") != NULL, "%s", text);
        free(text);
    }
    text = bench_capture(bench_write_markdown, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text);
    if (text) {
        CHECK_MSG(strstr(text, "| libamp | gpt | 128 | 128 | O0 | - | 10240 | 50.0 % | 6400 | 1.60 |")
                  != NULL, "%s", text);
        free(text);
    }
    text = bench_capture(bench_csv_adapter, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text && strstr(text, ",128,10240,-,0\n") != NULL);
    free(text);
    /* Recomputed blocks: the row says so everywhere, and PyTorch's match must be recomputed
     * too (a checkpointed PyTorch run against a plain one would be no comparison). */
    snprintf(gpt[0].recompute, sizeof gpt[0].recompute, "full");
    CHECK(bench_find_pytorch_match(gpt, 2, 0) == -1);
    snprintf(gpt[1].recompute, sizeof gpt[1].recompute, "full");
    CHECK(bench_find_pytorch_match(gpt, 2, 0) == 1);
    text = bench_capture(bench_write_table, &h, gpt, 2, &s);
    CHECK_MSG(s == AMP_OK && text && strstr(text, "libamp  gpt/full ") != NULL, "%s",
              text ? text : "");
    free(text);
    text = bench_capture(bench_csv_adapter, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text && strstr(text, ",128,10240,full,0\n") != NULL);
    free(text);
    text = bench_capture(bench_write_json, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text && strstr(text, "\"recompute\": \"full\"") != NULL);
    /* A ZeRO row: named so in the table, its stage in the CSV and the JSON, and matched only
     * with a PyTorch row of the same stage. */
    gpt[0].zero_stage = 1;
    CHECK(bench_find_pytorch_match(gpt, 2, 0) == -1);
    free(text);
    text = bench_capture(bench_write_table, &h, gpt, 2, &s);
    CHECK_MSG(s == AMP_OK && text && strstr(text, "libamp  gpt/full zero1 ") != NULL, "%s",
              text ? text : "");
    free(text);
    text = bench_capture(bench_csv_adapter, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text && strstr(text, ",128,10240,full,1\n") != NULL);
    free(text);
    text = bench_capture(bench_write_json, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text && strstr(text, "\"zero_stage\": 1") != NULL);
    gpt[0].zero_stage = 0;
    free(text);
    text = bench_capture(bench_write_json, &h, gpt, 2, &s);
    CHECK(s == AMP_OK && text && strstr(text, "\"tokens_per_s\": 10240") != NULL &&
          strstr(text, "\"model_note\": \"gpt: 4 layers") != NULL);
    free(text);
    text = bench_capture(bench_write_markdown, run, rows, 4, &s);
    CHECK(s == AMP_OK && text && strstr(text, "Tokens per second") == NULL);
    free(text);
}

static void test_table(const bench_run_header *run, const bench_row *rows) {
    amp_status s = AMP_ERR_IO;
    char *text = bench_capture(bench_write_table, run, rows, 4, &s);
    CHECK(s == AMP_OK && text);
    if (!text) return;
    CHECK(strstr(text, "samples/s") && strstr(text, "activations") && strstr(text, "gemm_conv"));
    size_t widest = 0;
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        widest = len > widest ? len : widest;
        line += len + (line[len] == '\n');
    }
    CHECK_MSG(widest <= 150, "widest line %zu characters", widest);
    CHECK(strstr(text, " recompute") == NULL); /* no row recomputed: no column */
    fputs(text, stdout);
    free(text);
    bench_row again[4];
    memcpy(again, rows, sizeof again);
    again[1].mem_peak_nbytes[BENCH_MEM_RECOMPUTE] = 3 * 1048576;
    text = bench_capture(bench_write_table, run, again, 4, &s);
    CHECK(s == AMP_OK && text && strstr(text, " recompute") != NULL && strstr(text, "3.0"));
    free(text);
}

static void test_errors(const bench_run_header *run, const bench_row *rows) {
    CHECK(bench_write_json(NULL, run, rows, 1) == AMP_ERR_INVALID_ARG);
    CHECK(strstr(bench_last_error(), "'f' is NULL") != NULL);
    CHECK(bench_write_markdown(stdout, NULL, rows, 1) == AMP_ERR_INVALID_ARG);
    CHECK(bench_write_csv(stdout, NULL, 2) == AMP_ERR_INVALID_ARG);
    CHECK(bench_write_table(stdout, run, rows, -1) == AMP_ERR_INVALID_ARG);
    CHECK(!strcmp(bench_mem_kind_name(BENCH_MEM_WORKSPACE), "workspace"));
    CHECK(!strcmp(bench_mem_kind_name(BENCH_MEM_N_KINDS), "?"));
    CHECK(!strcmp(bench_prof_cat_name(BENCH_PROF_CAST), "cast"));
}

int main(void) {
    bench_run_header run;
    bench_row rows[4];
    fill_rows(&run, rows);
    test_json(&run, rows);
    test_csv(&run, rows);
    test_markdown(&run, rows);
    test_table(&run, rows);
    test_tokens(&run, rows);
    test_errors(&run, rows);
    bench_run_header host;
    bench_run_header_init(&host);
    CHECK(host.date[0] != '\0' && host.cpu_model[0] != '\0' && isnan(host.peak_gflops_bf16));
    CHECK(strstr(host.date, " UTC") != NULL);
    return test_summary("test_bench_report");
}
