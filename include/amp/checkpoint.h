/* libamp checkpoints: a folder per save, resumed bit for bit.
 *
 *     amp_checkpoint_save("run/ckpt", step, model, opt, &(amp_checkpoint_opts){.loader = ld, .keep = 3});
 *     ...
 *     amp_initialize(model, opt, AMP_O2);            // Apex's rule: initialize first, then load
 *     amp_checkpoint_load("run/ckpt", model, opt, &(amp_checkpoint_opts){.loader = ld});
 *
 * A save writes DIR/step-NNNNNNN/ (the step number with at least 7 digits) holding two
 * safetensors files (readable by the Python `safetensors` package):
 *   model.safetensors  the model's parameters and buffers under PyTorch's state_dict names, in the
 *                      model's own dtypes, with each batch norm's num_batches_tracked (int64): the
 *                      same network written in PyTorch loads it with strict=True;
 *   state.safetensors  everything else: the f32 master weights ("master.<name>"), the optimizer's
 *                      state in torch.optim's names ("optimizer.state.<i>.momentum_buffer",
 *                      ".exp_avg", ".exp_avg_sq", ".step"), every loss scaler's state, the RNG,
 *                      the loader's position, the step, the opt level and resolved options, the
 *                      thread count and CPU ISA, and user metadata ("user.<key>").
 * Each file carries a format version and a crc32 of its data; a file that fails either is refused.
 * The folder is written under a temporary name, its files and itself fsync'd, renamed into place
 * and the parent fsync'd, then DIR/latest (a one-line text file naming the folder) is replaced
 * the same way: a crash at any moment leaves the previous checkpoint or the new one, never a torn
 * one. Folders beyond the newest `keep` are removed after that.
 *
 * A load validates both files against the model and optimizer completely before changing
 * anything, and is all or nothing: a missing, unexpected or mis-shaped tensor, another optimizer
 * kind, another number of losses, a bad loader position, fails with every culprit named (up to a
 * few of each) and leaves model, optimizer, scalers, RNG and loader untouched. Weights convert
 * between f32, f16 and bf16 to the model's dtypes. Master weights: a checkpoint with masters
 * restores them exactly and rebuilds the half model from them; a checkpoint without (O0, O1, O3)
 * loaded into a run with masters (O2) makes them from its weights; a checkpoint with masters
 * loaded into a run without gives the model the masters' full-precision values. A run without
 * amp_initialize loads weights, optimizer, RNG and loader, and says in one log line that the
 * scaler state was not applied. Resuming is bit-exact on the CPU backend with the same thread
 * count and ISA; a load with others says so in one log line. */
#ifndef AMP_CHECKPOINT_H
#define AMP_CHECKPOINT_H

#include "amp/data.h"
#include "amp/mixed_precision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_checkpoint_opts {
    amp_loader *loader; /* may be NULL: its position is saved and restored */
    int keep;           /* save: keep the newest `keep` step folders of DIR (0: keep all) */
    /* save: n_user free-form key/value strings, stored as "user.<key>" metadata */
    const char *const *user_keys;
    const char *const *user_values;
    int n_user;
} amp_checkpoint_opts;

/* Saves step `step` (>= 0; the caller's training-step count, restored by the load) under dir,
 * which is created if missing. path_out (may be NULL) gets the new folder's path; one of
 * path_size bytes that cannot hold it is refused before anything is written. */
amp_status amp_checkpoint_save(const char *dir, int64_t step, amp_model *m, amp_optimizer *opt,
                               const amp_checkpoint_opts *opts, char *path_out, size_t path_size);
/* Loads a step folder, or the one DIR/latest names when `path` is a checkpoint directory.
 * *step_out (may be NULL) gets the saved step. opt may be NULL: the model's weights only. */
amp_status amp_checkpoint_load(const char *path, amp_model *m, amp_optimizer *opt,
                               const amp_checkpoint_opts *opts, int64_t *step_out);
/* The folder DIR/latest names, as a path, into out. AMP_ERR_IO when there is none. */
amp_status amp_checkpoint_latest(const char *dir, char *out, size_t size);
/* The same for a job that resumes from DIR whether or not a save of it has completed (one
 * killed before its first save, a requeued Slurm job run with the same command line): where
 * DIR or DIR/latest does not exist, *found = false and out = "" (start from the beginning, as
 * Megatron's and DeepSpeed's loads do), after removing what interrupted saves left in DIR
 * (their temporary folders, when their process no longer runs). Else *found = true and out as
 * amp_checkpoint_latest; a `latest` that names no step folder is an error, as there. */
amp_status amp_checkpoint_find_latest(const char *dir, char *out, size_t size, bool *found);
/* A user metadata value of a checkpoint folder (the key without "user."), copied into out. */
amp_status amp_checkpoint_user_meta(const char *path, const char *key, char *out, size_t size);

/* Weights only: a plain safetensors file under the model's state_dict names (one written by
 * PyTorch, or a checkpoint's model.safetensors), f32/f16/bf16 converted to the model's dtypes,
 * strict (every parameter and buffer present with its shape, nothing unexpected) and all or
 * nothing. After amp_initialize with masters, the masters are set from the file as well. */
amp_status amp_model_load_weights(amp_model *m, amp_optimizer *opt, const char *path);
/* The same from the n files (1 to AMP_WEIGHT_FILES_MAX) of a state_dict split into shards (a
 * Hugging Face model-00001-of-00003.safetensors, ...): every tensor in exactly one of them,
 * strict over their union, all or nothing. */
#define AMP_WEIGHT_FILES_MAX 256
amp_status amp_model_load_weights_files(amp_model *m, amp_optimizer *opt,
                                        const char *const *paths, int n);
/* The model's weights as one safetensors file (what model.safetensors holds), written atomically
 * (temporary file, fsync, rename, fsync of the folder). */
amp_status amp_model_save_weights(amp_model *m, const char *path);

#ifdef __cplusplus
}
#endif
#endif
