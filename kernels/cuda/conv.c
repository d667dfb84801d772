/* 2-D convolution (forward, backward data, backward weight) through cuDNN's legacy convolution
 * API; the f32 bias (written into the output before cuDNN adds the convolution to it) and its
 * gradient are our own kernels (conv_bias.cu).
 *
 * Layouts: our NCHW activations and OIHW weights are cuDNN's packed NCHW tensors and KCRS
 * filters; PyTorch's conv2d is a cross-correlation (CUDNN_CROSS_CORRELATION), dilation 1, one
 * group. alpha = 1 and beta = 0: outputs are overwritten and never read, except the forward with
 * a bias: y is first filled with the bias and cuDNN accumulates into it (beta = 1).
 *
 * Numerics: x, w and y share a dtype and cuDNN accumulates in f32 for all three (the
 * configurations of cuDNN's cudnnConvolutionForward table): FLOAT_CONFIG for f32,
 * PSEUDO_HALF_CONFIG (f16 data, f32 compute) and PSEUDO_BFLOAT16_CONFIG (bf16 data, f32 compute),
 * one rounding to the output dtype. f16/bf16 run on tensor cores (CUDNN_TENSOR_OP_MATH). f32 uses
 * CUDNN_FMA_MATH by default, not CUDNN_DEFAULT_MATH: from Ampere on the default math type lets
 * cuDNN round f32 inputs to TF32 on tensor cores (10-bit mantissa), which PyTorch allows by
 * default for convolutions (torch.backends.cudnn.allow_tf32) but which would break the backends'
 * promise of f32 results matching the CPU's; PyTorch itself asks for FMA_MATH when allow_tf32 is
 * off. With the descriptor's allow_tf32 (amp_ctx_opts.allow_tf32) f32 takes CUDNN_TENSOR_OP_MATH:
 * tensor cores permitted, which for f32 data on Ampere and later means TF32 inputs with f32
 * accumulation. Not CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: that also lets cuDNN convert f32 data
 * to f16 for the tensor cores (cuDNN 7.2's FP32-to-FP16 conversion), f16's 5-bit exponent
 * overflowing past 65504, which allow_tf32 does not grant.
 *
 * Plans: the descriptors and the algorithm of each problem (shape, dtype, direction, the
 * descriptor's allow_tf32 and allow_nondeterministic) are made once and cached in a small table,
 * as gemm.c caches its heuristic's choice. The algorithm is the first that
 * cudnnGetConvolution*Algorithm_v7 (cuDNN's heuristics, no timing runs, best expected time first)
 * reports as runnable, within AMP_CONV_MAX_WORKSPACE; unless the descriptor allows
 * nondeterministic algorithms (off by default: core/backend.h promises the same bits for the same
 * inputs, which cuDNN's atomic backward algorithms do not give), the first whose determinism is
 * CUDNN_DETERMINISTIC, which excludes the backward algorithms that accumulate with atomics
 * (ALGO_0, and ALGO_3 for the filter). With them allowed this is PyTorch's
 * cudnn.deterministic = False with cudnn.benchmark = False (heuristics, not timing runs:
 * cudnnFind*AlgorithmEx would time every algorithm on the real buffers, a host wait and its
 * workspace on the first call of each shape, and would overwrite the forward's output, which
 * holds the bias already). The workspace comes from the caching allocator for each call and goes
 * back to it right after the call is enqueued: the context's one stream orders its reuse.
 *
 * One mutex guards the handle and the table: cuDNN handles are not to be used by two threads at
 * once, and contexts on different threads may share the backend. */
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/error.h"
#include "kernels/cuda/conv_bias.h"
#include "kernels/cuda/cuda_backend.h"

/* Cached plans: a network has a few convolution shapes, each used in three directions (and a
 * fourth dtype or mode now and then); beyond 64, round-robin replacement. */
#define AMP_CONV_PLANS 64
/* Algorithms wanting more workspace than this are passed over (the heuristics list a leaner one
 * after them, IMPLICIT_GEMM needing none): FFT variants can ask for gigabytes on large layers,
 * memory that activations need more. */
#define AMP_CONV_MAX_WORKSPACE ((size_t)1 << 30)

typedef enum conv_dir { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER, CONV_N_DIRS } conv_dir;

static const char *const conv_fn[CONV_N_DIRS] = {
    "amp_cuda_conv2d_fwd", "amp_cuda_conv2d_bwd_data", "amp_cuda_conv2d_bwd_weight"};

/* The descriptor's sizes (n through w_out), and the problem as int64s (no padding bytes, so
 * memcmp compares exactly the fields): those sizes, dtype, direction, deterministic mode and
 * TF32. */
#define CONV_N_SIZES 13
#define CONV_KEY_LEN (CONV_N_SIZES + 4)

typedef struct conv_plan {
    int64_t key[CONV_KEY_LEN];
    bool used;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int algo; /* a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t of the plan's direction */
    cudnnMathType_t math;
    size_t ws_nbytes;
} conv_plan;

/* A device context's convolution state: its cuDNN handle (made at the first convolution, bound
 * to the context's stream) and plan cache. One mutex per context guards them. */
struct amp_cuda_conv_state {
    pthread_mutex_t lock;
    cudnnHandle_t handle;
    conv_plan plans[AMP_CONV_PLANS];
    int next_victim;
    amp_cuda_conv_stats stats;
};

amp_status amp_cuda_conv_state_create(amp_cuda_conv_state **out) {
    amp_cuda_conv_state *c = calloc(1, sizeof *c);
    if (!c) return amp_fail(AMP_ERR_OOM, "amp_cuda_conv_state_create: out of host memory");
    pthread_mutex_init(&c->lock, NULL);
    c->stats = (amp_cuda_conv_stats){0, -1, -1, -1, -1};
    *out = c;
    return AMP_OK;
}

/* AMP_ERR_BACKEND naming our entry, the cuDNN function, its status and cuDNN's own message. */
static amp_status cudnn_fail(const char *fn, const char *call, cudnnStatus_t st) {
    char detail[256];
    cudnnGetLastErrorString(detail, sizeof detail);
    return amp_fail(AMP_ERR_BACKEND, "%s: %s: %s%s%s", fn, call, cudnnGetErrorString(st),
                    detail[0] ? ": " : "", detail);
}

/* One cuDNN call `func args` made on behalf of entry fn. */
#define CUDNN_TRY(fn, func, args)                                                                  \
    do {                                                                                           \
        cudnnStatus_t cudnn_s_ = func args;                                                        \
        if (cudnn_s_ != CUDNN_STATUS_SUCCESS) return cudnn_fail((fn), #func, cudnn_s_);            \
    } while (0)

static cudnnDataType_t cudnn_type(amp_dtype dt) {
    return dt == AMP_F16 ? CUDNN_DATA_HALF : dt == AMP_BF16 ? CUDNN_DATA_BFLOAT16
                                                            : CUDNN_DATA_FLOAT;
}

/* The context's handle, made on first use and bound to its stream; the caller holds the lock. */
static amp_status handle_get(amp_device_ctx *dev, const char *fn, cudnnHandle_t *out) {
    amp_cuda_conv_state *c = dev->conv;
    if (!c->handle) {
        cudnnHandle_t h = NULL;
        CUDNN_TRY(fn, cudnnCreate, (&h));
        cudnnStatus_t st = cudnnSetStream(h, dev->stream);
        if (st != CUDNN_STATUS_SUCCESS) {
            cudnnDestroy(h);
            return cudnn_fail(fn, "cudnnSetStream", st);
        }
        c->handle = h;
    }
    *out = c->handle;
    return AMP_OK;
}

static void plan_release(conv_plan *p) {
    if (!p->used) return;
    /* A failed build leaves some descriptors unmade. */
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
    memset(p, 0, sizeof *p);
}

static void desc_sizes(const amp_conv2d_desc *d, int64_t v[CONV_N_SIZES]) {
    const int64_t s[CONV_N_SIZES] = {d->n,     d->c_in,     d->h_in,     d->w_in,  d->c_out,
                                     d->kh,    d->kw,       d->stride_h, d->stride_w,
                                     d->pad_h, d->pad_w,    d->h_out,    d->w_out};
    memcpy(v, s, sizeof s);
}

static void key_fill(int64_t key[CONV_KEY_LEN], const amp_conv2d_desc *d, conv_dir dir) {
    desc_sizes(d, key);
    key[CONV_N_SIZES] = d->dtype;
    key[CONV_N_SIZES + 1] = dir;
    key[CONV_N_SIZES + 2] = !d->allow_nondeterministic;
    key[CONV_N_SIZES + 3] = d->dtype == AMP_F32 && d->allow_tf32;
}

/* Whether an algorithm listed by the heuristics may be used: runnable, and deterministic when
 * that is asked for. */
static bool algo_usable(cudnnStatus_t status, cudnnDeterminism_t det, bool deterministic) {
    return status == CUDNN_STATUS_SUCCESS && (!deterministic || det == CUDNN_DETERMINISTIC);
}

/* The workspace algorithm `algo` of the plan's direction needs. */
static amp_status algo_workspace(const conv_plan *p, cudnnHandle_t h, conv_dir dir, int algo,
                                 size_t *nbytes) {
    const char *fn = conv_fn[dir];
    switch (dir) {
    case CONV_FWD:
        CUDNN_TRY(fn, cudnnGetConvolutionForwardWorkspaceSize,
                  (h, p->x, p->w, p->conv, p->y, (cudnnConvolutionFwdAlgo_t)algo, nbytes));
        break;
    case CONV_BWD_DATA:
        CUDNN_TRY(fn, cudnnGetConvolutionBackwardDataWorkspaceSize,
                  (h, p->w, p->y, p->conv, p->x, (cudnnConvolutionBwdDataAlgo_t)algo, nbytes));
        break;
    default:
        CUDNN_TRY(fn, cudnnGetConvolutionBackwardFilterWorkspaceSize,
                  (h, p->x, p->y, p->conv, p->w, (cudnnConvolutionBwdFilterAlgo_t)algo, nbytes));
        break;
    }
    return AMP_OK;
}

/* Asks cuDNN's heuristics for the direction's algorithms, best first, and takes the first
 * usable one within the workspace bound. The three perf types differ only in the algo enum. */
static amp_status plan_pick_algo(amp_cuda_conv_state *c, conv_plan *p, cudnnHandle_t h,
                                 conv_dir dir, bool deterministic, const amp_conv2d_desc *d) {
    const char *fn = conv_fn[dir];
    /* Room for the list of any direction. */
    int algos[CUDNN_CONVOLUTION_FWD_ALGO_COUNT + CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT +
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n_found = 0, n_usable = 0;
    c->stats.algo_searches++;
    if (dir == CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CUDNN_TRY(fn, cudnnGetConvolutionForwardAlgorithm_v7,
                  (h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n_found,
                   perf));
        for (int i = 0; i < n_found; i++)
            if (algo_usable(perf[i].status, perf[i].determinism, deterministic))
                algos[n_usable++] = (int)perf[i].algo;
    } else if (dir == CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CUDNN_TRY(fn, cudnnGetConvolutionBackwardDataAlgorithm_v7,
                  (h, p->w, p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n_found,
                   perf));
        for (int i = 0; i < n_found; i++)
            if (algo_usable(perf[i].status, perf[i].determinism, deterministic))
                algos[n_usable++] = (int)perf[i].algo;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CUDNN_TRY(fn, cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                  (h, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                   &n_found, perf));
        for (int i = 0; i < n_found; i++)
            if (algo_usable(perf[i].status, perf[i].determinism, deterministic))
                algos[n_usable++] = (int)perf[i].algo;
    }
    for (int i = 0; i < n_usable; i++) {
        size_t ws = 0;
        AMP_TRY(algo_workspace(p, h, dir, algos[i], &ws));
        if (ws <= AMP_CONV_MAX_WORKSPACE) {
            p->algo = algos[i];
            p->ws_nbytes = ws;
            return AMP_OK;
        }
    }
    return amp_fail(AMP_ERR_UNSUPPORTED,
                    "%s: cuDNN has no %salgorithm within %zu MiB of workspace for x [%lld, %lld, "
                    "%lld, %lld], w [%lld, %lld, %lld, %lld], stride (%lld, %lld), pad (%lld, "
                    "%lld), %s (%d listed, %d usable)",
                    fn, deterministic ? "deterministic " : "", AMP_CONV_MAX_WORKSPACE >> 20,
                    (long long)d->n, (long long)d->c_in, (long long)d->h_in, (long long)d->w_in,
                    (long long)d->c_out, (long long)d->c_in, (long long)d->kh, (long long)d->kw,
                    (long long)d->stride_h, (long long)d->stride_w, (long long)d->pad_h,
                    (long long)d->pad_w, amp_dtype_name(d->dtype), n_found, n_usable);
}

static amp_status plan_build(amp_cuda_conv_state *c, conv_plan *p, const int64_t key[CONV_KEY_LEN],
                             cudnnHandle_t h, const amp_conv2d_desc *d, conv_dir dir) {
    const char *fn = conv_fn[dir];
    memset(p, 0, sizeof *p);
    memcpy(p->key, key, sizeof p->key);
    p->used = true; /* from here plan_release frees what was made */
    CUDNN_TRY(fn, cudnnCreateTensorDescriptor, (&p->x));
    CUDNN_TRY(fn, cudnnCreateTensorDescriptor, (&p->y));
    CUDNN_TRY(fn, cudnnCreateFilterDescriptor, (&p->w));
    CUDNN_TRY(fn, cudnnCreateConvolutionDescriptor, (&p->conv));
    cudnnDataType_t type = cudnn_type(d->dtype);
    /* The sizes fit in int: checked by conv_check. */
    CUDNN_TRY(fn, cudnnSetTensor4dDescriptor,
              (p->x, CUDNN_TENSOR_NCHW, type, (int)d->n, (int)d->c_in, (int)d->h_in,
               (int)d->w_in));
    CUDNN_TRY(fn, cudnnSetTensor4dDescriptor,
              (p->y, CUDNN_TENSOR_NCHW, type, (int)d->n, (int)d->c_out, (int)d->h_out,
               (int)d->w_out));
    CUDNN_TRY(fn, cudnnSetFilter4dDescriptor,
              (p->w, type, CUDNN_TENSOR_NCHW, (int)d->c_out, (int)d->c_in, (int)d->kh,
               (int)d->kw));
    /* f32 compute for all three dtypes: FLOAT, PSEUDO_HALF and PSEUDO_BFLOAT16 configs. */
    CUDNN_TRY(fn, cudnnSetConvolution2dDescriptor,
              (p->conv, (int)d->pad_h, (int)d->pad_w, (int)d->stride_h, (int)d->stride_w, 1, 1,
               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    p->math = d->dtype == AMP_F32 && !d->allow_tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    CUDNN_TRY(fn, cudnnSetConvolutionMathType, (p->conv, p->math));
    return plan_pick_algo(c, p, h, dir, !d->allow_nondeterministic, d);
}

/* The cached plan of the problem, built on a miss; the caller holds c->lock. */
static amp_status plan_get(amp_cuda_conv_state *c, const amp_conv2d_desc *d, conv_dir dir,
                           cudnnHandle_t h, conv_plan **out) {
    int64_t key[CONV_KEY_LEN];
    key_fill(key, d, dir);
    for (int i = 0; i < AMP_CONV_PLANS; i++) {
        if (c->plans[i].used && memcmp(c->plans[i].key, key, sizeof key) == 0) {
            *out = &c->plans[i];
            return AMP_OK;
        }
    }
    conv_plan *p = &c->plans[c->next_victim];
    c->next_victim = (c->next_victim + 1) % AMP_CONV_PLANS;
    plan_release(p);
    amp_status s = plan_build(c, p, key, h, d, dir);
    if (s != AMP_OK) {
        plan_release(p);
        return s;
    }
    *out = p;
    return AMP_OK;
}

/* The operands of one call: the direction's two inputs and its output. */
typedef struct conv_io {
    const void *in0, *in1;
    void *out;
    bool accumulate; /* forward with bias: out holds the bias already, beta = 1 */
} conv_io;

/* Enqueues the direction's cuDNN call on the context's stream; *ws receives the workspace (or
 * NULL), for the caller to free once the lock is dropped. The caller holds the context's lock. */
static amp_status conv_enqueue(amp_device_ctx *dev, const amp_conv2d_desc *d, conv_dir dir,
                               const conv_io *io, void **ws) {
    const char *fn = conv_fn[dir];
    cudnnHandle_t h = NULL;
    AMP_TRY(handle_get(dev, fn, &h));
    amp_cuda_conv_state *c = dev->conv;
    conv_plan *p = NULL;
    AMP_TRY(plan_get(c, d, dir, h, &p));
    if (p->ws_nbytes) AMP_TRY(amp_cuda_alloc(dev, p->ws_nbytes, ws));
    c->stats.math_type = (int)p->math;
    const float one = 1.0f, zero = 0.0f; /* host scalars, f32 for all three configurations */
    switch (dir) {
    case CONV_FWD:
        CUDNN_TRY(fn, cudnnConvolutionForward,
                  (h, &one, p->x, io->in0, p->w, io->in1, p->conv,
                   (cudnnConvolutionFwdAlgo_t)p->algo, *ws, p->ws_nbytes,
                   io->accumulate ? &one : &zero, p->y, io->out));
        c->stats.fwd_algo = p->algo;
        break;
    case CONV_BWD_DATA:
        CUDNN_TRY(fn, cudnnConvolutionBackwardData,
                  (h, &one, p->w, io->in1, p->y, io->in0, p->conv,
                   (cudnnConvolutionBwdDataAlgo_t)p->algo, *ws, p->ws_nbytes, &zero, p->x,
                   io->out));
        c->stats.bwd_data_algo = p->algo;
        break;
    default:
        CUDNN_TRY(fn, cudnnConvolutionBackwardFilter,
                  (h, &one, p->x, io->in0, p->y, io->in1, p->conv,
                   (cudnnConvolutionBwdFilterAlgo_t)p->algo, *ws, p->ws_nbytes, &zero, p->w,
                   io->out));
        c->stats.bwd_filter_algo = p->algo;
        break;
    }
    return AMP_OK;
}

static amp_status conv_run(amp_device_ctx *dev, const amp_conv2d_desc *d, conv_dir dir,
                           const conv_io *io) {
    void *ws = NULL;
    pthread_mutex_lock(&dev->conv->lock);
    amp_status s = conv_enqueue(dev, d, dir, io, &ws);
    pthread_mutex_unlock(&dev->conv->lock);
    /* Safe before the queued call ran: the allocator hands the block only to work queued later
     * on the same stream. */
    amp_cuda_free(dev, ws);
    return s;
}

/* The shared descriptor checks, then cuDNN's limit: its legacy descriptors take int sizes. */
static amp_status conv_check(conv_dir dir, const amp_conv2d_desc *d) {
    AMP_TRY(amp_backend_check_conv2d(conv_fn[dir], d));
    int64_t v[CONV_N_SIZES];
    desc_sizes(d, v);
    for (int i = 0; i < CONV_N_SIZES; i++)
        if (v[i] > INT_MAX)
            return amp_fail(AMP_ERR_UNSUPPORTED,
                            "%s: x [%lld, %lld, %lld, %lld], w [%lld, %lld, %lld, %lld], stride "
                            "(%lld, %lld), pad (%lld, %lld): cuDNN takes sizes up to %d",
                            conv_fn[dir], (long long)d->n, (long long)d->c_in,
                            (long long)d->h_in, (long long)d->w_in, (long long)d->c_out,
                            (long long)d->c_in, (long long)d->kh, (long long)d->kw,
                            (long long)d->stride_h, (long long)d->stride_w,
                            (long long)d->pad_h, (long long)d->pad_w, INT_MAX);
    return AMP_OK;
}

amp_status amp_cuda_conv2d_fwd(amp_device_ctx *dev, const amp_conv2d_desc *d, const void *x,
                               const void *w, const float *bias, void *y) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(y);
    AMP_TRY(conv_check(CONV_FWD, d));
    /* With a bias, y first holds it (rounded to y's dtype) and cuDNN adds the convolution to it
     * in f32 (beta = 1) with one rounding, as the backends' contract asks; adding the bias after
     * cuDNN's rounded output (PyTorch's output.add_(bias)) would round twice. */
    if (bias)
        AMP_TRY(amp_cuda_conv_bias_fill_launch(d->dtype, d->n, d->c_out, d->h_out * d->w_out, bias,
                                               y, dev->stream));
    conv_io io = {x, w, y, bias != NULL};
    return conv_run(dev, d, CONV_FWD, &io);
}

amp_status amp_cuda_conv2d_bwd_data(amp_device_ctx *dev, const amp_conv2d_desc *d, const void *dy,
                                    const void *w, void *dx) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(dx);
    AMP_TRY(conv_check(CONV_BWD_DATA, d));
    conv_io io = {dy, w, dx, false};
    return conv_run(dev, d, CONV_BWD_DATA, &io);
}

amp_status amp_cuda_conv2d_bwd_weight(amp_device_ctx *dev, const amp_conv2d_desc *d, const void *x,
                                      const void *dy, void *dw, float *dbias) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(dw);
    AMP_TRY(conv_check(CONV_BWD_FILTER, d));
    conv_io io = {x, dy, dw, false};
    AMP_TRY(conv_run(dev, d, CONV_BWD_FILTER, &io));
    if (!dbias) return AMP_OK;
    return amp_cuda_conv_bias_grad_launch(d->dtype, d->n, d->c_out, d->h_out * d->w_out, dy, dbias,
                                          dev->stream);
}

void amp_cuda_conv_shutdown(amp_device_ctx *dev) {
    amp_cuda_conv_state *c = dev->conv;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < AMP_CONV_PLANS; i++) plan_release(&c->plans[i]);
    c->next_victim = 0;
    if (c->handle) cudnnDestroy(c->handle);
    c->handle = NULL;
    pthread_mutex_unlock(&c->lock);
}

void amp_cuda_conv_stats_get(amp_device_ctx *dev, amp_cuda_conv_stats *out) {
    if (!out) return;
    pthread_mutex_lock(&dev->conv->lock);
    *out = dev->conv->stats;
    pthread_mutex_unlock(&dev->conv->lock);
}

void amp_cuda_conv_state_free(amp_device_ctx *dev, amp_cuda_conv_state *c) {
    if (!c) return;
    for (int i = 0; i < AMP_CONV_PLANS; i++) plan_release(&c->plans[i]);
    if (c->handle) cudnnDestroy(c->handle);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
