/* Switches read from the environment (AMP_TRACE, AMP_CUDA_SYNC_DEBUG, AMP_CUDA_NO_CACHING). */
#ifndef AMP_CORE_ENV_H
#define AMP_CORE_ENV_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Whether `name` is set to anything but "" or "0" (PyTorch's reading of its own switches). */
static inline bool amp_env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

#endif
