/* The loss scaler's passes over a list of tensors on the device: the CUDA side of the table's
 * unscale_multi, nonfinite_multi and sum_squares_multi (core/backend.h), one fused pass per list
 * planned by core/multi_tensor.h and launched by amp_mt_apply (multi_tensor_apply.cuh), as
 * Apex's multi_tensor_scale and multi_tensor_l2norm do.
 *
 * unscale_multi: out[i][j] = grad[i][j] * inv_scale with torch's rule (kernels/math/unscale.h,
 * shared with the CPU and the per-tensor unscale.cu): the INPUT is tested, f16/bf16 are widened
 * exactly first, inv_scale 1 skips the multiply. out[i] is overwritten and may be grad[i] itself
 * when f32 (each element is read and written by the same thread). With scalars->grad_scale the
 * multiplier is read on the device when the kernel runs (the sync-free step); scalars->found_inf
 * is not read: this pass is what raises the flag. A block that saw an inf/NaN (__syncthreads_or)
 * stores 1.0f into *found_inf from one thread; several blocks may store at the same time, all the
 * same value, and nothing in the kernel reads it: a benign race whose result is 1.0f whatever the
 * order. A clean list never writes the flag, so one flag zeroed once per step covers every list.
 * nonfinite_multi is the same test and flag without out.
 *
 * sum_squares_multi: each chunk (block) sums the squares of its elements in double (exact
 * squares; threads in element order, then the block's fixed butterfly), one partial per chunk;
 * a second one-thread kernel adds the partials in plan order (tensors in list order, chunks in
 * order) in double and rounds to f32 once. No float atomics: the bits depend on the data and the
 * list's shapes only. The partials come from the caching allocator and go back to it right after
 * the launches: the context's one stream orders their reuse. An all-empty list writes 0 (an
 * asynchronous memset, no kernel).
 *
 * Entries validate their arguments first (statuses of the per-tensor entries; messages name the
 * entry and the tensor), then queue their work on dev->stream without waiting. n == 0 or
 * an all-empty list launches nothing. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/multi_tensor_apply.cuh"
#include "kernels/math/load_store.h"
#include "kernels/math/unscale.h"

/* Lists: grad (G), out (f32). Bytes per element: read g 2 + write out 4 = 6 (f16/bf16), or
 * 4 + 4 = 8 (f32, in place or not). At 85% of an H100's 3.35 TB/s: 2.1 ms (6 B) or 2.8 ms (8 B)
 * per 10^9 elements. */
template <amp_dtype G>
struct unscale_op {
    float inv_scale;
    const float *inv_scale_dev; /* when set: read here instead, when the kernel runs */
    float *found_inf;
    __device__ void operator()(const amp_mt_launch &l, int b) const {
        const float inv = inv_scale_dev ? *inv_scale_dev : inv_scale;
        const int n = (int)amp_mt_block_numel(&l, b);
        const void *g = amp_mt_block_ptr(&l, b, 0);
        float *out = (float *)amp_mt_block_ptr(&l, b, 1);
        uint32_t bad = 0;
        for (int base = 0; base < n; base += AMP_MT_ELEMS_PER_ITER) {
            float gr[AMP_MT_ILP] = {};
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i < n) gr[k] = amp_load_f32(g, G, i);
            }
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i >= n) continue;
                bad |= amp_unscale_nonfinite(gr[k]);
                out[i] = amp_unscale_elem(gr[k], inv);
            }
        }
        if (__syncthreads_or((int)bad) && threadIdx.x == 0) *found_inf = 1.0f;
    }
};

/* List: x (D). Bytes per element: read 2 or 4. At 85% of an H100's 3.35 TB/s: 0.70 ms (f16/bf16)
 * or 1.4 ms (f32) per 10^9 elements. */
template <amp_dtype D>
struct nonfinite_op {
    float *found_inf;
    __device__ void operator()(const amp_mt_launch &l, int b) const {
        const int n = (int)amp_mt_block_numel(&l, b);
        const void *x = amp_mt_block_ptr(&l, b, 0);
        uint32_t bad = 0;
        for (int base = 0; base < n; base += AMP_MT_ELEMS_PER_ITER) {
            float xr[AMP_MT_ILP] = {};
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i < n) xr[k] = amp_load_f32(x, D, i);
            }
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++)
                if (amp_mt_elem(base, k) < n) bad |= amp_unscale_nonfinite(xr[k]);
        }
        if (__syncthreads_or((int)bad) && threadIdx.x == 0) *found_inf = 1.0f;
    }
};

/* sum_squares_multi's second pass: the plan-order total, rounded to f32 once. */
struct sumsq_fin {
    float *out, *out_lo;
    __device__ void operator()(double total) const {
        *out = (float)total;
        if (out_lo) *out_lo = (float)(total - (double)*out);
    }
};

static amp_status check_dtype(const char *fn, amp_dtype dt) {
    if (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16) return AMP_OK;
    return amp_fail(AMP_ERR_DTYPE, "%s: dtype %s, want f32, f16 or bf16", fn,
                    amp_dtype_name(dt));
}

static amp_status check_n(const char *fn, int64_t n, const void *list, const char *name) {
    if (n < 0) return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld < 0", fn, (long long)n);
    if (n > 0 && !list) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument '%s' is NULL", fn, name);
    return AMP_OK;
}

/* out[i] may be grad[i] itself (f32); any other overlap would read unscaled values back as
 * gradients. Only a tensor's own two buffers are compared (a list's tensors are disjoint views). */
static amp_status check_unscale_overlap(const char *fn, amp_dtype g_dt, int64_t n,
                                        const int64_t *numel, const void *const *grad,
                                        float *const *out) {
    for (int64_t i = 0; i < n; i++) {
        if (numel[i] <= 0 || !grad[i] || !out[i]) continue;
        uintptr_t g0 = (uintptr_t)grad[i], g1 = g0 + (uintptr_t)numel[i] * amp_dtype_size(g_dt);
        uintptr_t o0 = (uintptr_t)out[i], o1 = o0 + (uintptr_t)numel[i] * sizeof(float);
        bool same = g_dt == AMP_F32 && g0 == o0;
        if (!same && o0 < g1 && g0 < o1)
            return amp_fail(AMP_ERR_INVALID_ARG,
                            "%s: out[%lld] overlaps grad[%lld] (%s) without being the same f32 "
                            "buffer", fn, (long long)i, (long long)i, amp_dtype_name(g_dt));
    }
    return AMP_OK;
}

extern "C" amp_status amp_cuda_unscale_multi(amp_device_ctx *dev, amp_dtype g_dt, int64_t n,
                                             const int64_t *numel, const void *const *grad,
                                             float inv_scale, float *const *out, float *found_inf,
                                             const amp_step_scalars *scalars) {
    const char *fn = "amp_cuda_unscale_multi";
    AMP_TRY(check_dtype(fn, g_dt));
    const float *inv_dev = scalars ? scalars->grad_scale : NULL;
    if (!inv_dev && (!(inv_scale > 0.0f) || inv_scale == (float)INFINITY))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: inv_scale = %g, want a finite value > 0", fn,
                        (double)inv_scale);
    if (!found_inf) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'found_inf' is NULL", fn);
    AMP_TRY(check_n(fn, n, grad, "grad"));
    AMP_TRY(check_n(fn, n, out, "out"));
    amp_mt_list lists[2] = {{g_dt, "grad", (void *const *)grad, NULL}, {AMP_F32, "out", NULL, out}};
    amp_mt_tensor *tensors = NULL;
    int64_t chunks = 0;
    AMP_TRY(amp_mt_tensors_make(fn, n, numel, lists, 2, &tensors, &chunks));
    if (!tensors) return AMP_OK;
    amp_status s = check_unscale_overlap(fn, g_dt, n, numel, grad, out);
    if (s == AMP_OK) {
        amp_dtype dtypes[2] = {g_dt, AMP_F32};
        s = amp_mt_with_dtype(g_dt, [&](auto g) {
            unscale_op<decltype(g)::value> op;
            op.inv_scale = inv_scale;
            op.inv_scale_dev = inv_dev;
            op.found_inf = found_inf;
            return amp_mt_apply(fn, 2, dtypes, tensors, n, op, dev->stream);
        });
    }
    free(tensors);
    return s;
}

extern "C" amp_status amp_cuda_nonfinite_multi(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                               const int64_t *numel, const void *const *x,
                                               float *found_inf) {
    const char *fn = "amp_cuda_nonfinite_multi";
    AMP_TRY(check_dtype(fn, dt));
    if (!found_inf) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'found_inf' is NULL", fn);
    AMP_TRY(check_n(fn, n, x, "x"));
    amp_mt_list list = {dt, "x", (void *const *)x, NULL};
    amp_mt_tensor *tensors = NULL;
    int64_t chunks = 0;
    AMP_TRY(amp_mt_tensors_make(fn, n, numel, &list, 1, &tensors, &chunks));
    if (!tensors) return AMP_OK;
    amp_status s = amp_mt_with_dtype(dt, [&](auto d) {
        nonfinite_op<decltype(d)::value> op;
        op.found_inf = found_inf;
        return amp_mt_apply(fn, 1, &dt, tensors, n, op, dev->stream);
    });
    free(tensors);
    return s;
}

extern "C" amp_status amp_cuda_sum_squares_multi(amp_device_ctx *dev, amp_dtype dt, int64_t n,
                                                 const int64_t *numel, const void *const *x,
                                                 float *out, float *out_lo) {
    const char *fn = "amp_cuda_sum_squares_multi";
    AMP_TRY(check_dtype(fn, dt));
    if (!out) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'out' is NULL", fn);
    AMP_TRY(check_n(fn, n, x, "x"));
    amp_mt_list list = {dt, "x", (void *const *)x, NULL};
    amp_mt_tensor *tensors = NULL;
    int64_t chunks = 0;
    AMP_TRY(amp_mt_tensors_make(fn, n, numel, &list, 1, &tensors, &chunks));
    cudaStream_t stream = dev->stream;
    if (!tensors) {
        AMP_CUDA_TRY(cudaMemsetAsync(out, 0, sizeof(float), stream)); /* the empty sum: +0 */
        if (out_lo) AMP_CUDA_TRY(cudaMemsetAsync(out_lo, 0, sizeof(float), stream));
        return AMP_OK;
    }
    double *partials = NULL;
    amp_status s = amp_cuda_alloc(dev, sizeof(double) * (size_t)chunks, (void **)&partials);
    if (s == AMP_OK)
        s = amp_mt_with_dtype(dt, [&](auto d) {
            amp_mt_sumsq_op<decltype(d)::value> op;
            op.partials = partials;
            op.step = amp_mt_step{1.0f, NULL, NULL};
            op.scaled = 0;
            return amp_mt_apply(fn, 1, &dt, tensors, n, op, stream);
        });
    free(tensors);
    if (s == AMP_OK) {
        amp_mt_final_kernel<sumsq_fin><<<1, 1, 0, stream>>>(partials, chunks,
                                                            sumsq_fin{out, out_lo});
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            s = amp_fail(AMP_ERR_BACKEND, "%s: launch of the final sum: %s (%s)", fn,
                         cudaGetErrorString(e), cudaGetErrorName(e));
    }
    amp_cuda_free(dev, partials); /* reused only by work queued after these kernels (one stream) */
    return s;
}
