/* Which entries of a backend's table are missing: AMP_DEVICE_AUTO picks a backend only when it
 * has every entry (so no op a model needs can fail later for want of a kernel), and the op table
 * test reports each missing entry by name. */
#include <stddef.h>
#include <string.h>

#include "core/backend.h"

/* The device's entries and the kernels (core/backend_kernels.def). The collectives are not
 * listed: the CPU backend has none by design (its memory is host memory, which parallel/ gives
 * MPI), so they cannot be what makes a backend complete; memory_trim is optional. */
#define AMP_ENTRY(name) {#name, offsetof(amp_backend, name)},

static const struct {
    const char *name;
    size_t offset;
} amp_backend_entries[] = {
    AMP_ENTRY(alloc) AMP_ENTRY(free) AMP_ENTRY(memset_zero) AMP_ENTRY(copy) AMP_ENTRY(copy_to_host)
    AMP_ENTRY(copy_from_host) AMP_ENTRY(sync) AMP_ENTRY(upload_async) AMP_ENTRY(mark)
    AMP_ENTRY(event_free) AMP_ENTRY(memory_stats) AMP_ENTRY(memory_reset_peak)
    AMP_ENTRY(system_allocs)
#define AMP_KERNEL(name, category, flops, check, params, args)                                           \
    {#name, offsetof(amp_backend, k) + offsetof(amp_kernels, name)},
#include "core/backend_kernels.def"
#undef AMP_KERNEL
};

int amp_backend_n_entries(void) {
    return (int)(sizeof amp_backend_entries / sizeof amp_backend_entries[0]);
}

const char *amp_backend_entry_name(int i) {
    return i >= 0 && i < amp_backend_n_entries() ? amp_backend_entries[i].name : NULL;
}

bool amp_backend_has_entry(const amp_backend *be, int i) {
    if (!be || i < 0 || i >= amp_backend_n_entries()) return false;
    void (*fn)(void);
    memcpy(&fn, (const char *)be + amp_backend_entries[i].offset, sizeof fn);
    return fn != NULL;
}

const char *amp_backend_missing_entry(const amp_backend *be) {
    for (int i = 0; i < amp_backend_n_entries(); i++)
        if (!amp_backend_has_entry(be, i)) return amp_backend_entries[i].name;
    return NULL;
}
