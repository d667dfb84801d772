/* Multi-tensor apply, the device half: one generic launcher over the plans of core/multi_tensor.h
 * and the pieces the fused optimizer and loss-scaler kernels share (optim.cu, optim_lamb.cu,
 * unscale_multi.cu). Apex's csrc/multi_tensor_apply.cuh is the model: the planner cuts a list of
 * tensors into launches, each launch goes to the kernel BY VALUE as its first argument, block b
 * of the launch (blockIdx.x) runs the op's step function on chunk b, and the op is a small
 * functor (its own kernel argument, at most AMP_MT_OP_ARG_BYTES).
 *
 * Within a chunk, thread t of the AMP_MT_BLOCK threads takes elements t, t + AMP_MT_BLOCK, ...
 * (a warp reads consecutive elements), AMP_MT_ILP of them per iteration: all their loads are
 * issued before any computation or store (Apex's ILP loop), which keeps enough bytes in flight
 * for a memory-bound kernel without relying on the compiler to prove that stores do not alias
 * later loads. So a thread visits its elements in increasing index order: sums it accumulates
 * have a fixed order, whatever the schedule.
 *
 * Also here: the deterministic block sum (warp butterflies, no float atomics), the sum-of-squares
 * step over a list (sum_squares_multi, LAMB's gradient norm) with its plan-order final kernel,
 * the per-launch checks of the step scalars (found_inf, device grad scale), the storage kinds of
 * a parameter (f32, f32 + half copy, half in place) and the dtype dispatch that makes every load
 * and store typed, the per-tensor device step counts (amp_opt_tensors.steps), and the host-side
 * checks of an optimizer's tensor lists (core/backend.h, amp_opt_tensors), shared by the
 * optimizer entries so that they fail alike. Everything is static or a template: unused pieces
 * cost a translation unit nothing and raise no warning. */
#ifndef AMP_KERNELS_CUDA_MULTI_TENSOR_APPLY_CUH
#define AMP_KERNELS_CUDA_MULTI_TENSOR_APPLY_CUH

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <type_traits>

#include <cuda_runtime.h>

#include "core/error.h"
#include "core/multi_tensor.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/math/load_store.h"
#include "kernels/math/unscale.h"

/* Threads per block: Apex's 512, so a chunk of AMP_MT_CHUNK_NUMEL = 65536 elements is 128 per
 * thread, 32 iterations of AMP_MT_ILP = 4. */
#define AMP_MT_BLOCK 512
#define AMP_MT_WARPS (AMP_MT_BLOCK / 32)
#define AMP_MT_ILP 4
#define AMP_MT_ELEMS_PER_ITER (AMP_MT_BLOCK * AMP_MT_ILP)
/* In-chunk indices are int: a chunk is at most AMP_MT_CHUNK_NUMEL elements (the planner's limits
 * here are always amp_mt_limits_apex). */
static_assert(AMP_MT_CHUNK_NUMEL <= (1 << 30), "in-chunk indices are int");
static_assert(AMP_MT_BLOCK % 32 == 0 && AMP_MT_WARPS <= 32, "whole warps, at most 32");

/* nvcc unrolls the constant-trip ILP loops; g++ (cudacpu) does not know `#pragma unroll` and
 * -Wall would warn about it. */
#if defined(__CUDACC__)
#define AMP_MT_UNROLL _Pragma("unroll")
#else
#define AMP_MT_UNROLL
#endif

/* The launch is written as a macro because this header is not rewritten by cudacpu's
 * cuda_launch_rewrite.py (only the .cu files are): under CUDACPU it expands to the call the
 * rewriter would have produced. */
#if defined(CUDACPU)
#define AMP_MT_LAUNCH(kernel, grid, block, stream, ...)                                            \
    ::cudacpu::launch_n(#kernel, kernel, dim3(grid), dim3(block), 0, (stream), __VA_ARGS__)
#else
#define AMP_MT_LAUNCH(kernel, grid, block, stream, ...)                                            \
    kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

/* ---- the generic kernel and launcher ---- */

/* Block b of launch l runs op on its chunk. Both arguments are __grid_constant__: the op takes
 * the launch's address (amp_mt_block_ptr), which would otherwise copy its 3840 bytes into every
 * thread's local memory. */
template <class Op>
static __global__ void __launch_bounds__(AMP_MT_BLOCK)
    amp_mt_kernel(const __grid_constant__ amp_mt_launch l, const __grid_constant__ Op op) {
    op(l, (int)blockIdx.x);
}

/* Plans `tensors` (depth lists of dtypes[d]) with Apex's limits and launches amp_mt_kernel<Op>
 * once per launch of the plan, on `stream`, without waiting. fn names the entry in errors. An
 * all-empty list launches nothing. */
template <class Op>
static amp_status amp_mt_apply(const char *fn, int depth, const amp_dtype *dtypes,
                               const amp_mt_tensor *tensors, int64_t n, const Op &op,
                               cudaStream_t stream) {
    static_assert(sizeof(Op) <= AMP_MT_OP_ARG_BYTES,
                  "an op's arguments must fit beside the launch in CUDA's 4 KiB");
    static_assert(std::is_trivially_copyable<Op>::value, "kernel arguments are copied bytes");
    amp_mt_planner pl;
    amp_status s = amp_mt_planner_init(&pl, depth, dtypes, tensors, n, amp_mt_limits_apex(depth));
    if (s != AMP_OK) return amp_fail_context(s, "%s", fn);
    amp_mt_launch l;
    while (amp_mt_planner_next(&pl, &l)) {
        AMP_MT_LAUNCH(amp_mt_kernel<Op>, l.n_blocks, AMP_MT_BLOCK, stream, l, op);
        AMP_CUDA_LAUNCHED(stream);
    }
    return AMP_OK;
}

/* ---- device helpers ---- */

/* The scalars every fused step reads first (core/backend.h, amp_step_scalars). */
typedef struct amp_mt_step {
    float grad_scale;           /* the host's multiplier (1: the gradient as is) */
    const float *grad_scale_dev; /* when set: read here instead, when the kernel runs */
    const float *found_inf;      /* when set and != 0 when the kernel runs: write nothing */
} amp_mt_step;

/* True when the step is skipped: every block of every kernel of a skipped step returns before
 * its first store. A NaN flag skips too (it is not 0). */
static __device__ __forceinline__ bool amp_mt_skipped(const float *found_inf) {
    return found_inf && *found_inf != 0.0f;
}

/* The multiplier of this step: the device's value when given, used as it is (0 zeroes the
 * gradients, as on the CPU backend, which can read it and also refuses a negative or non-finite
 * one; only the descriptor's 0 means none). */
static __device__ __forceinline__ float amp_mt_grad_scale(const amp_mt_step &s) {
    return s.grad_scale_dev ? *s.grad_scale_dev : s.grad_scale;
}

/* A gradient as the update sees it: loaded, widened exactly, times the scale in one f32 rounding
 * (the CPU backend's `load * gs`). __fmul_rn, not `*`: nvcc would contract a plain product with
 * the subtraction or addition that follows it in the math headers (lerp's end - self) into an
 * FMA, which the CPU build (-ffp-contract=off) does not. */
template <amp_dtype G>
static __device__ __forceinline__ float amp_mt_load_grad(const void *g, int i, float gs) {
    return __fmul_rn(amp_load_f32(g, G, i), gs);
}

/* Element k of this thread's group at `base` (see the header comment). */
static __device__ __forceinline__ int amp_mt_elem(int base, int k) {
    return base + (int)threadIdx.x + k * AMP_MT_BLOCK;
}

/* The sum of v over the AMP_MT_BLOCK threads, returned to every thread: each warp reduces with a
 * butterfly (lane l adds lane l ^ k, k = 16..1), lane 0 of each warp stores its warp's sum, warp
 * 0 reduces those the same way (lanes past the last warp add 0). The order depends on the thread
 * index only. block_reduce.cuh's amp_block_sum_f64 is the same scheme; it is not included here
 * because its non-template kernels would be unused in these files (-Wunused-function under
 * -Werror in the cudacpu build). The second barrier makes a second call in one kernel safe. */
static __device__ double amp_mt_block_sum_f64(double v) {
    __shared__ double warp_vals[AMP_MT_WARPS];
    __shared__ double result;
    for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    if (lane == 0) warp_vals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < AMP_MT_WARPS ? warp_vals[lane] : 0.0;
        for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
        if (lane == 0) result = v;
    }
    __syncthreads();
    return result;
}

/* p[0] + p[1] + ... + p[n - 1] in this order, in double: the cross-block step of the plan-order
 * sums (one thread; the additions form one dependent chain, about 8 cycles each, e.g. 70 us
 * for the 15k chunks of 10^9 elements, against >= 1.4 ms for reading them once). */
static __device__ double amp_mt_sum_in_order(const double *p, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += p[i];
    return s;
}

/* ---- the sum of squares over a list (depth 1) ---- */

/* partials[first_block + b] = the sum of x^2 over block b's chunk in double (squares of f32
 * values are exact in double; threads in element order, then amp_mt_block_sum_f64). With
 * `scaled`, x is the gradient times the step's grad scale in f32 (amp_mt_load_grad: what LAMB's
 * stage 1 sees); else x is the stored value widened. Skipped steps (found_inf) write nothing.
 * Bytes per element: read x (2 or 4). At 85% of an H100's 3.35 TB/s: 0.70 ms (f16/bf16) or
 * 1.40 ms (f32) per 10^9 elements. */
template <amp_dtype D>
struct amp_mt_sumsq_op {
    double *partials;
    amp_mt_step step;
    int scaled;
    __device__ void operator()(const amp_mt_launch &l, int b) const {
        if (amp_mt_skipped(step.found_inf)) return;
        const float gs = scaled ? amp_mt_grad_scale(step) : 1.0f;
        const int n = (int)amp_mt_block_numel(&l, b);
        const void *x = amp_mt_block_ptr(&l, b, 0);
        double acc = 0.0;
        for (int base = 0; base < n; base += AMP_MT_ELEMS_PER_ITER) {
            float v[AMP_MT_ILP] = {};
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++) {
                int i = amp_mt_elem(base, k);
                if (i < n) v[k] = scaled ? amp_mt_load_grad<D>(x, i, gs) : amp_load_f32(x, D, i);
            }
            AMP_MT_UNROLL
            for (int k = 0; k < AMP_MT_ILP; k++)
                if (amp_mt_elem(base, k) < n) acc += amp_square_f64(v[k]);
        }
        double s = amp_mt_block_sum_f64(acc);
        if (threadIdx.x == 0) partials[l.first_block + b] = s;
    }
};

/* The second pass of a plan-order sum: fin(partials[0] + ... + partials[n - 1]) on one thread.
 * Fin is a small functor with `__device__ void operator()(double total) const`. */
template <class Fin>
static __global__ void amp_mt_final_kernel(const double *partials, int64_t n, Fin fin) {
    if (threadIdx.x == 0 && blockIdx.x == 0) fin(amp_mt_sum_in_order(partials, n));
}

/* Dispatches f(std::integral_constant<amp_dtype, D>) for a float dtype (f32 otherwise). */
template <class F>
static amp_status amp_mt_with_dtype(amp_dtype dt, F &&f) {
    switch (dt) {
    case AMP_F16: return f(std::integral_constant<amp_dtype, AMP_F16>());
    case AMP_BF16: return f(std::integral_constant<amp_dtype, AMP_BF16>());
    default: return f(std::integral_constant<amp_dtype, AMP_F32>());
    }
}

/* ---- lists of tensors (host) ---- */

/* One list of a fused pass: its dtype, its name in errors, and tensor i's address in v[i] or
 * f[i] (whichever array is set: core/backend.h types gradients as void * and state as float *). */
typedef struct amp_mt_list {
    amp_dtype dtype;
    const char *name;
    void *const *v;
    float *const *f;
} amp_mt_list;

static inline void *amp_mt_list_ptr(const amp_mt_list *list, int64_t i) {
    return list->v ? list->v[i] : (void *)list->f[i];
}

/* A list's tensors as the planner takes them (malloc'd; free with free()), with *n_chunks the
 * chunks of the whole list (the blocks of its plan). Fails naming fn when a numel is negative, a
 * non-empty tensor has a NULL address in some list, or the list is past the planner's limits
 * (2^31 - 1 tensors, AMP_MT_MAX_CHUNKS_PER_TENSOR chunks per tensor), so that nothing is
 * allocated or launched for a list the planner would refuse; *out is NULL when every tensor is
 * empty (nothing to launch). */
static inline amp_status amp_mt_tensors_make(const char *fn, int64_t n, const int64_t *numel,
                                             const amp_mt_list *lists, int depth,
                                             amp_mt_tensor **out, int64_t *n_chunks) {
    *out = NULL;
    *n_chunks = 0;
    if (n == 0) return AMP_OK;
    if (!numel) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'numel' is NULL", fn);
    if (n > INT32_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld tensors, want at most %d", fn,
                        (long long)n, INT32_MAX);
    int64_t chunks = 0;
    for (int64_t i = 0; i < n; i++) {
        if (numel[i] < 0)
            return amp_fail(AMP_ERR_INVALID_ARG, "%s: numel[%lld] = %lld < 0", fn, (long long)i,
                            (long long)numel[i]);
        if (numel[i] == 0) continue;
        if (amp_mt_n_chunks(numel[i], AMP_MT_CHUNK_NUMEL) > AMP_MT_MAX_CHUNKS_PER_TENSOR)
            return amp_fail(AMP_ERR_INVALID_ARG,
                            "%s: numel[%lld] = %lld is more than %lld chunks of %d elements", fn,
                            (long long)i, (long long)numel[i],
                            (long long)AMP_MT_MAX_CHUNKS_PER_TENSOR, AMP_MT_CHUNK_NUMEL);
        for (int d = 0; d < depth; d++)
            if (!amp_mt_list_ptr(&lists[d], i))
                return amp_fail(AMP_ERR_INVALID_ARG, "%s: %s[%lld] is NULL (numel %lld)", fn,
                                lists[d].name, (long long)i, (long long)numel[i]);
        chunks += amp_mt_n_chunks(numel[i], AMP_MT_CHUNK_NUMEL);
    }
    if (chunks == 0) return AMP_OK;
    amp_mt_tensor *t = (amp_mt_tensor *)malloc(sizeof(amp_mt_tensor) * (size_t)n);
    if (!t)
        return amp_fail(AMP_ERR_OOM, "%s: no host memory for the plan of %lld tensors", fn,
                        (long long)n);
    for (int64_t i = 0; i < n; i++) {
        t[i].numel = numel[i];
        for (int d = 0; d < AMP_MT_MAX_DEPTH; d++)
            t[i].ptr[d] = d < depth && numel[i] > 0 ? amp_mt_list_ptr(&lists[d], i) : NULL;
    }
    *out = t;
    *n_chunks = chunks;
    return AMP_OK;
}

/* Where an optimizer's parameter lives, fixed at compile time so that every load and store is
 * typed: an f32 parameter (or master) alone or with an f16/bf16 copy written in the same pass
 * (O2), or a half parameter updated in place (O3: widened, updated in f32, rounded back). */
enum amp_mt_store { AMP_MT_F32, AMP_MT_F32_F16, AMP_MT_F32_BF16, AMP_MT_F16, AMP_MT_BF16 };

template <int S>
struct amp_mt_store_traits {
    static constexpr amp_dtype param = S == AMP_MT_F16 ? AMP_F16 : S == AMP_MT_BF16 ? AMP_BF16
                                                                                      : AMP_F32;
    static constexpr bool has_copy = S == AMP_MT_F32_F16 || S == AMP_MT_F32_BF16;
    static constexpr amp_dtype copy = S == AMP_MT_F32_BF16 ? AMP_BF16 : AMP_F16;
};

static inline amp_mt_store amp_mt_store_of(const amp_opt_tensors *t) {
    if (!t->param) return t->half_dtype == AMP_BF16 ? AMP_MT_BF16 : AMP_MT_F16;
    if (!t->half) return AMP_MT_F32;
    return t->half_dtype == AMP_BF16 ? AMP_MT_F32_BF16 : AMP_MT_F32_F16;
}

/* Dispatches f(integral_constant<amp_mt_store, S>) for the storage kind s. */
template <class F>
static amp_status amp_mt_with_store(amp_mt_store s, F &&f) {
    switch (s) {
    case AMP_MT_F32_F16: return f(std::integral_constant<int, AMP_MT_F32_F16>());
    case AMP_MT_F32_BF16: return f(std::integral_constant<int, AMP_MT_F32_BF16>());
    case AMP_MT_F16: return f(std::integral_constant<int, AMP_MT_F16>());
    case AMP_MT_BF16: return f(std::integral_constant<int, AMP_MT_BF16>());
    default: return f(std::integral_constant<int, AMP_MT_F32>());
    }
}

/* The checks every optimizer entry makes on its lists and scalars before anything else, in the
 * CPU backend's order and with its statuses (kernels/cpu/optim.c): no per-tensor half_copy
 * in the descriptor (a list's copies are t->half), grad_scale 0 or finite > 0, t set, n in
 * 0..2^31 - 1, gradient dtype f32/f16/bf16, the half dtype f16/bf16 when a half list is given,
 * a parameter list (param or half, even for n = 0), and with n > 0 the arrays that must be there
 * (grad always, state1/state2 when the op needs them). numel and each tensor's addresses are
 * amp_mt_tensors_make's. */
static inline amp_status amp_mt_check_opt(const char *fn, const amp_opt_tensors *t,
                                          const void *desc_half_copy, float grad_scale,
                                          bool need_state1, bool need_state2) {
    if (desc_half_copy)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the descriptor's half_copy is set; a list takes "
                        "its half copies in amp_opt_tensors.half", fn);
    if (!(grad_scale == 0.0f || (grad_scale > 0.0f && isfinite(grad_scale))))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: grad_scale = %g, want a finite value > 0", fn,
                        (double)grad_scale);
    if (!t) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 't' is NULL", fn);
    if (t->n < 0 || t->n > INT32_MAX)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: n = %lld tensors, want 0..%d", fn,
                        (long long)t->n, INT32_MAX);
    if (t->grad_dtype != AMP_F32 && t->grad_dtype != AMP_F16 && t->grad_dtype != AMP_BF16)
        return amp_fail(AMP_ERR_DTYPE, "%s: gradient dtype %s, want f32, f16 or bf16", fn,
                        amp_dtype_name(t->grad_dtype));
    if (t->half && t->half_dtype != AMP_F16 && t->half_dtype != AMP_BF16)
        return amp_fail(AMP_ERR_DTYPE, "%s: half_dtype %s, want f16 or bf16", fn,
                        amp_dtype_name(t->half_dtype));
    if (!t->param && !t->half)
        return amp_fail(AMP_ERR_INVALID_ARG,
                        "%s: no parameter (the param and half lists are both NULL)", fn);
    if (t->n == 0) return AMP_OK;
    if (!t->grad) return amp_fail(AMP_ERR_INVALID_ARG, "%s: the grad list is NULL", fn);
    if (need_state1 && !t->state1)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the state1 list is NULL", fn);
    if (need_state2 && !t->state2)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: the state2 list is NULL", fn);
    return AMP_OK;
}

/* The step scalars of a fused optimizer pass: the host's scale (0 means 1) unless the device's. */
static inline amp_mt_step amp_mt_step_make(float grad_scale, const amp_step_scalars *scalars) {
    amp_mt_step s;
    s.grad_scale = grad_scale == 0.0f ? 1.0f : grad_scale;
    s.grad_scale_dev = scalars ? scalars->grad_scale : NULL;
    s.found_inf = scalars ? scalars->found_inf : NULL;
    return s;
}

/* ---- per-tensor step counts (amp_opt_tensors.steps) ---- */

/* With device step counts, tensor i of the caller's list is updated at t = steps[i] + 1, with
 * coefficients made from t on the device. A first small kernel (a thread per tensor, empty ones
 * included: reading their count is harmless) writes t and the coefficients into workspace; the
 * update kernels read their tensor's from there, and the block of each tensor's chunk 0 writes
 * steps[i] = t. No kernel of the call reads steps after the first, so that store races with
 * nothing, and a skipped step (found_inf) returns before it: the counts stay. An empty tensor has
 * no chunk 0: its count is not touched. */
typedef struct amp_mt_steps {
    const int64_t *t; /* workspace: this update's step per tensor; NULL: no device counts */
    int64_t *steps;   /* the caller's counts */
} amp_mt_steps;

static __device__ __forceinline__ void amp_mt_steps_advance(const amp_mt_steps &s,
                                                            const amp_mt_launch &l, int b) {
    if (s.t && threadIdx.x == 0 && amp_mt_block_chunk(&l, b) == 0) {
        int64_t ti = l.tensor_index[amp_mt_block_slot(&l, b)];
        s.steps[ti] = s.t[ti];
    }
}

/* Thread i: t[i] = steps[i] + 1, coefs[i] = make(t[i]). Make is a small functor with a typedef
 * coefs_t and `__device__ coefs_t operator()(int64_t t) const`. */
template <class Make>
static __global__ void amp_mt_steps_kernel(int64_t n, const int64_t *steps, int64_t *t,
                                           typename Make::coefs_t *coefs, Make make) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t ti = steps[i] + 1;
    t[i] = ti;
    coefs[i] = make(ti);
}

/* Threads per block of amp_mt_steps_kernel. */
#define AMP_MT_STEPS_BLOCK 128

/* Workspace from amp_cuda_alloc (*ws; the caller frees it with amp_cuda_free after its launches)
 * holding n steps and n coefficients, filled by amp_mt_steps_kernel on the context's stream. */
template <class Make>
static amp_status amp_mt_steps_prepare(int64_t n, int64_t *steps, const Make &make,
                                       amp_device_ctx *dev, void **ws, amp_mt_steps *out,
                                       const typename Make::coefs_t **coefs) {
    cudaStream_t stream = dev->stream;
    typedef typename Make::coefs_t coefs_t;
    static_assert(alignof(coefs_t) <= alignof(int64_t), "coefficients follow the int64 steps");
    AMP_TRY(amp_cuda_alloc(dev, (sizeof(int64_t) + sizeof(coefs_t)) * (size_t)n, ws));
    int64_t *t = (int64_t *)*ws;
    coefs_t *c = (coefs_t *)(t + n);
    unsigned grid = (unsigned)((n + AMP_MT_STEPS_BLOCK - 1) / AMP_MT_STEPS_BLOCK);
    AMP_MT_LAUNCH(amp_mt_steps_kernel<Make>, grid, AMP_MT_STEPS_BLOCK, stream, n, steps, t, c,
                  make);
    AMP_CUDA_LAUNCHED(stream);
    out->t = t;
    out->steps = steps;
    *coefs = c;
    return AMP_OK;
}

#endif
