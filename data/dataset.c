/* Datasets in host memory: two IDX files turned into normalised f32 images and i32 labels, or
 * the caller's arrays of any f32 inputs and targets (class ids, or f32 values of any shape). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp/data.h"
#include "core/error.h"
#include "data/idx.h"

#define MNIST_DEFAULT_CLASSES 10
#define MNIST_MAX_CLASSES 256

struct amp_dataset {
    int64_t n;
    int sample_ndim;         /* dims of one input: 3 for images */
    int64_t sample_shape[3]; /* padded with 1 beyond sample_ndim */
    int64_t sample_numel;
    int n_classes;           /* 0 for f32 targets */
    float *x;                /* [n, sample...] */
    int32_t *y;              /* class ids [n], or NULL */
    float *t;                /* f32 targets [n, target...], or NULL */
    int target_ndim;
    int64_t target_shape[3];
    int64_t target_numel;
};

static amp_status resolve_opts(const amp_mnist_opts *opts, float *mean, float *std,
                               int *n_classes) {
    *mean = AMP_MNIST_MEAN;
    *std = AMP_MNIST_STD;
    *n_classes = MNIST_DEFAULT_CLASSES;
    if (!opts) return AMP_OK;
    if (opts->std != 0.0f) {
        if (!(opts->std > 0.0f) || !isfinite(opts->std) || !isfinite(opts->mean))
            return amp_fail(AMP_ERR_INVALID_ARG,
                            "amp_mnist_opts: std %g must be finite and > 0 (mean %g finite)",
                            (double)opts->std, (double)opts->mean);
        *mean = opts->mean;
        *std = opts->std;
    }
    if (opts->n_classes != 0) {
        if (opts->n_classes < 1 || opts->n_classes > MNIST_MAX_CLASSES)
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_mnist_opts: n_classes %d not in 1..%d",
                            opts->n_classes, MNIST_MAX_CLASSES);
        *n_classes = opts->n_classes;
    }
    return AMP_OK;
}

static amp_status dataset_alloc(int64_t n, const int64_t shape[3], int n_classes,
                                amp_dataset **out) {
    amp_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return amp_fail(AMP_ERR_OOM, "amp_dataset: cannot allocate the handle");
    ds->n = n;
    ds->n_classes = n_classes;
    ds->sample_ndim = 3;
    ds->sample_numel = shape[0] * shape[1] * shape[2];
    memcpy(ds->sample_shape, shape, sizeof ds->sample_shape);
    size_t numel = (size_t)n * (size_t)ds->sample_numel;
    ds->x = malloc(numel * sizeof(float));
    ds->y = malloc((size_t)n * sizeof(int32_t));
    if (!ds->x || !ds->y) {
        amp_dataset_free(ds);
        return amp_fail(AMP_ERR_OOM, "amp_dataset: cannot allocate %zu bytes for %lld samples",
                        numel * sizeof(float), (long long)n);
    }
    *out = ds;
    return AMP_OK;
}

amp_status amp_dataset_load_idx(const char *images_path, const char *labels_path,
                                const amp_mnist_opts *opts, amp_dataset **out) {
    AMP_CHECK_ARG(images_path);
    AMP_CHECK_ARG(labels_path);
    AMP_CHECK_ARG(out);
    *out = NULL;
    float mean, std;
    int n_classes;
    AMP_TRY(resolve_opts(opts, &mean, &std, &n_classes));

    amp_idx images, labels = {0};
    AMP_TRY(amp_idx_read(images_path, 3, &images));
    amp_status s = amp_idx_read(labels_path, 1, &labels);
    if (s == AMP_OK && labels.dims[0] != images.dims[0])
        s = amp_fail(AMP_ERR_FORMAT, "'%s' holds %lld images but '%s' holds %lld labels",
                     images_path, (long long)images.dims[0], labels_path,
                     (long long)labels.dims[0]);
    for (int64_t i = 0; s == AMP_OK && i < labels.numel; i++)
        if (labels.data[i] >= n_classes)
            s = amp_fail(AMP_ERR_FORMAT, "'%s': label %d at index %lld is not below n_classes %d",
                         labels_path, labels.data[i], (long long)i, n_classes);

    amp_dataset *ds = NULL;
    if (s == AMP_OK)
        s = dataset_alloc(images.dims[0], (const int64_t[3]){1, images.dims[1], images.dims[2]},
                          n_classes, &ds);
    if (s == AMP_OK) {
        /* torchvision: ToTensor divides by 255 in f32, Normalize then subtracts and divides in
         * f32; a table of the 256 results gives the same bits at a lookup per pixel. */
        float table[256];
        for (int v = 0; v < 256; v++) table[v] = ((float)v / 255.0f - mean) / std;
        for (int64_t i = 0; i < images.numel; i++) ds->x[i] = table[images.data[i]];
        for (int64_t i = 0; i < ds->n; i++) ds->y[i] = labels.data[i];
        *out = ds;
    }
    amp_idx_free(&images);
    amp_idx_free(&labels);
    return s;
}

/* dir/name.gz, or dir/name when only the unpacked file exists; NULL when out of memory. */
static char *mnist_path(const char *dir, const char *name) {
    size_t size = strlen(dir) + strlen(name) + 8;
    char *path = malloc(size);
    if (!path) return NULL;
    snprintf(path, size, "%s/%s.gz", dir, name);
    if (access(path, F_OK) != 0) {
        snprintf(path, size, "%s/%s", dir, name);
        if (access(path, F_OK) != 0) snprintf(path, size, "%s/%s.gz", dir, name);
    }
    return path;
}

amp_status amp_mnist_load_ex(const char *dir, bool train, const amp_mnist_opts *opts,
                             amp_dataset **out) {
    AMP_CHECK_ARG(dir);
    AMP_CHECK_ARG(out);
    *out = NULL;
    const char *split = train ? "train" : "t10k";
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", split);
    char *images = mnist_path(dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", split);
    char *labels = mnist_path(dir, name);
    amp_status s = images && labels ? amp_dataset_load_idx(images, labels, opts, out)
                                    : amp_fail(AMP_ERR_OOM, "amp_mnist_load: out of memory");
    free(images);
    free(labels);
    return s;
}

amp_status amp_mnist_load(const char *dir, bool train, amp_dataset **out) {
    return amp_mnist_load_ex(dir, train, NULL, out);
}

amp_status amp_dataset_create(int64_t n, const int64_t sample_shape[3], const float *x,
                              const int32_t *y, int n_classes, amp_dataset **out) {
    AMP_CHECK_ARG(sample_shape);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(y);
    AMP_CHECK_ARG(out);
    *out = NULL;
    if (n < 1) return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_create: n %lld < 1", (long long)n);
    if (n_classes < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_create: n_classes %d < 1", n_classes);
    int64_t numel = n;
    for (int d = 0; d < 3; d++) {
        if (sample_shape[d] < 1 || numel > AMP_IDX_MAX_NUMEL / sample_shape[d])
            return amp_fail(AMP_ERR_INVALID_ARG,
                            "amp_dataset_create: sample_shape[%d] = %lld is < 1 or too large", d,
                            (long long)sample_shape[d]);
        numel *= sample_shape[d];
    }
    for (int64_t i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= n_classes)
            return amp_fail(AMP_ERR_INVALID_ARG,
                            "amp_dataset_create: label y[%lld] = %d not in [0, %d)", (long long)i,
                            (int)y[i], n_classes);
    amp_dataset *ds;
    AMP_TRY(dataset_alloc(n, sample_shape, n_classes, &ds));
    memcpy(ds->x, x, (size_t)numel * sizeof(float));
    memcpy(ds->y, y, (size_t)n * sizeof(int32_t));
    *out = ds;
    return AMP_OK;
}

/* The element count of [n, shape[0..ndim)] into *numel, or an error naming `what`. */
static amp_status array_numel(const char *what, int64_t n, int ndim, const int64_t shape[3],
                              int64_t *numel) {
    if (ndim < 0 || ndim > 3)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_from_arrays: %s_ndim %d: want 0..3 "
                        "dimensions per sample", what, ndim);
    *numel = n;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || *numel > AMP_IDX_MAX_NUMEL / shape[d])
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_from_arrays: %s_shape[%d] = %lld "
                            "is < 1 or too large", what, d, (long long)shape[d]);
        *numel *= shape[d];
    }
    return AMP_OK;
}

amp_status amp_dataset_from_arrays(const amp_dataset_desc *d, amp_dataset **out) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(out);
    AMP_CHECK_ARG(d->x);
    *out = NULL;
    if (d->n < 1)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_from_arrays: n %lld < 1", (long long)d->n);
    if (!d->labels == !d->y)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_from_arrays: give the targets as "
                        "exactly one of labels (class ids) and y (f32 values); %s",
                        d->labels ? "both are set" : "neither is set");
    int64_t x_numel = 0, t_numel = d->n;
    AMP_TRY(array_numel("x", d->n, d->x_ndim, d->x_shape, &x_numel));
    if (d->y) AMP_TRY(array_numel("y", d->n, d->y_ndim, d->y_shape, &t_numel));
    if (d->labels) {
        if (d->n_classes < 1)
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_from_arrays: n_classes %d < 1 with "
                            "labels", d->n_classes);
        for (int64_t i = 0; i < d->n; i++)
            if (d->labels[i] < 0 || d->labels[i] >= d->n_classes)
                return amp_fail(AMP_ERR_INVALID_ARG, "amp_dataset_from_arrays: labels[%lld] = %d "
                                "not in [0, %d)", (long long)i, (int)d->labels[i], d->n_classes);
    }
    amp_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return amp_fail(AMP_ERR_OOM, "amp_dataset_from_arrays: cannot allocate the handle");
    ds->n = d->n;
    ds->sample_ndim = d->x_ndim;
    ds->sample_numel = x_numel / d->n;
    for (int k = 0; k < 3; k++) {
        ds->sample_shape[k] = k < d->x_ndim ? d->x_shape[k] : 1;
        ds->target_shape[k] = d->y && k < d->y_ndim ? d->y_shape[k] : 1;
    }
    ds->x = malloc((size_t)x_numel * sizeof(float));
    if (d->labels) {
        ds->n_classes = d->n_classes;
        ds->y = malloc((size_t)d->n * sizeof(int32_t));
    } else {
        ds->target_ndim = d->y_ndim;
        ds->target_numel = t_numel / d->n;
        ds->t = malloc((size_t)t_numel * sizeof(float));
    }
    if (!ds->x || (!ds->y && !ds->t)) {
        amp_dataset_free(ds);
        return amp_fail(AMP_ERR_OOM, "amp_dataset_from_arrays: cannot copy %lld samples",
                        (long long)d->n);
    }
    memcpy(ds->x, d->x, (size_t)x_numel * sizeof(float));
    if (ds->y) memcpy(ds->y, d->labels, (size_t)d->n * sizeof(int32_t));
    else memcpy(ds->t, d->y, (size_t)t_numel * sizeof(float));
    *out = ds;
    return AMP_OK;
}

void amp_dataset_free(amp_dataset *ds) {
    if (!ds) return;
    free(ds->x);
    free(ds->y);
    free(ds->t);
    free(ds);
}

int64_t amp_dataset_n(const amp_dataset *ds) { return ds ? ds->n : 0; }

void amp_dataset_sample_shape(const amp_dataset *ds, int64_t shape[3]) {
    for (int d = 0; d < 3; d++) shape[d] = ds ? ds->sample_shape[d] : 0;
}

int64_t amp_dataset_sample_numel(const amp_dataset *ds) { return ds ? ds->sample_numel : 0; }
int amp_dataset_n_classes(const amp_dataset *ds) { return ds ? ds->n_classes : 0; }
int amp_dataset_sample_ndim(const amp_dataset *ds) { return ds ? ds->sample_ndim : 0; }
const float *amp_dataset_images(const amp_dataset *ds) { return ds ? ds->x : NULL; }
const int32_t *amp_dataset_labels(const amp_dataset *ds) { return ds ? ds->y : NULL; }
const float *amp_dataset_targets(const amp_dataset *ds) { return ds ? ds->t : NULL; }

int amp_dataset_target_shape(const amp_dataset *ds, int64_t shape[3]) {
    for (int d = 0; d < 3; d++) shape[d] = ds ? ds->target_shape[d] : 0;
    return ds ? ds->target_ndim : 0;
}

int64_t amp_dataset_target_numel(const amp_dataset *ds) {
    return ds && ds->t ? ds->target_numel : 0;
}
