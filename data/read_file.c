/* A whole file in host memory (data/read_file.h). */
#include "data/read_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

amp_status amp_read_file(const char *who, const char *path, unsigned char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return amp_fail(AMP_ERR_IO, "%s: cannot open '%s': %s", who, path, strerror(errno));
    amp_status s = AMP_OK;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        s = amp_fail(AMP_ERR_IO, "%s: cannot size '%s'", who, path);
    } else if (!(*buf = malloc(size ? (size_t)size : 1))) {
        s = amp_fail(AMP_ERR_OOM, "%s: '%s': out of host memory for %ld bytes", who, path, size);
    } else if (fread(*buf, 1, (size_t)size, f) != (size_t)size) {
        s = amp_fail(AMP_ERR_IO, "%s: cannot read '%s'", who, path);
        free(*buf);
        *buf = NULL;
    } else {
        *len = (size_t)size;
    }
    fclose(f);
    return s;
}
