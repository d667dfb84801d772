/* oneDNN glue shared by the CPU GEMM and convolution kernels (gemm.c, conv.c).
 *
 *  - One CPU engine for the process, made on first use (pthread_once); one stream per calling
 *    thread, because oneDNN does not promise that a stream may be shared between threads.
 *  - A per-thread scratch arena for oneDNN scratchpads (user-managed, so two threads running the
 *    same primitive never share one) and for the blocked copies made by reorders.
 *  - A cache of built plans (primitives and what they need at run time), keyed by the bytes of a
 *    descriptor: building a oneDNN primitive takes far longer than running a small one.
 *  - Widening to f32 for dtype combinations oneDNN has no kernel for on this CPU (f16, which
 *    oneDNN 2.6 never runs on a CPU; mixed dtypes): fp16 on the CPU is storage (DESIGN.md).
 * Every function returns amp_status and sets amp_last_error on failure. */
#ifndef AMP_KERNELS_CPU_DNNL_UTIL_H
#define AMP_KERNELS_CPU_DNNL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>

#include "amp/tensor.h"
#include "core/error.h"

/* The checking macro for oneDNN calls: a status other than dnnl_success returns AMP_ERR_BACKEND
 * from the enclosing function, with the call's text, oneDNN's status name and the function. */
#define AMP_DNNL_TRY(call)                                                                         \
    do {                                                                                           \
        dnnl_status_t amp_dnnl_s_ = (call);                                                        \
        if (amp_dnnl_s_ != dnnl_success) return amp_dnnl_fail(amp_dnnl_s_, #call, __func__);      \
    } while (0)

/* Records "func: oneDNN call `text` failed: <status>" and returns AMP_ERR_BACKEND. */
amp_status amp_dnnl_fail(dnnl_status_t s, const char *text, const char *func);

/* The process's CPU engine (created once, never destroyed). */
amp_status amp_dnnl_engine(dnnl_engine_t *out);
/* The calling thread's stream on that engine (destroyed when the thread exits). */
amp_status amp_dnnl_stream(dnnl_stream_t *out);

/* The calling thread's buffers, kept from call to call (a fresh multi-MiB malloc per call costs
 * a page fault per 4 KiB): SCRATCH for oneDNN scratchpads, reorder buffers and the GEMM's padded
 * B; WIDEN for the f32 copies of operands oneDNN has no kernel for, which hold while the f32
 * GEMM or convolution, with its own scratch, runs on them. No context's ledger records them (they
 * belong to the thread, whichever context calls); they count as the CPU backend's memory in use,
 * so amp/memory.h reports them as WORKSPACE, as it does cuBLASLt's workspace on CUDA. */
typedef enum amp_dnnl_arena_id { AMP_DNNL_ARENA_SCRATCH, AMP_DNNL_ARENA_WIDEN, AMP_DNNL_ARENAS } amp_dnnl_arena_id;

/* A 64-byte aligned buffer of at least nbytes from the thread's arena `id`; it stays valid until
 * the thread's next request of that arena. */
amp_status amp_dnnl_arena(amp_dnnl_arena_id id, size_t nbytes, void **out);
/* Frees the calling thread's arenas and its OpenMP team's (the backend's memory_trim): the next
 * request allocates. */
void amp_dnnl_arenas_release(void);
/* amp_dnnl_arena(AMP_DNNL_ARENA_SCRATCH, ...). */
amp_status amp_dnnl_scratch(size_t nbytes, void **out);

/* The thread count oneDNN will use (OpenMP's). Plans are keyed by it: oneDNN fixes its work
 * split when a primitive is built, and results may change with the thread count. */
int amp_dnnl_threads(void);

/* oneDNN data type of a float storage dtype; AMP_ERR_UNSUPPORTED naming `what` for i32. */
amp_status amp_dnnl_dtype(amp_dtype dt, const char *what, dnnl_data_type_t *out);

/* ---- plan cache ----------------------------------------------------------------------------- */

/* Builds the plan for `key` (the bytes given to amp_dnnl_cache_get). */
typedef amp_status (*amp_dnnl_build_fn)(const void *key, void **plan);
typedef void (*amp_dnnl_destroy_fn)(void *plan);

typedef struct amp_dnnl_cache_ref amp_dnnl_cache_ref;

/* Number of plans kept; the least recently used one is dropped when a new one needs room. */
#define AMP_DNNL_CACHE_CAPACITY 64

/* Looks up the plan built by `build` for the key bytes (zero the key struct before filling it:
 * padding is compared too) and builds it on a miss. The plan stays alive while the reference is
 * held, even if the cache drops it meanwhile; give it back with amp_dnnl_cache_put. */
amp_status amp_dnnl_cache_get(const void *key, size_t key_nbytes, amp_dnnl_build_fn build,
                              amp_dnnl_destroy_fn destroy, void **plan, amp_dnnl_cache_ref **ref);
void amp_dnnl_cache_put(amp_dnnl_cache_ref *ref); /* NULL is a no-op */
/* Plans now held by the cache (for tests). */
int amp_dnnl_cache_size(void);

/* ---- memory objects of one execution -------------------------------------------------------- */

#define AMP_DNNL_MAX_MEMS 12

/* The memory objects one kernel call wraps around its pointers, destroyed together. */
typedef struct amp_dnnl_mems {
    dnnl_memory_t m[AMP_DNNL_MAX_MEMS];
    int n;
} amp_dnnl_mems;

/* Wraps `data` (not owned) in a memory object of descriptor md, kept in mems. */
amp_status amp_dnnl_mem(amp_dnnl_mems *mems, const dnnl_memory_desc_t *md, const void *data,
                        dnnl_memory_t *out);
void amp_dnnl_mems_free(amp_dnnl_mems *mems);

/* Runs one primitive on the thread's stream. */
amp_status amp_dnnl_execute(dnnl_primitive_t p, int n_args, const dnnl_exec_arg_t *args);
/* Waits for the thread's stream. */
amp_status amp_dnnl_wait(void);

/* Builds a primitive from an operation descriptor with a user-managed scratchpad. On success
 * *pd holds the primitive descriptor (the caller destroys it). dnnl_unimplemented is returned as
 * AMP_ERR_UNSUPPORTED so callers may fall back; other failures as AMP_ERR_BACKEND. */
/* Whether oneDNN chose its reference loops (impl "ref:any", "ref_..."), which it does for half
 * dtypes where the CPU has no instruction for them (bf16 convolutions without AVX512-BF16): the
 * callers widen to f32 instead, many times faster. */
bool amp_dnnl_pd_is_reference(const_dnnl_primitive_desc_t pd);
amp_status amp_dnnl_pd_create(const void *op_desc, const_dnnl_primitive_attr_t attr,
                              const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd);
/* A new attribute object with the scratchpad mode set to user. */
amp_status amp_dnnl_attr_create(dnnl_primitive_attr_t *attr);

/* ---- widening -------------------------------------------------------------------------------- */

/* Copies a rows x cols matrix of dtype dt with leading dimension ld into dst, whose leading
 * dimension is dst_ld (>= cols). Exact: every f16/bf16 value is an f32 value. */
void amp_dnnl_widen(float *dst, int64_t dst_ld, const void *src, amp_dtype dt, int64_t rows,
                    int64_t cols, int64_t ld);
/* Bytes an n-value f32 copy takes in an arena, rounded up to 64 so the next one stays aligned. */
size_t amp_dnnl_f32_nbytes(int64_t n);
/* Stores a dense f32 rows x cols matrix into dst (dtype dt, leading dimension ld), rounding to
 * nearest even as every other CPU kernel does. */
void amp_dnnl_narrow(void *dst, amp_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                     const float *src);

#endif
