/* Which entries of a backend's table are missing: AMP_DEVICE_AUTO picks a backend only when it
 * has every entry (so no op a model needs can fail later for want of a kernel), and the op table
 * test reports each missing entry by name. */
#include <stddef.h>
#include <string.h>

#include "core/backend.h"

/* The coll_* entries are not listed: the CPU backend has none by design (its memory is host
 * memory, which parallel/ gives MPI), so they cannot be what makes a backend complete. */
#define AMP_ENTRY(name) {#name, offsetof(amp_backend, name)}

static const struct {
    const char *name;
    size_t offset;
} amp_backend_entries[] = {
    AMP_ENTRY(supports), AMP_ENTRY(alloc), AMP_ENTRY(free), AMP_ENTRY(memset_zero),
    AMP_ENTRY(copy), AMP_ENTRY(copy_to_host), AMP_ENTRY(copy_from_host), AMP_ENTRY(sync),
    AMP_ENTRY(upload_async), AMP_ENTRY(mark), AMP_ENTRY(event_free),
    AMP_ENTRY(memory_stats), AMP_ENTRY(memory_reset_peak), AMP_ENTRY(system_allocs), AMP_ENTRY(cast), AMP_ENTRY(fill),
    AMP_ENTRY(fill_scalar), AMP_ENTRY(gemm), AMP_ENTRY(conv2d_fwd), AMP_ENTRY(conv2d_bwd_data),
    AMP_ENTRY(conv2d_bwd_weight), AMP_ENTRY(bn_fwd_train), AMP_ENTRY(bn_fwd_eval),
    AMP_ENTRY(bn_bwd), AMP_ENTRY(maxpool_fwd), AMP_ENTRY(maxpool_bwd), AMP_ENTRY(unary),
    AMP_ENTRY(binary), AMP_ENTRY(axpy), AMP_ENTRY(sum), AMP_ENTRY(sum_rows), AMP_ENTRY(xent_fwd),
    AMP_ENTRY(xent_bwd), AMP_ENTRY(mse_fwd), AMP_ENTRY(mse_bwd), AMP_ENTRY(dropout_fwd),
    AMP_ENTRY(dropout_bwd), AMP_ENTRY(sgd_update), AMP_ENTRY(adam_update), AMP_ENTRY(unscale),
    AMP_ENTRY(sum_squares), AMP_ENTRY(nonfinite), AMP_ENTRY(sgd_multi), AMP_ENTRY(adam_multi),
    AMP_ENTRY(lamb_multi), AMP_ENTRY(unscale_multi), AMP_ENTRY(nonfinite_multi),
    AMP_ENTRY(sum_squares_multi), AMP_ENTRY(scaler_seed), AMP_ENTRY(scaler_clip),
    AMP_ENTRY(scaler_update), AMP_ENTRY(bn_channel_sums), AMP_ENTRY(bn_sync_stats),
    AMP_ENTRY(bn_bwd_elemt),
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
