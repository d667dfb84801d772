/* amp-bench --plot (bench_plot.h): writes two data files and a gnuplot script to a temporary
 * directory and runs gnuplot on them with posix_spawnp, not system(), so no shell parses paths
 * and gnuplot's stderr can be captured into the error message. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, posix_spawn */
#include "bench/bench_plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BENCH_MIB (1024.0 * 1024.0)
/* gnuplot's stderr quoted in an error message: enough for its error line and the script line. */
#define BENCH_PLOT_STDERR_MAX 1200

extern char **environ;

typedef struct bench_plot_files {
    char dir[512];
    char throughput[560], memory[560], script[560], err[560];
} bench_plot_files;

/* A row's label on the x axis, e.g. "mlp O1 bf16 b128 cpu t2" ("w4" with 4 ranks); PyTorch rows
 * drawn on their own read "mlp PyTorch fp32 b128 cpu t2". No quotes: it goes into "..." fields. */
static void bench_plot_label(const bench_row *r, char *out, size_t n) {
    bool pytorch = !strcmp(r->impl, "pytorch");
    char world[16] = "";
    if (r->world_size > 1) snprintf(world, sizeof world, " w%d", r->world_size);
    bool show_half = !pytorch && strcmp(r->half, "-") != 0;
    snprintf(out, n, "%s %s%s%s%s b%d %s t%d%s", r->model, pytorch ? "PyTorch " : "", r->opt_level,
             show_half ? " " : "", show_half ? r->half : "", r->batch, r->device, r->threads,
             world);
    for (char *p = out; *p; p++)
        if (*p == '"' || *p == '\\') *p = '\'';
}

static void bench_plot_value(FILE *f, double v) {
    if (isnan(v) || isinf(v)) fputs(" -", f); /* the script's `set datafile missing "-"` */
    else fprintf(f, " %.6g", v);
}

static bool bench_plot_has_memory(const bench_row *r) {
    if (r->mem_peak_total_nbytes >= 0) return true;
    for (int k = 0; k < BENCH_MEM_N_KINDS; k++)
        if (r->mem_peak_nbytes[k] >= 0) return true;
    return false;
}

/* One line per configuration: label, libamp samples/s, PyTorch samples/s. Returns the count. */
static int bench_plot_write_throughput(FILE *f, const bench_row *rows, int n_rows) {
    int n = 0;
    char label[128];
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        double libamp = NAN, pytorch = NAN;
        if (!strcmp(r->impl, "pytorch")) {
            bool matched = false;
            for (int j = 0; j < n_rows && !matched; j++)
                matched = bench_find_pytorch_match(rows, n_rows, j) == i;
            if (matched) continue; /* drawn beside its libamp row */
            pytorch = r->samples_per_s;
        } else {
            int match = bench_find_pytorch_match(rows, n_rows, i);
            libamp = r->samples_per_s;
            if (match >= 0) pytorch = rows[match].samples_per_s;
        }
        if (isnan(libamp) && isnan(pytorch)) continue;
        bench_plot_label(r, label, sizeof label);
        fprintf(f, "\"%s\"", label);
        bench_plot_value(f, libamp);
        bench_plot_value(f, pytorch);
        fputc('\n', f);
        n++;
    }
    return n;
}

/* One line per row with memory figures: label, the kinds, unsplit, host RSS (all MiB). Unknown
 * kinds stack as 0. Returns the count. */
static int bench_plot_write_memory(FILE *f, const bench_row *rows, int n_rows) {
    int n = 0;
    char label[128];
    for (int i = 0; i < n_rows; i++) {
        const bench_row *r = &rows[i];
        if (!bench_plot_has_memory(r)) continue;
        bool split = false;
        bench_plot_label(r, label, sizeof label);
        fprintf(f, "\"%s\"", label);
        for (int k = 0; k < BENCH_MEM_N_KINDS; k++) {
            split |= r->mem_peak_nbytes[k] >= 0;
            int64_t nbytes = r->mem_peak_nbytes[k];
            bench_plot_value(f, nbytes < 0 ? 0.0 : (double)nbytes / BENCH_MIB);
        }
        bench_plot_value(f, split ? 0.0 : (double)r->mem_peak_total_nbytes / BENCH_MIB);
        int64_t rss = r->host_peak_rss_nbytes;
        bench_plot_value(f, rss < 0 ? NAN : (double)rss / BENCH_MIB);
        fputc('\n', f);
        n++;
    }
    return n;
}

/* A gnuplot single-quoted string: no escapes inside, a quote is written twice. */
static void bench_plot_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* What the data files hold: their line counts, and whether any PyTorch bar or RSS point is in
 * them (gnuplot stops on a plot whose every point is missing), and any total without a split. */
typedef struct bench_plot_content {
    int n_throughput, n_memory;
    bool any_pytorch, any_rss, any_unsplit;
} bench_plot_content;

static bench_plot_content bench_plot_scan(const bench_row *rows, int n_rows) {
    bench_plot_content c = {0, 0, false, false, false};
    for (int i = 0; i < n_rows; i++) {
        c.any_pytorch |= !strcmp(rows[i].impl, "pytorch") && isfinite(rows[i].samples_per_s);
        c.any_rss |= bench_plot_has_memory(&rows[i]) && rows[i].host_peak_rss_nbytes >= 0;
        bool split = false;
        for (int k = 0; k < BENCH_MEM_N_KINDS; k++) split |= rows[i].mem_peak_nbytes[k] >= 0;
        c.any_unsplit |= !split && rows[i].mem_peak_total_nbytes >= 0;
    }
    return c;
}

static void bench_plot_write_script(FILE *f, const bench_plot_files *files, const char *png_path,
                                    const bench_run_header *run, const bench_plot_content *c) {
    int n_throughput = c->n_throughput, n_memory = c->n_memory;
    int n_panels = (n_throughput > 0) + (n_memory > 0);
    int n_max = n_throughput > n_memory ? n_throughput : n_memory;
    int width = n_max * 70 + 300 > 1000 ? n_max * 70 + 300 : 1000;
    int height = 520 * n_panels + 120;
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "    set terminal pngcairo size %d,%d font 'sans,10' noenhanced\n"
               "} else {\n"
               "    set terminal png size %d,%d noenhanced\n"
               "}\nset output ",
            width, height, width, height);
    bench_plot_quote(f, png_path);
    char title[512];
    snprintf(title, sizeof title, "amp-bench %s: %s (%s), %d threads%s%s", run->date,
             run->cpu_model, run->isa, run->threads, run->gpu_model[0] ? ", GPU " : "",
             run->gpu_model);
    fprintf(f, "\nset datafile missing '-'\nset multiplot layout %d,1 title ", n_panels);
    bench_plot_quote(f, title);
    fputs("\nset style data histograms\nset style fill solid 0.85 border -1\nset boxwidth 0.9\n"
          "set grid ytics\nset key outside right top\nset xtics rotate by 30 right nomirror\n"
          "set yrange [0:*]\nset offsets 0, 0, graph 0.08, 0\nset bmargin 9\n"
          "set lmargin at screen 0.08\nset rmargin at screen 0.80\n", /* panels aligned */
          f);
    if (n_throughput > 0) {
        fputs("set style histogram clustered gap 1\nset title 'training throughput'\n"
              "set ylabel 'samples/s'\nplot ",
              f);
        bench_plot_quote(f, files->throughput);
        fputs(" using 2:xtic(1) title 'libamp' lc rgb '#1f77b4'", f);
        fputs(c->any_pytorch ? ", '' using 3 title 'PyTorch' lc rgb '#ff7f0e'\n" : "\n", f);
    }
    if (n_memory > 0) {
        static const char *const colours[BENCH_MEM_N_KINDS + 1] = {
            "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#7f7f7f",
            "#17becf", "#bcbd22"};
        fputs("set style histogram rowstacked\nset title 'peak memory by kind'\n"
              "set ylabel 'MiB'\nplot ",
              f);
        bench_plot_quote(f, files->memory);
        for (int k = 0; k < BENCH_MEM_N_KINDS + c->any_unsplit; k++)
            fprintf(f, "%s using %d%s title '%s' lc rgb '%s'", k ? ", \\\n    ''" : "", k + 2,
                    k ? "" : ":xtic(1)", k < BENCH_MEM_N_KINDS ? bench_mem_kind_name(k) : "unsplit",
                    colours[k]);
        if (c->any_rss) /* the column after the kinds and the unsplit total */
            fprintf(f, ", \\\n    '' using 0:%d with points pt 7 ps 1.2 lc rgb 'black' "
                    "title 'host peak RSS'\n", BENCH_MEM_N_KINDS + 3);
        else
            fputs("\n", f);
    }
    fputs("unset multiplot\nunset output\n", f);
}

/* Up to n - 1 bytes of a file into buf (for gnuplot's stderr), trailing newlines dropped. */
static void bench_plot_read_text(const char *path, char *buf, size_t n) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == ' ')) got--;
    buf[got] = '\0';
}

/* Runs `program script` with stdout to /dev/null and stderr to files->err. */
static amp_status bench_plot_run_gnuplot(const bench_plot_files *files, const char *png_path) {
    const char *program = getenv("AMP_BENCH_GNUPLOT");
    if (!program || !*program) program = "gnuplot";
    posix_spawn_file_actions_t actions;
    if (posix_spawn_file_actions_init(&actions) != 0)
        return bench_fail(AMP_ERR_OOM, "bench_plot_png: posix_spawn_file_actions_init failed");
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, files->err,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {(char *)program, (char *)files->script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, program, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    if (rc == 0 && waitpid(pid, &status, 0) < 0) rc = errno;
    /* glibc reports a missing program from posix_spawnp; others run the child, which exits 127. */
    if (rc == ENOENT || (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127))
        return bench_fail(AMP_ERR_UNSUPPORTED,
                          "bench_plot_png: '%s' not found: install gnuplot to use --plot "
                          "(Debian: apt-get install gnuplot-nox, or scripts/setup.sh)",
                          program);
    if (rc != 0)
        return bench_fail(AMP_ERR_BACKEND, "bench_plot_png: cannot run '%s': %s", program,
                          strerror(rc));
    char err[BENCH_PLOT_STDERR_MAX];
    bench_plot_read_text(files->err, err, sizeof err);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return bench_fail(AMP_ERR_BACKEND, "bench_plot_png: %s %s failed (%s %d): %s", program,
                          files->script, WIFEXITED(status) ? "exit status" : "signal",
                          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                          err[0] ? err : "(nothing on stderr)");
    struct stat st;
    if (stat(png_path, &st) != 0 || st.st_size == 0)
        return bench_fail(AMP_ERR_BACKEND, "bench_plot_png: %s wrote no PNG to %s: %s", program,
                          png_path, err[0] ? err : "(nothing on stderr)");
    return AMP_OK;
}

static amp_status bench_plot_make_files(bench_plot_files *files) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    int n = snprintf(files->dir, sizeof files->dir, "%s/amp-bench-plot-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= sizeof files->dir)
        return bench_fail(AMP_ERR_INVALID_ARG, "bench_plot_png: TMPDIR '%s' is too long", tmp);
    if (!mkdtemp(files->dir))
        return bench_fail(AMP_ERR_IO, "bench_plot_png: mkdtemp %s: %s", files->dir,
                          strerror(errno));
    snprintf(files->throughput, sizeof files->throughput, "%s/throughput.dat", files->dir);
    snprintf(files->memory, sizeof files->memory, "%s/memory.dat", files->dir);
    snprintf(files->script, sizeof files->script, "%s/plot.gp", files->dir);
    snprintf(files->err, sizeof files->err, "%s/gnuplot-stderr.txt", files->dir);
    return AMP_OK;
}

static void bench_plot_remove_files(const bench_plot_files *files) {
    remove(files->throughput);
    remove(files->memory);
    remove(files->script);
    remove(files->err);
    rmdir(files->dir);
}

/* Opens path for writing, lets writer() fill it, closes it; AMP_ERR_IO on any failure. */
static amp_status bench_plot_write_file(const char *path, int *count,
                                        int (*writer)(FILE *, const bench_row *, int),
                                        const bench_row *rows, int n_rows) {
    FILE *f = fopen(path, "w");
    if (!f) return bench_fail(AMP_ERR_IO, "bench_plot_png: %s: %s", path, strerror(errno));
    *count = writer(f, rows, n_rows);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed)
        return bench_fail(AMP_ERR_IO, "bench_plot_png: writing %s failed", path);
    return AMP_OK;
}

amp_status bench_plot_png(const char *png_path, const bench_run_header *run, const bench_row *rows,
                          int n_rows) {
    if (!png_path || !*png_path)
        return bench_fail(AMP_ERR_INVALID_ARG, "bench_plot_png: argument 'png_path' is empty");
    if (!run) return bench_fail(AMP_ERR_INVALID_ARG, "bench_plot_png: argument 'run' is NULL");
    if (n_rows < 0 || (!rows && n_rows > 0))
        return bench_fail(AMP_ERR_INVALID_ARG, "bench_plot_png: %d rows at %p", n_rows,
                          (void *)rows);
    bench_plot_files files;
    amp_status s = bench_plot_make_files(&files);
    if (s != AMP_OK) return s;
    bench_plot_content content = bench_plot_scan(rows, n_rows);
    s = bench_plot_write_file(files.throughput, &content.n_throughput,
                              bench_plot_write_throughput, rows, n_rows);
    if (s == AMP_OK)
        s = bench_plot_write_file(files.memory, &content.n_memory, bench_plot_write_memory, rows,
                                  n_rows);
    if (s == AMP_OK && content.n_throughput == 0 && content.n_memory == 0)
        s = bench_fail(AMP_ERR_INVALID_ARG, "bench_plot_png: nothing to plot: no row has "
                                            "samples/s or a memory figure");
    if (s != AMP_OK) {
        bench_plot_remove_files(&files);
        return s;
    }
    FILE *script = fopen(files.script, "w");
    if (!script)
        s = bench_fail(AMP_ERR_IO, "bench_plot_png: %s: %s", files.script, strerror(errno));
    if (script) {
        bench_plot_write_script(script, &files, png_path, run, &content);
        bool failed = ferror(script) != 0;
        if (fclose(script) != 0 || failed)
            s = bench_fail(AMP_ERR_IO, "bench_plot_png: writing %s failed", files.script);
    }
    if (s == AMP_OK) s = bench_plot_run_gnuplot(&files, png_path);
    if (s == AMP_OK || s == AMP_ERR_UNSUPPORTED || s == AMP_ERR_IO) {
        bench_plot_remove_files(&files);
    } else {
        char why[1800];
        snprintf(why, sizeof why, "%s", bench_last_error());
        bench_fail(s, "%s (data and script kept in %s)", why, files.dir);
    }
    return s;
}
