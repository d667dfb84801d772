/* The CPU backend's table: the reference backend, always built. GEMM and convolution run through
 * oneDNN; the rest are OpenMP loops over kernels/math. f16 is storage only: every kernel widens to
 * f32, computes, and rounds back. */
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"

/* Every op, LAMB's included, takes the three float dtypes (for the optimizers: the gradient's). */
static bool amp_cpu_supports(amp_be_op op, amp_dtype dt) {
    if (op == AMP_BE_CAST && dt == AMP_I32) return true; /* i32 <-> f32 only */
    return dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16;
}

static amp_status amp_cpu_copy_host(void *dst, const void *src, size_t nbytes) {
    return amp_cpu_copy(dst, src, nbytes);
}

static const amp_backend amp_cpu_backend = {
    .name = "cpu",
    .device = AMP_DEVICE_CPU,
    .supports = amp_cpu_supports,
    .alloc = amp_cpu_alloc,
    .free = amp_cpu_free,
    .memory_stats = amp_cpu_memory_stats,
    .memory_reset_peak = amp_cpu_memory_reset_peak,
    .memory_trim = amp_dnnl_arenas_release,
    .system_allocs = amp_cpu_system_allocs,
    .memset_zero = amp_cpu_memset_zero,
    .copy = amp_cpu_copy,
    .copy_to_host = amp_cpu_copy_host,
    .copy_from_host = amp_cpu_copy_host,
    .sync = amp_cpu_sync,
    .upload_async = amp_cpu_upload_async,
    .mark = amp_cpu_mark,
    .event_free = amp_cpu_event_free,
    .cast = amp_cpu_cast,
    .fill = amp_cpu_fill,
    .fill_scalar = amp_cpu_fill_scalar,
    .gemm = amp_cpu_gemm,
    .conv2d_fwd = amp_cpu_conv2d_fwd,
    .conv2d_bwd_data = amp_cpu_conv2d_bwd_data,
    .conv2d_bwd_weight = amp_cpu_conv2d_bwd_weight,
    .bn_fwd_train = amp_cpu_bn_fwd_train,
    .bn_fwd_eval = amp_cpu_bn_fwd_eval,
    .bn_bwd = amp_cpu_bn_bwd,
    .maxpool_fwd = amp_cpu_maxpool_fwd,
    .maxpool_bwd = amp_cpu_maxpool_bwd,
    .unary = amp_cpu_unary,
    .binary = amp_cpu_binary,
    .axpy = amp_cpu_axpy,
    .sum = amp_cpu_sum,
    .sum_rows = amp_cpu_sum_rows,
    .xent_fwd = amp_cpu_xent_fwd,
    .xent_bwd = amp_cpu_xent_bwd,
    .mse_fwd = amp_cpu_mse_fwd,
    .mse_bwd = amp_cpu_mse_bwd,
    .dropout_fwd = amp_cpu_dropout_fwd,
    .dropout_bwd = amp_cpu_dropout_bwd,
    .sgd_update = amp_cpu_sgd_update,
    .adam_update = amp_cpu_adam_update,
    .unscale = amp_cpu_unscale,
    .sum_squares = amp_cpu_sum_squares,
    .nonfinite = amp_cpu_nonfinite,
    .sgd_multi = amp_cpu_sgd_multi,
    .adam_multi = amp_cpu_adam_multi,
    .lamb_multi = amp_cpu_lamb_multi,
    .unscale_multi = amp_cpu_unscale_multi,
    .nonfinite_multi = amp_cpu_nonfinite_multi,
    .sum_squares_multi = amp_cpu_sum_squares_multi,
    .scaler_seed = amp_cpu_scaler_seed,
    .scaler_clip = amp_cpu_scaler_clip,
    .scaler_update = amp_cpu_scaler_update,
    .bn_channel_sums = amp_cpu_bn_channel_sums,
    .bn_sync_stats = amp_cpu_bn_sync_stats,
    .bn_bwd_elemt = amp_cpu_bn_bwd_elemt,
};

const amp_backend *amp_backend_cpu(void) { return &amp_cpu_backend; }
