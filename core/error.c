/* Thread-local error message behind amp_last_error(). */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

#define AMP_ERROR_MSG_MAX 1024

static _Thread_local char amp_error_msg[AMP_ERROR_MSG_MAX];

const char *amp_status_str(amp_status s) {
    switch (s) {
    case AMP_OK: return "ok";
    case AMP_ERR_INVALID_ARG: return "invalid argument";
    case AMP_ERR_SHAPE: return "shape mismatch";
    case AMP_ERR_DTYPE: return "wrong dtype";
    case AMP_ERR_OOM: return "out of memory";
    case AMP_ERR_IO: return "i/o error";
    case AMP_ERR_FORMAT: return "corrupt or truncated data";
    case AMP_ERR_UNSUPPORTED: return "unsupported";
    case AMP_ERR_BACKEND: return "backend library failure";
    case AMP_ERR_STATE: return "invalid state";
    case AMP_ERR_NO_DEVICE: return "no device";
    }
    return "unknown status";
}

const char *amp_last_error(void) { return amp_error_msg; }

/* The message of amp_fail and of the public amp_error (the same thing, for user code). */
static amp_status record(amp_status s, const char *fmt, va_list ap) {
    vsnprintf(amp_error_msg, sizeof amp_error_msg, fmt, ap);
    return s;
}

amp_status amp_fail(amp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(s, fmt, ap);
    va_end(ap);
    return s;
}

amp_status amp_error(amp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(s, fmt, ap);
    va_end(ap);
    return s;
}

amp_status amp_fail_context(amp_status s, const char *fmt, ...) {
    char prev[AMP_ERROR_MSG_MAX], ctx[AMP_ERROR_MSG_MAX];
    memcpy(prev, amp_error_msg, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    /* Truncation of an over-long message is acceptable: build it piecewise. */
    size_t n = strnlen(ctx, sizeof ctx - 1);
    memcpy(amp_error_msg, ctx, n);
    size_t room = sizeof amp_error_msg - n;
    if (room > 2) {
        memcpy(amp_error_msg + n, ": ", 2);
        size_t m = strnlen(prev, room - 3);
        memcpy(amp_error_msg + n + 2, prev, m);
        amp_error_msg[n + 2 + m] = '\0';
    } else {
        amp_error_msg[n] = '\0';
    }
    return s;
}

amp_status amp_fail_as(amp_status s, const char *who) {
    if (s == AMP_OK) return s;
    const char *m = amp_error_msg, *p = m;
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    if (p == m || strncmp(p, ": ", 2) != 0) return amp_fail_context(s, "%s", who);
    memmove(amp_error_msg, p + 2, strlen(p + 2) + 1); /* drop "name: " */
    return amp_fail_context(s, "%s", who);
}
