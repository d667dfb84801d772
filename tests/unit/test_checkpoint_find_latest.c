/* amp_checkpoint_find_latest: where a job that resumes whether or not a save has completed
 * (amp-train --resume latest, requeued with the same command line) goes on from:
 *  - a checkpoint directory that does not exist yet: nothing found, nothing made;
 *  - one where the only save was killed before `latest` (its temporary step folder, `latest`'s
 *    temporary file): nothing found, and what the dead process left is removed, while a
 *    temporary folder of a process that still runs stays;
 *  - after a save: found, the folder `latest` names, as amp_checkpoint_latest;
 *  - a `latest` naming a folder that is gone, a path that is a file: errors, not "nothing". */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "amp/amp.h"
#include "test_tmp.h"
#include "test_util.h"

#define NAME "test_checkpoint_find_latest"

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) fclose(f);
}

/* A pid that no process has: a child's, after it exited. */
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    int status;
    CHECK(p > 0 && waitpid(p, &status, 0) == p);
    return (long)p;
}

int main(void) {
    test_tmp_make(NAME);
    char dir[700], out[1400], latest[1400];
    bool found = true;
    snprintf(dir, sizeof dir, "%s", test_tmp_path("ckpt"));

    CHECK_OK(amp_checkpoint_find_latest(dir, out, sizeof out, &found));
    CHECK(!found && out[0] == '\0' && !exists(dir));

    /* What a save killed before its `latest` leaves, and a save still running elsewhere. */
    CHECK(mkdir(dir, 0777) == 0);
    long dead = dead_pid();
    char tmp_step[1200], tmp_latest[1200], running[1200], part[1300];
    snprintf(tmp_step, sizeof tmp_step, "%s/.tmp-step-0000003-%ld-0", dir, dead);
    snprintf(tmp_latest, sizeof tmp_latest, "%s/.tmp-latest-%ld-0", dir, dead);
    snprintf(running, sizeof running, "%s/.tmp-step-0000003-%ld-0", dir, (long)getppid());
    CHECK(mkdir(tmp_step, 0777) == 0 && mkdir(running, 0777) == 0);
    snprintf(part, sizeof part, "%s/model.safetensors", tmp_step);
    touch(part);
    touch(tmp_latest);
    found = true;
    CHECK_OK(amp_checkpoint_find_latest(dir, out, sizeof out, &found));
    CHECK(!found && out[0] == '\0');
    CHECK_MSG(!exists(tmp_step), "the killed save's %s is still there", tmp_step);
    CHECK_MSG(!exists(tmp_latest), "the killed save's %s is still there", tmp_latest);
    CHECK_MSG(exists(running), "a running process's %s was removed", running);
    CHECK(rmdir(running) == 0);

    /* After a save: the folder latest names. */
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = AMP_DEVICE_CPU, .seed = 1, .n_threads = 1},
                            &ctx));
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_linear(m, "fc", 3, 2, true));
    CHECK_OK(amp_model_build(m));
    CHECK_OK(amp_checkpoint_save(dir, 7, m, NULL, NULL, NULL, 0));
    CHECK_OK(amp_checkpoint_find_latest(dir, out, sizeof out, &found));
    CHECK_OK(amp_checkpoint_latest(dir, latest, sizeof latest));
    CHECK(found && !strcmp(out, latest) && strstr(out, "step-0000007"));

    /* A latest that names a folder that is gone is not "nothing saved". */
    char step[1200];
    snprintf(step, sizeof step, "%s/step-0000007", dir);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", step);
    CHECK(system(cmd) == 0);
    CHECK_FAILS(amp_checkpoint_find_latest(dir, out, sizeof out, &found), AMP_ERR_IO,
                "which does not exist");
    char file[800];
    snprintf(file, sizeof file, "%s", test_tmp_path("a-file"));
    touch(file);
    CHECK_FAILS(amp_checkpoint_find_latest(file, out, sizeof out, &found), AMP_ERR_IO,
                "is not a directory");
    CHECK_FAILS(amp_checkpoint_find_latest(dir, out, sizeof out, NULL), AMP_ERR_INVALID_ARG,
                "'found' is NULL");
    amp_model_free(m);
    amp_ctx_free(ctx);
    test_tmp_remove();
    return test_summary(NAME);
}
