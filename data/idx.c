/* IDX reading through zlib. gzread passes an uncompressed file through unchanged, so one path
 * reads both the .gz files as distributed and the unpacked ones many download scripts leave. */
#define _POSIX_C_SOURCE 200809L

#include "data/idx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error.h"

/* Bytes asked of gzread at once (it takes an unsigned and returns an int), and the first size of
 * the data buffer, which then doubles up to the header's size as data actually arrives. */
#define IDX_READ_CHUNK ((size_t)1 << 20)
#define IDX_GZ_BUFFER (128u * 1024u)

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* zlib prefixes its messages (for Z_ERRNO: strerror of the failed read) with the name given to gzdopen ("<fd:3>: "); the path is ours to add. */
static const char *gz_message(const char *msg) {
    if (msg && strncmp(msg, "<fd:", 4) == 0) {
        const char *colon = strstr(msg, ": ");
        if (colon) return colon + 2;
    }
    return msg ? msg : "unknown zlib error";
}

/* Turns zlib's error state into ours; AMP_OK when there is none. */
static amp_status gz_check(gzFile f, const char *path) {
    int errnum = Z_OK;
    const char *msg = gzerror(f, &errnum);
    if (errnum == Z_OK) return AMP_OK;
    if (errnum == Z_ERRNO)
        return amp_fail(AMP_ERR_IO, "cannot read '%s': %s", path, gz_message(msg));
    if (errnum == Z_MEM_ERROR) return amp_fail(AMP_ERR_OOM, "'%s': zlib is out of memory", path);
    if (errnum == Z_BUF_ERROR)
        return amp_fail(AMP_ERR_FORMAT, "'%s': truncated gzip stream (%s)", path, gz_message(msg));
    return amp_fail(AMP_ERR_FORMAT, "'%s': corrupt gzip stream (%s)", path, gz_message(msg));
}

/* Reads up to `want` bytes; *got < want only where the data ends. */
static amp_status read_upto(gzFile f, const char *path, uint8_t *buf, size_t want, size_t *got) {
    *got = 0;
    while (*got < want) {
        size_t chunk = want - *got < IDX_READ_CHUNK ? want - *got : IDX_READ_CHUNK;
        int r = gzread(f, buf + *got, (unsigned)chunk);
        AMP_TRY(gz_check(f, path));
        if (r < 0) return amp_fail(AMP_ERR_IO, "cannot read '%s': gzread failed", path);
        if (r == 0) break;
        *got += (size_t)r;
    }
    return AMP_OK;
}

void amp_idx_dims_str(const amp_idx *idx, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < idx->ndim && used < size; d++) {
        int w = snprintf(buf + used, size - used, d ? " x %lld" : "%lld", (long long)idx->dims[d]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

static amp_status read_header(gzFile f, const char *path, int ndim, amp_idx *out) {
    uint8_t hdr[4 * (1 + AMP_IDX_MAX_DIMS)];
    size_t want = 4 * (size_t)(1 + ndim), got;
    AMP_TRY(read_upto(f, path, hdr, 4, &got));
    if (got < 4)
        return amp_fail(AMP_ERR_FORMAT, "'%s': truncated IDX header (%zu of %zu bytes)", path, got,
                        want);
    uint32_t magic = be32(hdr), want_magic = 0x800u | (uint32_t)ndim;
    if (magic != want_magic) {
        const char *hint = "";
        if (magic == 0x801u || magic == 0x803u) hint = " (images and labels swapped?)";
        else if ((magic >> 8) == 0x08u) hint = " (wrong number of dimensions)";
        else if ((magic >> 16) == 0u) hint = " (only unsigned-byte IDX data, type 0x08, is read)";
        else hint = " (not an IDX file)";
        return amp_fail(AMP_ERR_FORMAT, "'%s': wrong magic 0x%08X, want 0x%08X%s", path,
                        (unsigned)magic, (unsigned)want_magic, hint);
    }
    AMP_TRY(read_upto(f, path, hdr + 4, want - 4, &got));
    if (got < want - 4)
        return amp_fail(AMP_ERR_FORMAT, "'%s': truncated IDX header (%zu of %zu bytes)", path,
                        4 + got, want);
    out->ndim = ndim;
    out->numel = 1;
    for (int d = 0; d < ndim; d++) {
        uint32_t size = be32(hdr + 4 * (1 + d));
        if (size == 0)
            return amp_fail(AMP_ERR_FORMAT, "'%s': IDX dimension %d is 0", path, d);
        out->dims[d] = size;
        /* Checked before multiplying: numel <= 2^40 and size < 2^32 keep the product in int64. */
        if (out->numel > AMP_IDX_MAX_NUMEL / (int64_t)size) {
            char dims[96];
            out->ndim = d + 1;
            amp_idx_dims_str(out, dims, sizeof dims);
            return amp_fail(AMP_ERR_FORMAT, "'%s': IDX dims %s%s exceed %lld elements", path, dims,
                            d + 1 < ndim ? " x ..." : "", (long long)AMP_IDX_MAX_NUMEL);
        }
        out->numel *= size;
    }
    return AMP_OK;
}

static amp_status read_data(gzFile f, const char *path, amp_idx *out) {
    size_t numel = (size_t)out->numel, have = 0;
    size_t cap = numel < IDX_READ_CHUNK ? numel : IDX_READ_CHUNK;
    out->data = malloc(cap);
    if (!out->data) return amp_fail(AMP_ERR_OOM, "'%s': cannot allocate %zu bytes", path, cap);
    for (;;) {
        size_t got;
        AMP_TRY(read_upto(f, path, out->data + have, cap - have, &got));
        have += got;
        if (have < cap || cap == numel) break;
        size_t next = cap * 2 < numel ? cap * 2 : numel;
        uint8_t *grown = realloc(out->data, next);
        if (!grown) return amp_fail(AMP_ERR_OOM, "'%s': cannot allocate %zu bytes", path, next);
        out->data = grown;
        cap = next;
    }
    char dims[96];
    amp_idx_dims_str(out, dims, sizeof dims);
    if (have < numel)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': truncated: the header's dims %s need %zu data bytes, found %zu", path,
                        dims, numel, have);
    uint8_t extra;
    size_t got;
    AMP_TRY(read_upto(f, path, &extra, 1, &got));
    if (got)
        return amp_fail(AMP_ERR_FORMAT,
                        "'%s': trailing bytes after the %zu data bytes of the header's dims %s",
                        path, numel, dims);
    return AMP_OK;
}

amp_status amp_idx_read(const char *path, int ndim, amp_idx *out) {
    AMP_CHECK_ARG(path);
    AMP_CHECK_ARG(out);
    memset(out, 0, sizeof *out);
    if (ndim < 1 || ndim > AMP_IDX_MAX_DIMS)
        return amp_fail(AMP_ERR_INVALID_ARG, "amp_idx_read: ndim %d not in 1..%d", ndim,
                        AMP_IDX_MAX_DIMS);
    /* open() rather than gzopen() so errno is exactly the system's reason. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return amp_fail(AMP_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return amp_fail(AMP_ERR_OOM, "'%s': cannot allocate a zlib reader", path);
    }
    gzbuffer(f, IDX_GZ_BUFFER);
    amp_status s = read_header(f, path, ndim, out);
    if (s == AMP_OK) s = read_data(f, path, out);
    gzclose_r(f);
    if (s != AMP_OK) amp_idx_free(out);
    return s;
}

void amp_idx_free(amp_idx *idx) {
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}
