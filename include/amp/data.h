/* libamp data: datasets in host memory (MNIST-format IDX files, or any f32 arrays) and a
 * prefetching, shuffling batch loader.
 *
 * A dataset holds every sample in host memory: an f32 input of any shape per sample (MNIST's
 * images f32 [n, c, h, w], c = 1, 28 x 28; features [n, k]; ...) and a target per sample, either a
 * class id (i32 [n]) or f32 values of any shape (regression: [n] or [n, k], what amp_mse_loss
 * compares with). A loader cuts a dataset into batches, in a shuffled order that depends only on
 * (seed, epoch), and gathers the next batch on a background thread while the caller trains on the
 * current one. Batches are host memory; copy them to a tensor with amp_tensor_from_host, or to the
 * device with amp_stager_put.
 *
 * Typical use:
 *     amp_dataset *ds;   amp_mnist_load("data/mnist", true, &ds);
 *     amp_loader *ld;    amp_loader_create(ds, &(amp_loader_opts){.batch_size = 64,
 *                                          .shuffle = true, .seed = 42}, &ld);
 *     for (amp_batch b; amp_loader_next(ld, &b) == AMP_OK && b.n > 0;) { ... b.x, b.y ... }
 *     amp_loader_free(ld); amp_dataset_free(ds);
 */
#ifndef AMP_DATA_H
#define AMP_DATA_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- datasets ---- */
typedef struct amp_dataset amp_dataset;

/* Normalisation constants: pixel mean and standard deviation of the training set after x/255.
 * MNIST's are the ones the PyTorch MNIST example and the Apex tutorial use; Fashion-MNIST's are
 * measured on its 60000 training images (tests/unit/test_data_fashion.c recomputes them). */
#define AMP_MNIST_MEAN 0.1307f
#define AMP_MNIST_STD 0.3081f
#define AMP_FASHION_MNIST_MEAN 0.2860f
#define AMP_FASHION_MNIST_STD 0.3530f

/* How IDX pixels become floats: x = (u8 / 255 - mean) / std, in f32 in that order (what
 * torchvision's ToTensor() then Normalize((mean,), (std,)) compute).
 *  - std == 0 (a zeroed struct, or NULL opts) selects MNIST's AMP_MNIST_MEAN / AMP_MNIST_STD and
 *    ignores `mean`; for Fashion-MNIST pass {.mean = AMP_FASHION_MNIST_MEAN, .std =
 *    AMP_FASHION_MNIST_STD}; {.mean = 0, .std = 1} gives plain x/255 in [0, 1].
 *  - n_classes: labels must lie in [0, n_classes); 0 means 10. At most 256 (labels are bytes). */
typedef struct amp_mnist_opts {
    float mean, std;
    int n_classes;
} amp_mnist_opts;

/* Loads MNIST or Fashion-MNIST (same file names) from `dir`: train-images-idx3-ubyte.gz and
 * train-labels-idx1-ubyte.gz when `train`, else t10k-images-idx3-ubyte.gz and
 * t10k-labels-idx1-ubyte.gz; a name without ".gz" is used when only the uncompressed file exists.
 * Normalised with the MNIST constants; amp_mnist_load_ex takes amp_mnist_opts (NULL = defaults).
 * Errors: AMP_ERR_IO (a file cannot be opened or read: the message names the path and the system's
 * reason), AMP_ERR_FORMAT (wrong magic, dims that do not match the data, truncated or corrupt
 * gzip, trailing bytes, image/label count mismatch, label >= n_classes: the message names the
 * file and what is wrong), AMP_ERR_INVALID_ARG (bad opts), AMP_ERR_OOM. */
amp_status amp_mnist_load(const char *dir, bool train, amp_dataset **out);
amp_status amp_mnist_load_ex(const char *dir, bool train, const amp_mnist_opts *opts,
                             amp_dataset **out);
/* The same from two explicit IDX paths (gzipped or not): images u8 [n, rows, cols] (magic
 * 0x00000803) and labels u8 [n] (magic 0x00000801), e.g. for KMNIST or EMNIST files. */
amp_status amp_dataset_load_idx(const char *images_path, const char *labels_path,
                                const amp_mnist_opts *opts, amp_dataset **out);
/* A dataset with copies of caller data: x f32 [n, sample_shape[0..2]], y i32 [n], each label in
 * [0, n_classes) (AMP_ERR_INVALID_ARG names the first that is not). For synthetic data and tests. */
amp_status amp_dataset_create(int64_t n, const int64_t sample_shape[3], const float *x,
                              const int32_t *y, int n_classes, amp_dataset **out);
/* An in-memory dataset of any f32 inputs and targets (PyTorch's TensorDataset), with copies of
 * the caller's arrays: x f32 [n, x_shape[0 .. x_ndim)], and the targets as exactly one of
 *  - labels: class ids i32 [n], each in [0, n_classes) (cross-entropy's targets);
 *  - y: f32 values [n, y_shape[0 .. y_ndim)] (regression, vectors: amp_mse_loss's targets).
 * 0 to 3 dimensions per sample (0: one number). AMP_ERR_INVALID_ARG names what does not fit. */
typedef struct amp_dataset_desc {
    int64_t n;
    int x_ndim;
    int64_t x_shape[3];
    const float *x;
    const int32_t *labels;
    int n_classes;
    int y_ndim;
    int64_t y_shape[3];
    const float *y;
} amp_dataset_desc;
amp_status amp_dataset_from_arrays(const amp_dataset_desc *desc, amp_dataset **out);
void amp_dataset_free(amp_dataset *ds); /* NULL is a no-op */

int64_t amp_dataset_n(const amp_dataset *ds);
/* Shape of one input, [c, h, w] ({1, 28, 28} for MNIST); a dataset of fewer dimensions per
 * sample pads it with 1 (amp_dataset_sample_ndim says how many are real); its element count. */
void amp_dataset_sample_shape(const amp_dataset *ds, int64_t shape[3]);
int amp_dataset_sample_ndim(const amp_dataset *ds);
int64_t amp_dataset_sample_numel(const amp_dataset *ds);
int amp_dataset_n_classes(const amp_dataset *ds); /* 0 for f32 targets */
/* The whole arrays, owned by the dataset: inputs [n, sample...], class ids [n] (NULL for f32
 * targets), f32 targets [n, target...] (NULL for class ids). */
const float *amp_dataset_images(const amp_dataset *ds);
const int32_t *amp_dataset_labels(const amp_dataset *ds);
const float *amp_dataset_targets(const amp_dataset *ds);
/* The shape of one f32 target (padded with 1) and its number of dimensions (0 for class ids);
 * its element count (0 for class ids). */
int amp_dataset_target_shape(const amp_dataset *ds, int64_t shape[3]);
int64_t amp_dataset_target_numel(const amp_dataset *ds);

/* ---- loader ---- */
typedef struct amp_loader amp_loader;

/* Zero-initialised fields are the defaults.
 *  - batch_size >= 1. The last, partial batch of an epoch is kept unless drop_last (PyTorch's
 *    DataLoader drop_last).
 *  - shuffle: a Fisher-Yates permutation of [0, n) per epoch drawn from Philox4x32-10 keyed by
 *    `seed`, counter (epoch, position); it depends only on (seed, epoch, n), so a run can be
 *    reproduced and resumed, and every rank of a distributed run computes the same one. The
 *    order is not torch.randperm's. Without shuffle the order is 0, 1, ..., n - 1.
 *  - world_size > 1 shards the epoch's order like torch.utils.data.DistributedSampler
 *    (drop_last=False): the order is padded by repeating it from its start up to
 *    ceil(n / world_size) * world_size entries, and rank r takes entries r, r + world_size, ...
 *    Each rank then sees ceil(n / world_size) samples; with n divisible by world_size the ranks
 *    partition the data, otherwise the first (padding) samples appear twice in the epoch. Every
 *    rank must use the same seed. world_size 0 means 1; 0 <= rank < world_size.
 *  - no_prefetch: gather batches on the calling thread instead of a background one (same batches). */
typedef struct amp_loader_opts {
    int64_t batch_size;
    bool shuffle;
    uint64_t seed;
    bool drop_last;
    int rank, world_size;
    bool no_prefetch;
} amp_loader_opts;

/* A batch: x f32 [n, sample...] (shape holds {n, sample...}, ndim entries: 4 for images, then
 * padded with 1), and its targets: class ids y i32 [n], or f32 values targets [n, target...]
 * (target_shape holds {n, target...}, target_ndim entries); host memory owned by the loader,
 * valid until the next amp_loader_next / amp_loader_set_state / amp_loader_free call.
 * n == 0 marks the end of an epoch (x, y, targets NULL); the call after it starts the next
 * epoch. epoch and index say which batch this is (index == n_batches for the end mark). */
typedef struct amp_batch {
    const float *x;
    const int32_t *y;
    int64_t n;
    int64_t shape[4];
    int64_t epoch, index;
    int ndim;
    const float *targets;
    int target_ndim;
    int64_t target_shape[4];
} amp_batch;

/* The position of the NEXT batch amp_loader_next will return: epoch, and batch index in [0,
 * n_batches] (n_batches: the end-of-epoch mark is next). Save it with a checkpoint and restore it
 * to get the same batches again, with the same dataset and options. */
typedef struct amp_loader_state {
    int64_t epoch;
    int64_t batch;
} amp_loader_state;

/* The loader borrows `ds`, which must outlive it; one thread at a time calls a loader's functions
 * (its own prefetch thread is internal). It starts at epoch 0, batch 0. An epoch with no
 * batch (drop_last and fewer samples per rank than batch_size) is AMP_ERR_INVALID_ARG. */
amp_status amp_loader_create(const amp_dataset *ds, const amp_loader_opts *opts, amp_loader **out);
/* Stops the background thread and frees the buffers. NULL is a no-op. */
void amp_loader_free(amp_loader *ld);
amp_status amp_loader_next(amp_loader *ld, amp_batch *b);
amp_status amp_loader_get_state(const amp_loader *ld, amp_loader_state *st);
/* AMP_ERR_INVALID_ARG unless 0 <= epoch < 2^32 and 0 <= batch <= n_batches. */
amp_status amp_loader_set_state(amp_loader *ld, const amp_loader_state *st);
int64_t amp_loader_n_batches(const amp_loader *ld); /* batches per epoch for this rank */
/* The options the loader was created with (world_size 0 reads as 1). */
amp_status amp_loader_get_opts(const amp_loader *ld, amp_loader_opts *out);
int64_t amp_loader_n_samples(const amp_loader *ld); /* samples per epoch for this rank */

/* Device batches that do not make the host wait (PyTorch's DataLoader(pin_memory=True) with
 * .to(device, non_blocking=True)): amp_stager_put copies a loader batch into pinned memory and
 * from there to the device on a copy stream while the previous step still computes, and returns
 * the device tensors, x f32 of the batch's shape and y: the class ids i32 [n], or the f32 targets
 * of the batch's target shape. Two pairs alternate: the tensors of one
 * put stay valid (and unchanged) until the put after the next one; ops queued on them see the
 * batch. On the CPU backend it is a plain copy. One thread at a time uses a stager. */
typedef struct amp_stager amp_stager;
amp_status amp_stager_create(amp_ctx *ctx, amp_stager **out);
amp_status amp_stager_put(amp_stager *s, const amp_batch *b, amp_tensor **x, amp_tensor **y);
void amp_stager_free(amp_stager *s); /* NULL is a no-op */

/* ---- token streams (llm.c's .bin files) ----
 * A file of 256 little-endian int32 (magic 20240520, version 1, the token count, the rest 0)
 * followed by that many uint16 token ids: what llm.c's and nanoGPT-style tokenizer scripts write
 * (GPT-2's BPE, vocab 50257), and amp-text-tokens for bytes (vocab 256). Opening reads
 * the whole file and checks it: a wrong magic or version, a negative count (an int32, as llm.c
 * reads it), a body shorter or longer than the count says, or an id >= vocab_size is
 * AMP_ERR_FORMAT naming the file (and the id's position).
 * Batches are windows of seq + 1 tokens (the inputs and, shifted by one, the targets):
 *   AMP_TOKENS_RANDOM:     row i of step s starts at a uniform position in [0, n - seq - 1),
 *                          drawn by Philox from (seed, s, i), so a run resumed at step s reads
 *                          the same batches as one that never stopped;
 *   AMP_TOKENS_SEQUENTIAL: row i of step s starts at ((s B + i) seq) mod (n - seq - 1), the
 *                          order another program can feed too.
 * A file with fewer than seq + 2 tokens is AMP_ERR_SHAPE naming both counts. */
typedef struct amp_tokens amp_tokens;
typedef enum amp_token_order { AMP_TOKENS_RANDOM = 0, AMP_TOKENS_SEQUENTIAL = 1 } amp_token_order;
amp_status amp_tokens_open(const char *path, int32_t vocab_size, amp_tokens **out);
void amp_tokens_free(amp_tokens *t); /* NULL is a no-op */
int64_t amp_tokens_count(const amp_tokens *t);
const uint16_t *amp_tokens_data(const amp_tokens *t);
/* idx and targets: [batch, seq] i32 each (targets[i][j] = the token after idx[i][j]). */
amp_status amp_tokens_batch(const amp_tokens *t, amp_token_order order, uint64_t seed,
                            int64_t step, int64_t batch, int64_t seq, int32_t *idx,
                            int32_t *targets);
/* Writes tokens [n] (n <= 2^31 - 1) as such a file (atomically: a temporary file renamed),
 * each < 65536. */
amp_status amp_tokens_write(const char *path, const uint16_t *tokens, int64_t n);

/* ---- the tokenizer of a token stream, for decoding (llm.c's tokenizer .bin) ----
 * A file of 256 little-endian uint32 (magic 20240328; version 1 or 2; the vocabulary size; in
 * version 2 the end-of-text token's id, version 1 being GPT-2's: 50257 tokens, end of text
 * 50256), then each token in id order as one byte n (1..255) and its n bytes: what llm.c's
 * train_gpt2.py writes as gpt2_tokenizer.bin. It turns ids back into bytes, as llm.c's sampler
 * does; encoding text is the tokenizing scripts' job. Opening reads the whole file and checks it:
 * a wrong magic or version, a vocabulary outside [1, 65536] (the ids of token files are uint16),
 * a version 1 file that is not GPT-2's, an end-of-text id outside the vocabulary, a token of
 * length 0, a table that ends early or bytes after it is AMP_ERR_FORMAT naming the file (and the
 * token). A token's bytes may be part of a UTF-8 character, the rest in the next token's. */
typedef struct amp_tokenizer amp_tokenizer;
amp_status amp_tokenizer_open(const char *path, amp_tokenizer **out);
void amp_tokenizer_free(amp_tokenizer *t); /* NULL is a no-op */
int32_t amp_tokenizer_vocab_size(const amp_tokenizer *t);
int32_t amp_tokenizer_eot(const amp_tokenizer *t); /* the end-of-text token's id */
/* *bytes (owned by t, not NUL-terminated) and *len (>= 1) of token id; an id outside the
 * vocabulary is AMP_ERR_INVALID_ARG naming it. */
amp_status amp_tokenizer_decode(const amp_tokenizer *t, int32_t id, const char **bytes,
                                size_t *len);

#ifdef __cplusplus
}
#endif
#endif
