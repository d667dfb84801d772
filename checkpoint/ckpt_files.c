/* Checkpoint folders on disk. Durability follows the usual rename protocol (what databases and
 * PyTorch's own atomic savers do): write everything under a temporary name, fsync the files and
 * the folder, rename into place, fsync the parent; only then point `latest` at it, by the same
 * protocol. A crash between any two calls leaves either the old state or the new one; what a
 * crash leaves behind (a temporary folder) is removed by the next save. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint/ckpt_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

#define AMP_CKPT_TMP_PREFIX ".tmp-"
#define AMP_CKPT_OLD_PREFIX ".old-"

static amp_status amp_ckpt_errno(const char *what, const char *path) {
    return amp_fail(AMP_ERR_IO, "checkpoint: %s '%s': %s", what, path, strerror(errno));
}

amp_status amp_ckpt_step_name(int64_t step, char *out, size_t size) {
    if (step < 0) return amp_fail(AMP_ERR_INVALID_ARG, "checkpoint: step %lld < 0", (long long)step);
    int n = snprintf(out, size, "step-%07lld", (long long)step);
    if (n < 0 || (size_t)n >= size) return amp_fail(AMP_ERR_INVALID_ARG, "checkpoint: name too long");
    return AMP_OK;
}

amp_status amp_ckpt_join(const char *a, const char *b, char *out, size_t size) {
    int n = snprintf(out, size, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= size)
        return amp_fail(AMP_ERR_INVALID_ARG, "checkpoint: path '%s/%s' is longer than %zu bytes", a,
                        b, size - 1);
    return AMP_OK;
}

amp_status amp_ckpt_mkdirs(const char *dir) {
    char path[AMP_CKPT_PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return amp_fail(AMP_ERR_INVALID_ARG, "checkpoint: directory path too long");
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end) continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) return amp_ckpt_errno("cannot create", path);
        if (end) break;
        *p = '/';
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return amp_fail(AMP_ERR_IO, "checkpoint: '%s' is not a directory", dir);
    return AMP_OK;
}

amp_status amp_ckpt_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return amp_ckpt_errno("cannot open", path);
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    return rc == 0 ? AMP_OK : amp_ckpt_errno("cannot fsync", path);
}

amp_status amp_ckpt_remove_folder(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? AMP_OK : amp_ckpt_errno("cannot open", path);
    struct dirent *e;
    amp_status s = AMP_OK;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char f[AMP_CKPT_PATH_MAX];
        amp_status js = amp_ckpt_join(path, e->d_name, f, sizeof f);
        if (js == AMP_OK && unlink(f) != 0 && errno != ENOENT) js = amp_ckpt_errno("cannot remove", f);
        if (s == AMP_OK) s = js;
    }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT && s == AMP_OK) s = amp_ckpt_errno("cannot remove", path);
    return s;
}

/* The pid in ".tmp-<name>-<pid>-<n>" or ".old-<name>-<pid>-<n>": the second field from the end. */
static long amp_ckpt_owner_pid(const char *entry) {
    const char *last = strrchr(entry, '-');
    if (!last || last == entry) return 0;
    const char *p = last - 1;
    while (p > entry && *p != '-') p--;
    return strtol(p + 1, NULL, 10);
}

void amp_ckpt_clean_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        bool tmp = !strncmp(e->d_name, AMP_CKPT_TMP_PREFIX, strlen(AMP_CKPT_TMP_PREFIX));
        bool old = !strncmp(e->d_name, AMP_CKPT_OLD_PREFIX, strlen(AMP_CKPT_OLD_PREFIX));
        if (!tmp && !old) continue;
        long pid = amp_ckpt_owner_pid(e->d_name);
        if (pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) == 0) continue; /* running */
        char f[AMP_CKPT_PATH_MAX];
        if (amp_ckpt_join(dir, e->d_name, f, sizeof f) != AMP_OK) continue;
        if (unlink(f) != 0) (void)amp_ckpt_remove_folder(f); /* a folder (a file: `latest`'s) */
    }
    closedir(d);
}

amp_status amp_ckpt_make_tmp(const char *dir, const char *name, char *out, size_t size) {
    amp_ckpt_clean_leftovers(dir);
    static unsigned counter;
    char leaf[256];
    snprintf(leaf, sizeof leaf, AMP_CKPT_TMP_PREFIX "%s-%ld-%u", name, (long)getpid(), counter++);
    AMP_TRY(amp_ckpt_join(dir, leaf, out, size));
    if (mkdir(out, 0777) != 0) return amp_ckpt_errno("cannot create", out);
    return AMP_OK;
}

amp_status amp_ckpt_publish(const char *dir, const char *tmp, const char *name) {
    char final[AMP_CKPT_PATH_MAX], aside[AMP_CKPT_PATH_MAX] = "";
    AMP_TRY(amp_ckpt_fsync_path(tmp));
    AMP_TRY(amp_ckpt_join(dir, name, final, sizeof final));
    struct stat st;
    if (stat(final, &st) == 0) { /* a second save of the same step: the old one moves aside */
        char leaf[256];
        snprintf(leaf, sizeof leaf, AMP_CKPT_OLD_PREFIX "%s-%ld-0", name, (long)getpid());
        AMP_TRY(amp_ckpt_join(dir, leaf, aside, sizeof aside));
        (void)amp_ckpt_remove_folder(aside);
        if (rename(final, aside) != 0) return amp_ckpt_errno("cannot move aside", final);
    }
    if (rename(tmp, final) != 0) return amp_ckpt_errno("cannot rename into place", tmp);
    AMP_TRY(amp_ckpt_fsync_path(dir));
    if (aside[0]) (void)amp_ckpt_remove_folder(aside);
    return AMP_OK;
}

amp_status amp_ckpt_set_latest(const char *dir, const char *name) {
    char tmp[AMP_CKPT_PATH_MAX], final[AMP_CKPT_PATH_MAX], leaf[64];
    snprintf(leaf, sizeof leaf, AMP_CKPT_TMP_PREFIX "latest-%ld-0", (long)getpid());
    AMP_TRY(amp_ckpt_join(dir, leaf, tmp, sizeof tmp));
    AMP_TRY(amp_ckpt_join(dir, AMP_CKPT_LATEST, final, sizeof final));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) return amp_ckpt_errno("cannot create", tmp);
    size_t len = strlen(name);
    bool ok = write(fd, name, len) == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
    int err = errno;
    close(fd);
    errno = err;
    if (!ok || rename(tmp, final) != 0) {
        amp_status s = amp_ckpt_errno("cannot write", final);
        unlink(tmp);
        return s;
    }
    return amp_ckpt_fsync_path(dir);
}

static bool amp_ckpt_is_step_name(const char *s) {
    if (strncmp(s, "step-", 5) != 0 || !s[5]) return false;
    for (const char *p = s + 5; *p; p++)
        if (*p < '0' || *p > '9') return false;
    return true;
}

amp_status amp_ckpt_read_latest(const char *dir, char *name, size_t size) {
    char path[AMP_CKPT_PATH_MAX];
    AMP_TRY(amp_ckpt_join(dir, AMP_CKPT_LATEST, path, sizeof path));
    FILE *f = fopen(path, "r");
    if (!f) return amp_fail(AMP_ERR_IO, "checkpoint: no '%s' (%s): nothing saved in '%s' yet",
                            path, strerror(errno), dir);
    char line[256] = "";
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (!got || !amp_ckpt_is_step_name(line))
        return amp_fail(AMP_ERR_FORMAT, "checkpoint: '%s' holds '%s', not a step folder name",
                        path, line);
    char folder[AMP_CKPT_PATH_MAX];
    AMP_TRY(amp_ckpt_join(dir, line, folder, sizeof folder));
    struct stat st;
    if (stat(folder, &st) != 0 || !S_ISDIR(st.st_mode))
        return amp_fail(AMP_ERR_IO, "checkpoint: '%s' names '%s', which does not exist", path,
                        folder);
    if (snprintf(name, size, "%s", line) >= (int)size)
        return amp_fail(AMP_ERR_INVALID_ARG, "checkpoint: name buffer too small");
    return AMP_OK;
}

static int amp_ckpt_cmp_names(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t lx = strlen(x), ly = strlen(y); /* more digits: a later step */
    return lx != ly ? (lx < ly ? -1 : 1) : strcmp(x, y);
}

amp_status amp_ckpt_prune(const char *dir, int keep, const char *protect) {
    if (keep <= 0) return AMP_OK;
    DIR *d = opendir(dir);
    if (!d) return amp_ckpt_errno("cannot open", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    amp_status s = AMP_OK;
    struct dirent *e;
    while (s == AMP_OK && (e = readdir(d)) != NULL) {
        if (!amp_ckpt_is_step_name(e->d_name)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown) s = amp_fail(AMP_ERR_OOM, "checkpoint: out of memory listing '%s'", dir);
            else names = grown;
        }
        if (s == AMP_OK && !(names[n++] = strdup(e->d_name)))
            s = amp_fail(AMP_ERR_OOM, "checkpoint: out of memory listing '%s'", dir);
    }
    closedir(d);
    if (s == AMP_OK) qsort(names, n, sizeof *names, amp_ckpt_cmp_names);
    for (size_t i = 0; s == AMP_OK && i + (size_t)keep < n; i++) {
        if (protect && !strcmp(names[i], protect)) continue;
        char path[AMP_CKPT_PATH_MAX];
        s = amp_ckpt_join(dir, names[i], path, sizeof path);
        if (s == AMP_OK) s = amp_ckpt_remove_folder(path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return s;
}
