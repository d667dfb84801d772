/* Tensor helpers for the library's own layers. */
#ifndef AMP_CORE_TENSOR_INTERNAL_H
#define AMP_CORE_TENSOR_INTERNAL_H

#include "amp/tensor.h"
#include "core/backend.h"
#include "core/profile.h"

/* The tensor behind the public handle (amp/tensor.h). */
struct amp_tensor {
    amp_dtype dtype;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t numel;
    void *data; /* backend memory: host memory on the CPU backend */
    amp_ctx *ctx;
    const struct amp_backend *backend;
    struct amp_tensor *grad; /* gradient, same shape and dtype; NULL until backward reaches it */
    bool requires_grad;
    bool grad_written; /* internal: grad holds a value this step (else the next write overwrites) */
    uint16_t flags;    /* internal: AMP_TENSOR_* ownership bits */
    uint32_t step_gen; /* internal: the context's step a step tensor was made in */
    uint32_t region;   /* internal: the release region of the step it was made in */
    struct amp_tape_node *node; /* internal: tape node that produced it, NULL for leaves */
    uint32_t tape_gen; /* internal: caller-owned: 1 + the tape generation whose node read it */
    /* internal: a step tensor's readers after the forward: the tape nodes whose backward reads
     * its data (amp_record, amp_node_unread) and its views (amp_view_step); amp_tensor_drop
     * gives the data back at once only when there are none. */
    uint32_t data_readers;
    struct amp_tensor *view_of; /* internal: the tensor whose data a view reads (amp_view_step) */
    /* How many times the data was written in place: PyTorch's _version. A reshape shares its
     * base's counter (version points at it); amp_tensor_mark_written is the one place that
     * moves it, and caches of the data (core/cast_shadow.h) compare it. */
    uint64_t version_own;
    uint64_t *version;
};

enum {
    AMP_TENSOR_OWNED = 1, /* struct and data allocated by amp_tensor_create */
    AMP_TENSOR_STEP = 2,  /* struct and data in the step arena */
    AMP_TENSOR_VIEW = 4,  /* heap struct over memory owned by someone else */
    AMP_TENSOR_SHARED = 8, /* a step tensor over a kept cast (core/cast_shadow.h): read-only */
    AMP_TENSOR_PARAM = 16, /* a model's parameter: the only tensors whose casts are kept */
    AMP_TENSOR_KEPT = 32,  /* a step tensor kept past release points (amp_tensor_keep) */
    /* Data made by a backward that releases its graph, given back to the data arena for reuse
     * (amp_tensor_step_release) once nothing reads it: a gradient when its node is done, a
     * temporary when its backward has used it. A kept tensor's gradient never carries it. */
    AMP_TENSOR_BW_TEMP = 64,
    AMP_TENSOR_ARENA_DATA = 128, /* a step tensor whose data is its own (amp_tensor_step) */
    AMP_TENSOR_DROPPED = 256,    /* its caller dropped it (amp_tensor_drop): refused from then on */
};

/* t's data is being written in place (a copy from the host, a load, a broadcast, an optimizer's
 * update, a model cast, an in-place op): its version moves, and with it that of every view
 * sharing its counter, so every cache of the old values knows it is stale. */
static inline void amp_tensor_mark_written(amp_tensor *t) { (*t->version)++; }

/* A step tensor with uninitialised data. */
amp_status amp_tensor_step(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape,
                           amp_tensor **out);
/* t's data back to the data arena for the allocations after it (core/arena.h's spares) when t
 * is a backward's AMP_TENSOR_BW_TEMP, else nothing: the caller says nothing reads it any more;
 * the struct stays (until the step ends) but must not be read. */
void amp_tensor_step_release(amp_tensor *t);
/* amp_tensor_drop without its checks, for a step tensor an op made and hands nobody (the [N, out]
 * result behind linear's [..., out] view): marked dropped, its data given back once nothing reads
 * it; a dropped view that nothing reads stops reading its base, which may then go too. */
void amp_tensor_step_drop(amp_tensor *t);
/* A step tensor of the same shape as `like`, in dtype dt. */
amp_status amp_tensor_step_like(const amp_tensor *like, amp_dtype dt, amp_tensor **out);
/* A step tensor (struct in the step arena) of `like`'s shape in dtype dt over `data`, memory
 * someone else manages (a gradient temporary in the sink arena). */
amp_status amp_tensor_step_over(const amp_tensor *like, amp_dtype dt, void *data,
                                amp_tensor **out);
/* The same over a kept cast that later steps read too: AMP_TENSOR_SHARED, refused by every
 * write. */
amp_status amp_tensor_step_shared(const amp_tensor *like, amp_dtype dt, void *data,
                                  amp_tensor **out);
/* AMP_ERR_STATE naming `who` when t is such a shared tensor (a write to it would change a
 * parameter's kept cast). */
amp_status amp_tensor_check_writable(const char *who, const char *arg, const amp_tensor *t);
/* A heap struct viewing `data` (not owned); freed with amp_tensor_free (data untouched). */
amp_status amp_tensor_view(amp_ctx *ctx, amp_dtype dt, int ndim, const int64_t *shape, void *data,
                           amp_tensor **out);
/* AMP_ERR_STATE naming `who` and `arg` when t is a step tensor of a step that has ended (its
 * memory released by amp_ctx_reset_step); AMP_ERR_INVALID_ARG when t is NULL. */
amp_status amp_tensor_check_live(const char *who, const char *arg, const amp_tensor *t);
/* The layout of one block carved into n views of numel[i] elements of elem_size bytes, each view
 * starting on an `align`-byte boundary: offsets[i] in bytes (may be NULL), returns the total.
 * All in size_t: a block may pass 2 GiB (and 4 GiB) long before a single view does. */
size_t amp_block_layout(const int64_t *numel, int n, size_t elem_size, size_t align,
                        size_t *offsets);
/* Checks 1 <= ndim <= AMP_MAX_DIMS and every extent >= 1; writes the element count. */
amp_status amp_shape_check(const char *who, int ndim, const int64_t *shape, int64_t *numel);
/* "[128, 1, 28, 28]" into buf (for messages). */
const char *amp_shape_str(const amp_tensor *t, char *buf, size_t size);
bool amp_same_shape(const amp_tensor *a, const amp_tensor *b);

/* Calls a kernel of the backend (core/backend_kernels.def) through amp_be_<entry>: the entry's
 * argument check from the list first (an error naming the entry), then the backend's kernel, or
 * AMP_ERR_UNSUPPORTED naming the entry and backend where it has none; while an op profile runs
 * (amp/profile.h), through the entry's counting function (core/profile.h). AMP_DEV is the same
 * for the device's copy, upload_async and mark, which ops call too. */
amp_status amp_backend_missing(const amp_backend *be, const char *entry);
#define AMP_KERNEL(name, category, flops, check, params, args)                                     \
    static inline amp_status amp_be_##name AMP_PREPEND_BE params {                                 \
        amp_status s_ = (check);                                                                   \
        if (s_ != AMP_OK) return s_;                                                               \
        if (amp_profile_on) return amp_prof_##name(be, AMP_UNPAREN args);                          \
        return be->k.name ? be->k.name(be->dev, AMP_UNPAREN args)                                  \
                          : amp_backend_missing(be, #name);                                        \
    }
#include "core/backend_kernels.def"
#undef AMP_KERNEL
#define AMP_BE(be, entry, ...) amp_be_##entry((be), __VA_ARGS__)
#define AMP_DEV(be, entry, ...)                                                                    \
    (amp_profile_on ? amp_prof_##entry((be), __VA_ARGS__)                                          \
     : (be)->entry  ? (be)->entry((be)->dev, __VA_ARGS__)                                          \
                    : amp_backend_missing((be), #entry))

#endif
