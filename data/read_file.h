/* A whole file in host memory: the token streams and the tokenizer read their files this way. */
#ifndef AMP_DATA_READ_FILE_H
#define AMP_DATA_READ_FILE_H

#include <stddef.h>

#include "amp/status.h"

/* *buf (malloc'd, the caller frees) holds the file's *len bytes; AMP_ERR_IO or AMP_ERR_OOM
 * naming `who` and the path, nothing allocated, when it cannot. */
amp_status amp_read_file(const char *who, const char *path, unsigned char **buf, size_t *len);

#endif
