/* libamp status codes and error messages.
 *
 * Every library call returns amp_status. AMP_OK is 0, errors are negative. The message of the
 * last failure on the calling thread is amp_last_error(); it names the culprit (argument, shape,
 * dtype, file) and stays valid until the next failing call on that thread. */
#ifndef AMP_STATUS_H
#define AMP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum amp_status {
    AMP_OK = 0,
    AMP_ERR_INVALID_ARG = -1, /* NULL pointer, out-of-range option, unknown name */
    AMP_ERR_SHAPE = -2,       /* shapes that do not fit the op */
    AMP_ERR_DTYPE = -3,       /* dtype the op does not take */
    AMP_ERR_OOM = -4,         /* host or device allocation failed */
    AMP_ERR_IO = -5,          /* a file could not be opened, read or written */
    AMP_ERR_FORMAT = -6,      /* a file's content is corrupt or truncated */
    AMP_ERR_UNSUPPORTED = -7, /* the backend has no kernel for this op/dtype */
    AMP_ERR_BACKEND = -8,     /* a foreign library (CUDA, cuBLASLt, oneDNN, ...) failed */
    AMP_ERR_STATE = -9,       /* the call does not fit the object's state (e.g. backward twice) */
    AMP_ERR_NO_DEVICE = -10,  /* no usable GPU */
} amp_status;

/* Short fixed text for a status ("invalid argument", ...). Never NULL. */
const char *amp_status_str(amp_status s);

/* Message of the last failure on this thread; "" when none. Never NULL. */
const char *amp_last_error(void);

/* Records the printf-style message as this thread's amp_last_error() and returns s: for user
 * code of the library's callbacks (a model's forward) that refuses its input, so that the caller
 * learns why, as from the library's own errors. */
amp_status amp_error(amp_status s, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
        ;

#ifdef __cplusplus
}
#endif
#endif
