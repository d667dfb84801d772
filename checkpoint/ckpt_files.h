/* The file-system side of checkpoints: step folders written under a temporary name and renamed
 * into place with fsyncs, the `latest` pointer replaced atomically, old folders pruned. POSIX. */
#ifndef AMP_CHECKPOINT_CKPT_FILES_H
#define AMP_CHECKPOINT_CKPT_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "amp/status.h"

#define AMP_CKPT_PATH_MAX 4096
#define AMP_CKPT_LATEST "latest"
#define AMP_CKPT_MODEL_FILE "model.safetensors"
#define AMP_CKPT_STATE_FILE "state.safetensors"

/* "step-0000123": the folder name of a step (>= 7 digits, so names sort by step up to 10^7). */
amp_status amp_ckpt_step_name(int64_t step, char *out, size_t size);
/* a + "/" + b into out, or AMP_ERR_INVALID_ARG naming the path when it does not fit. */
amp_status amp_ckpt_join(const char *a, const char *b, char *out, size_t size);
/* mkdir -p; an existing folder is fine. */
amp_status amp_ckpt_mkdirs(const char *dir);
/* A new empty folder dir/.tmp-<name>-<pid>-<n> to write a step into; temporary folders that a
 * killed save left behind (their pid no longer runs) are removed first. */
amp_status amp_ckpt_make_tmp(const char *dir, const char *name, char *out, size_t size);
/* Removes what saves whose process is gone left in dir: temporary step folders, `latest`'s
 * temporary file, moved-aside folders (the pid in their name no longer runs). */
void amp_ckpt_clean_leftovers(const char *dir);
/* fsync of a file or folder by path. */
amp_status amp_ckpt_fsync_path(const char *path);
/* fsyncs tmp, renames it to dir/name (an existing dir/name is moved aside first and removed
 * after), fsyncs dir. */
amp_status amp_ckpt_publish(const char *dir, const char *tmp, const char *name);
/* dir/latest = name + "\n", through a temporary file, fsync and rename, then fsync of dir. */
amp_status amp_ckpt_set_latest(const char *dir, const char *name);
/* The folder name dir/latest holds (checked: a plain step-N name that exists). */
amp_status amp_ckpt_read_latest(const char *dir, char *name, size_t size);
/* Removes step folders of dir beyond the newest `keep`, never `protect`. keep <= 0: none. */
amp_status amp_ckpt_prune(const char *dir, int keep, const char *protect);
/* Removes a checkpoint folder and the plain files in it. */
amp_status amp_ckpt_remove_folder(const char *path);

#endif
