/* bench_plot_png: the errors that need no gnuplot (a program that is missing, one that fails,
 * nothing to plot), then, where gnuplot is on PATH, a PNG with its 8-byte signature and more than
 * 1 KiB, for a run with PyTorch rows and one without. SKIPPED (77) without gnuplot. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_plot.h"
#include "test_util.h"

static bool on_path(const char *program) {
    const char *path = getenv("PATH");
    char dir_list[4096], candidate[4200];
    snprintf(dir_list, sizeof dir_list, "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *dir = strtok_r(dir_list, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(candidate, sizeof candidate, "%s/%s", dir, program);
        if (access(candidate, X_OK) == 0) return true;
    }
    return false;
}

/* A failed gnuplot run keeps its files for a look: "... (data and script kept in DIR)". */
static void remove_kept_dir(const char *message) {
    const char *at = strstr(message, "kept in ");
    CHECK_MSG(at != NULL, "message names no kept directory: %s", message);
    if (!at) return;
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%.*s", (int)strcspn(at + 8, ")"), at + 8);
    static const char *const files[] = {"throughput.dat", "memory.dat", "plot.gp",
                                        "gnuplot-stderr.txt"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    CHECK_MSG(rmdir(dir) == 0, "%s not removed", dir);
}

static void fill(bench_run_header *run, bench_row rows[5]) {
    bench_run_header_init(run);
    run->threads = 2;
    static const char *const impl[5] = {"libamp", "libamp", "libamp", "pytorch", "pytorch"};
    static const char *const level[5] = {"O0", "O1", "O3", "fp32", "autocast-fp16"};
    static const char *const half[5] = {"-", "bf16", "fp16", "-", "-"};
    for (int i = 0; i < 5; i++) {
        bench_row *r = &rows[i];
        bench_row_init(r);
        snprintf(r->impl, sizeof r->impl, "%s", impl[i]);
        snprintf(r->model, sizeof r->model, "mlp");
        snprintf(r->opt_level, sizeof r->opt_level, "%s", level[i]);
        snprintf(r->half, sizeof r->half, "%s", half[i]);
        snprintf(r->device, sizeof r->device, "cpu");
        r->batch = 128;
        r->threads = 2;
        r->samples_per_s = 3000.0 + 1500.0 * i;
        r->host_peak_rss_nbytes = (400ll + 10 * i) << 20;
        if (i < 3)
            for (int k = 0; k < BENCH_MEM_N_KINDS; k++) r->mem_peak_nbytes[k] = (k + i + 1) << 20;
    }
    rows[2].mem_peak_nbytes[BENCH_MEM_MASTERS] = -1; /* unknown kinds stack as 0 */
    rows[4].mem_peak_total_nbytes = 90ll << 20;      /* a total without a split */
}

static void check_png(const char *path) {
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "%s not written", path);
    if (!f) return;
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    CHECK(got == 8 && memcmp(head, signature, 8) == 0);
    struct stat st;
    CHECK_MSG(stat(path, &st) == 0 && st.st_size > 1024, "%s: %lld bytes", path,
              (long long)st.st_size);
}

int main(void) {
    const char *tmp = getenv("AMP_TEST_TMP");
    char png[1024], png_alone[1024];
    snprintf(png, sizeof png, "%s/test_bench_plot.png", tmp && *tmp ? tmp : "/tmp");
    snprintf(png_alone, sizeof png_alone, "%s/test_bench_plot_libamp.png",
             tmp && *tmp ? tmp : "/tmp");
    bench_run_header run;
    bench_row rows[5];
    fill(&run, rows);

    if (tmp && *tmp) setenv("TMPDIR", tmp, 1);
    setenv("AMP_BENCH_GNUPLOT", "/nonexistent/gnuplot", 1);
    CHECK(bench_plot_png(png, &run, rows, 5) == AMP_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(bench_last_error(), "not found") && strstr(bench_last_error(), "gnuplot-nox"),
              "message: %s", bench_last_error());
    setenv("AMP_BENCH_GNUPLOT", "false", 1); /* runs and exits 1 */
    CHECK(bench_plot_png(png, &run, rows, 5) == AMP_ERR_BACKEND);
    CHECK_MSG(strstr(bench_last_error(), "failed (exit status 1)") != NULL, "message: %s",
              bench_last_error());
    remove_kept_dir(bench_last_error());
    unsetenv("AMP_BENCH_GNUPLOT");
    bench_row empty;
    bench_row_init(&empty);
    CHECK(bench_plot_png(png, &run, &empty, 1) == AMP_ERR_INVALID_ARG);
    CHECK(bench_plot_png(NULL, &run, rows, 5) == AMP_ERR_INVALID_ARG);

    if (!on_path("gnuplot")) {
        printf("%d checks passed before ", test_n_pass);
        return test_n_fail ? 1 : test_skip("test_bench_plot", "no gnuplot");
    }
    remove(png);
    amp_status s = bench_plot_png(png, &run, rows, 5);
    CHECK_MSG(s == AMP_OK, "status %d: %s", (int)s, bench_last_error());
    check_png(png);
    remove(png_alone);
    s = bench_plot_png(png_alone, &run, rows, 3); /* libamp only: no PyTorch bars */
    CHECK_MSG(s == AMP_OK, "status %d: %s", (int)s, bench_last_error());
    check_png(png_alone);
    printf("wrote %s and %s\n", png, png_alone);
    return test_summary("test_bench_plot");
}
