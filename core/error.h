/* Internal error helpers: set the thread's message and return the status in one expression. */
#ifndef AMP_CORE_ERROR_H
#define AMP_CORE_ERROR_H

#include "amp/status.h"

#if defined(__GNUC__)
#define AMP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define AMP_PRINTF(f, a)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Records "fmt..." as amp_last_error() and returns s. */
amp_status amp_fail(amp_status s, const char *fmt, ...) AMP_PRINTF(2, 3);
/* Prefixes the current message with "context: " and returns s (for errors passed upward). */
amp_status amp_fail_context(amp_status s, const char *fmt, ...) AMP_PRINTF(2, 3);
/* Takes a kernel's error as the public call's own: the message's leading "name: " (the kernel
 * or backend entry that failed, a name the user never called) becomes "who: "; a message with
 * no such name is prefixed. Returns s; AMP_OK passes through untouched. */
amp_status amp_fail_as(amp_status s, const char *who);

#ifdef __cplusplus
}
#endif

/* Propagates a non-OK status. */
#define AMP_TRY(expr)                                                                              \
    do {                                                                                           \
        amp_status amp_try_s_ = (expr);                                                            \
        if (amp_try_s_ != AMP_OK) return amp_try_s_;                                               \
    } while (0)

/* Fails with AMP_ERR_INVALID_ARG naming the argument when it is NULL. */
#define AMP_CHECK_ARG(p)                                                                           \
    do {                                                                                           \
        if (!(p)) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument '%s' is NULL", __func__, #p); \
    } while (0)

/* The same for a call that returns a value rather than a status (an accessor): returns `value`
 * and leaves the message in amp_last_error. */
#define AMP_CHECK_ARG_OR(p, value)                                                                 \
    do {                                                                                           \
        if (!(p)) {                                                                                \
            (void)amp_fail(AMP_ERR_INVALID_ARG, "%s: argument '%s' is NULL", __func__, #p);        \
            return value;                                                                          \
        }                                                                                          \
    } while (0)

#endif
