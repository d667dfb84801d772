/* Reader for IDX files (the MNIST / Fashion-MNIST container, http://yann.lecun.com/exdb/mnist/):
 * a big-endian header (magic 0x000008DD for unsigned bytes in DD dimensions, then DD u32 sizes)
 * followed by the bytes, row-major. Files may be gzipped or not (zlib reads both). */
#ifndef AMP_DATA_IDX_H
#define AMP_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "amp/status.h"

#define AMP_IDX_MAX_DIMS 3
/* Largest element count accepted from a header: it keeps the f32 copy (4 bytes each) and every
 * size computed from it far from overflow; 2^40 bytes is beyond any dataset held in memory. */
#define AMP_IDX_MAX_NUMEL ((int64_t)1 << 40)

typedef struct amp_idx {
    int ndim;
    int64_t dims[AMP_IDX_MAX_DIMS];
    int64_t numel;
    uint8_t *data; /* numel bytes (malloc), freed by amp_idx_free */
} amp_idx;

/* Reads an unsigned-byte IDX file with exactly `ndim` (1..3) dimensions into *out.
 * AMP_ERR_IO: cannot open or read (message: path and strerror). AMP_ERR_FORMAT (message: path and
 * what is wrong): wrong magic, a zero or oversized dimension, data shorter or longer than the
 * header's dims, corrupt or truncated gzip stream. Memory grows with the data actually read, so
 * a corrupt header cannot trigger a huge allocation. On failure *out is left empty. */
amp_status amp_idx_read(const char *path, int ndim, amp_idx *out);
void amp_idx_free(amp_idx *idx); /* frees the data and empties *idx; NULL is a no-op */

/* "60000 x 28 x 28" into buf (for messages). */
void amp_idx_dims_str(const amp_idx *idx, char *buf, size_t size);

#endif
