/* One-line log messages on stderr, prefixed "libamp: ". AMP_LOG_LEVEL=error|warn|info|debug
 * (default info) filters them. */
#ifndef AMP_CORE_LOG_H
#define AMP_CORE_LOG_H

#include "core/error.h"

typedef enum amp_log_level { AMP_LOG_ERROR, AMP_LOG_WARN, AMP_LOG_INFO, AMP_LOG_DEBUG } amp_log_level;

#ifdef __cplusplus
extern "C" {
#endif
void amp_log_msg(amp_log_level level, const char *fmt, ...) AMP_PRINTF(2, 3);
#ifdef __cplusplus
}
#endif

#endif
