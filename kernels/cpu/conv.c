/* CPU 2-D convolution (forward, backward data, backward weight) through oneDNN.
 *
 * Tensors arrive plain (NCHW activations, OIHW weights). oneDNN's direct kernels want channel-
 * blocked layouts (nChw16c, OIhw16i16o, ...), so each plan lets oneDNN choose its layouts
 * (format_tag_any) and reorders the operands in and the result out through the thread's scratch
 * arena: the blocked kernel plus reorders beats oneDNN's plain-layout kernel (im2col + GEMM),
 * except backward data with very few input channels, where the blocked diff_src pads C to a
 * block of 16 and spends most of its time on padding: below CONV_BLOCKED_MIN_C_IN input channels
 * backward data stays plain. Backward weight with as few input channels runs channels-last
 * instead (NHWC activations, oneDNN's weight layout), the faster for 1 input channel and the
 * slower for 16. A CPU where oneDNN has only its reference kernel for it falls back to the
 * blocked layout. In bf16 that layer's backward weight is slow in every layout (oneDNN 2.6's AMX
 * kernel), so half backward weights with few input channels run widened to f32: the products of
 * half values are exact in f32 and both accumulate in f32, so nothing is lost. The figures:
 * bench/RESULTS.md, "Figures behind decisions in the code", conv.c.
 *
 * Outputs are overwritten; dbias (f32) is the sum of dy over N, H, W. x, w, y share one dtype:
 * f32, or bf16 (AVX512-BF16/AMX kernels, f32 accumulation; bias/dbias stay f32). Where oneDNN
 * has no kernel for the dtype on this CPU (f16: oneDNN 2.6 has no f16 CPU kernels) the operands
 * are widened to f32 and the result rounded back, through the f32 plan: an activation whose f32
 * layout keeps 16 channels together is widened into it and rounded back from it in one pass
 * (channel_blocks_avx512.c) instead of a widening pass plus a reorder (figures: the same
 * section).
 *
 * The descriptor's allow_tf32 and allow_nondeterministic are ignored: this CPU has no TF32
 * arithmetic, and every algorithm here is deterministic.
 *
 * Determinism: the same inputs give the same bits on every call with the same thread count.
 * Forward and backward data keep their bits across thread counts; the weight and bias gradients
 * do not (oneDNN reduces over the batch per thread). Plans are keyed by the thread count. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dnnl_util.h"

/* Input channels from which backward data uses the blocked layouts (see the header comment;
 * 8 is where blocked overtook plain in the measurement there). */
#define CONV_BLOCKED_MIN_C_IN 8

typedef enum conv_op { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHT } conv_op;

static const char *const conv_op_name[] = {"amp_cpu_conv2d_fwd", "amp_cpu_conv2d_bwd_data",
                                           "amp_cpu_conv2d_bwd_weight"};

/* The oneDNN argument of each of an op's three tensors, in the order of the entry point's
 * pointers: two inputs, then the output. */
static const int conv_args[3][3] = {
    [CONV_FWD] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
    [CONV_BWD_DATA] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
    [CONV_BWD_WEIGHT] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS},
};

/* Which of x (0), w (1), y (2) each of an op's three tensors is. */
static const int conv_xwy[3][3] = {
    [CONV_FWD] = {0, 1, 2}, [CONV_BWD_DATA] = {2, 1, 0}, [CONV_BWD_WEIGHT] = {0, 2, 1}};

/* The pointers of one call: the op's two inputs, its output, and bias (fwd) or dbias (bwd
 * weight), f32, NULL when absent. */
typedef struct conv_io {
    const void *in[2];
    void *out;
    const float *bias;
} conv_io;

/* Zeroed before filling: the cache compares its bytes. */
typedef struct conv_key {
    amp_conv2d_desc d;
    int32_t op, has_bias, n_threads, unused;
} conv_key;

/* One tensor of the call: the caller's plain layout, the primitive's, and the reorder between
 * them (user -> primitive for inputs, primitive -> user for the output) when they differ. */
typedef struct conv_tensor {
    dnnl_memory_desc_t user_md, prim_md, reorder_scratch_md;
    dnnl_primitive_t reorder;
    size_t offset; /* of the primitive-layout copy in the scratch arena */
} conv_tensor;

typedef struct conv_plan {
    dnnl_primitive_t prim; /* NULL: no kernel for this dtype here, widen to f32 */
    conv_tensor t[3];
    dnnl_memory_desc_t bias_md, scratch_md;
    size_t scratch_nbytes; /* largest scratchpad of all steps, at offset 0 of the arena */
    size_t arena_nbytes;
} conv_plan;

static void conv_plan_destroy(void *p) {
    conv_plan *plan = p;
    if (plan->prim) dnnl_primitive_destroy(plan->prim);
    for (int i = 0; i < 3; i++)
        if (plan->t[i].reorder) dnnl_primitive_destroy(plan->t[i].reorder);
    free(plan);
}

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

/* The activations' layout a plan asks oneDNN for: the caller's (NCHW), oneDNN's choice (`any`:
 * channel-blocked), or channels-last with the weights' layout left to oneDNN. */
typedef enum conv_layout { CONV_PLAIN, CONV_ANY, CONV_NHWC } conv_layout;

/* The x, w and y descriptors of the convolution in that layout. */
static amp_status conv_mds(const amp_conv2d_desc *d, conv_layout layout, dnnl_memory_desc_t md[3]) {
    dnnl_data_type_t dt = dnnl_f32;
    AMP_TRY(amp_dnnl_dtype(d->dtype, "convolution tensors", &dt));
    dnnl_dims_t x = {d->n, d->c_in, d->h_in, d->w_in};
    dnnl_dims_t w = {d->c_out, d->c_in, d->kh, d->kw};
    dnnl_dims_t y = {d->n, d->c_out, d->h_out, d->w_out};
    dnnl_format_tag_t act = layout == CONV_ANY    ? dnnl_format_tag_any
                            : layout == CONV_NHWC ? dnnl_nhwc
                                                  : dnnl_nchw;
    dnnl_format_tag_t wei = layout == CONV_PLAIN ? dnnl_oihw : dnnl_format_tag_any;
    AMP_DNNL_TRY(dnnl_memory_desc_init_by_tag(&md[0], 4, x, dt, act));
    AMP_DNNL_TRY(dnnl_memory_desc_init_by_tag(&md[1], 4, w, dt, wei));
    AMP_DNNL_TRY(dnnl_memory_desc_init_by_tag(&md[2], 4, y, dt, act));
    return AMP_OK;
}

/* Creates the primitive descriptor of the key's op in the given layout. Backward ops need a
 * forward one as hint. */
static amp_status conv_pd_create_in(const conv_key *key, conv_layout layout,
                                    dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd) {
    const amp_conv2d_desc *d = &key->d;
    dnnl_memory_desc_t md[3], bias_md;
    AMP_TRY(conv_mds(d, layout, md));
    dnnl_dims_t bias_dims = {d->c_out};
    AMP_DNNL_TRY(dnnl_memory_desc_init_by_tag(&bias_md, 1, bias_dims, dnnl_f32, dnnl_a));
    const dnnl_memory_desc_t *bias = key->has_bias ? &bias_md : NULL;
    dnnl_dims_t strides = {d->stride_h, d->stride_w}, pad = {d->pad_h, d->pad_w};

    dnnl_convolution_desc_t fwd;
    AMP_DNNL_TRY(dnnl_convolution_forward_desc_init(&fwd, dnnl_forward_training,
                                                    dnnl_convolution_direct, &md[0], &md[1], bias,
                                                    &md[2], strides, pad, pad));
    dnnl_primitive_desc_t fwd_pd = NULL;
    AMP_TRY(amp_dnnl_pd_create(&fwd, attr, NULL, &fwd_pd));
    if (key->op == CONV_FWD) {
        *pd = fwd_pd;
        return AMP_OK;
    }
    dnnl_convolution_desc_t bwd;
    dnnl_status_t s =
        key->op == CONV_BWD_DATA
            ? dnnl_convolution_backward_data_desc_init(&bwd, dnnl_convolution_direct, &md[0],
                                                       &md[1], &md[2], strides, pad, pad)
            : dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &md[0],
                                                          &md[1], bias, &md[2], strides, pad, pad);
    amp_status as = s == dnnl_success ? amp_dnnl_pd_create(&bwd, attr, fwd_pd, pd)
                                      : amp_dnnl_fail(s, "dnnl_convolution_backward_*_desc_init",
                                                      __func__);
    dnnl_primitive_desc_destroy(fwd_pd);
    return as;
}

/* The layout per op (see the header comment): with few input channels, backward weight
 * channels-last (unless oneDNN has only its reference kernel for it there) and backward data
 * plain; the rest blocked. */
static amp_status conv_pd_create(const conv_key *key, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd) {
    bool few_c_in = key->d.c_in < CONV_BLOCKED_MIN_C_IN;
    if (key->op == CONV_BWD_WEIGHT && few_c_in) {
        amp_status s = conv_pd_create_in(key, CONV_NHWC, attr, pd);
        if (s != AMP_OK && s != AMP_ERR_UNSUPPORTED) return s;
        if (s == AMP_OK) {
            if (!amp_dnnl_pd_is_reference(*pd)) return AMP_OK;
            dnnl_primitive_desc_destroy(*pd);
            *pd = NULL;
        }
    }
    return conv_pd_create_in(key, key->op == CONV_BWD_DATA && few_c_in ? CONV_PLAIN : CONV_ANY,
                             attr, pd);
}

/* Fills a tensor's reorder (when the primitive's layout differs from the plain one). */
static amp_status conv_tensor_fill(conv_tensor *t, bool is_output, dnnl_primitive_attr_t attr) {
    if (dnnl_memory_desc_equal(&t->user_md, &t->prim_md)) return AMP_OK;
    dnnl_engine_t engine = NULL;
    AMP_TRY(amp_dnnl_engine(&engine));
    const dnnl_memory_desc_t *from = is_output ? &t->prim_md : &t->user_md;
    const dnnl_memory_desc_t *to = is_output ? &t->user_md : &t->prim_md;
    dnnl_primitive_desc_t pd = NULL;
    AMP_DNNL_TRY(dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, attr));
    t->reorder_scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_status_t s = dnnl_primitive_create(&t->reorder, pd);
    dnnl_primitive_desc_destroy(pd);
    AMP_DNNL_TRY(s);
    return AMP_OK;
}

static amp_status conv_plan_fill(conv_plan *plan, const conv_key *key, dnnl_primitive_attr_t attr) {
    dnnl_memory_desc_t user[3];
    AMP_TRY(conv_mds(&key->d, CONV_PLAIN, user));
    dnnl_dims_t bias_dims = {key->d.c_out};
    AMP_DNNL_TRY(dnnl_memory_desc_init_by_tag(&plan->bias_md, 1, bias_dims, dnnl_f32, dnnl_a));
    dnnl_primitive_desc_t pd = NULL;
    amp_status s = conv_pd_create(key, attr, &pd);
    if (s == AMP_ERR_UNSUPPORTED && key->d.dtype != AMP_F32) return AMP_OK; /* widen */
    AMP_TRY(s);
    if (key->d.dtype != AMP_F32 && amp_dnnl_pd_is_reference(pd)) { /* widen: the f32 kernels */
        dnnl_primitive_desc_destroy(pd);
        return AMP_OK;
    }
    plan->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    plan->scratch_nbytes = dnnl_memory_desc_get_size(&plan->scratch_md);
    for (int i = 0; i < 3; i++) {
        plan->t[i].user_md = user[conv_xwy[key->op][i]];
        plan->t[i].prim_md =
            *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, conv_args[key->op][i]);
    }
    dnnl_status_t ds = dnnl_primitive_create(&plan->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    AMP_DNNL_TRY(ds);
    for (int i = 0; i < 3; i++) {
        AMP_TRY(conv_tensor_fill(&plan->t[i], i == 2, attr));
        size_t scratch = dnnl_memory_desc_get_size(&plan->t[i].reorder_scratch_md);
        if (scratch > plan->scratch_nbytes) plan->scratch_nbytes = scratch;
    }
    /* Arena: the scratchpad the steps share (they run one after another), then the copies. */
    size_t offset = align64(plan->scratch_nbytes);
    for (int i = 0; i < 3; i++) {
        if (!plan->t[i].reorder) continue;
        plan->t[i].offset = offset;
        offset += align64(dnnl_memory_desc_get_size(&plan->t[i].prim_md));
    }
    plan->arena_nbytes = offset;
    return AMP_OK;
}

static amp_status conv_plan_build(const void *k, void **out) {
    conv_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return amp_fail(AMP_ERR_OOM, "%s: out of host memory", __func__);
    dnnl_primitive_attr_t attr = NULL;
    amp_status s = amp_dnnl_attr_create(&attr);
    if (s == AMP_OK) {
        s = conv_plan_fill(plan, k, attr);
        dnnl_primitive_attr_destroy(attr);
    }
    if (s != AMP_OK) {
        conv_plan_destroy(plan);
        return s;
    }
    *out = plan;
    return AMP_OK;
}

/* Runs a reorder between the caller's buffer and its primitive-layout copy. */
static amp_status conv_reorder(const conv_tensor *t, dnnl_memory_t from, dnnl_memory_t to,
                               void *arena, amp_dnnl_mems *mems) {
    dnnl_memory_t scratch = NULL;
    AMP_TRY(amp_dnnl_mem(mems, &t->reorder_scratch_md, arena, &scratch));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to},
                               {DNNL_ARG_SCRATCHPAD, scratch}};
    return amp_dnnl_execute(t->reorder, 3, args);
}

/* Runs the primitive on its three tensors (in the primitive's layouts), the scratchpad at the
 * start of the arena, and the bias or bias gradient of io. */
static amp_status conv_execute(const conv_plan *plan, conv_op op, const conv_io *io,
                               dnnl_memory_t prim[3], void *arena, amp_dnnl_mems *mems) {
    dnnl_exec_arg_t args[5];
    int n_args = 0;
    for (int i = 0; i < 3; i++) args[n_args++] = (dnnl_exec_arg_t){conv_args[op][i], prim[i]};
    dnnl_memory_t scratch = NULL;
    AMP_TRY(amp_dnnl_mem(mems, &plan->scratch_md, arena, &scratch));
    args[n_args++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch};
    if (io->bias) {
        dnnl_memory_t b = NULL;
        AMP_TRY(amp_dnnl_mem(mems, &plan->bias_md, io->bias, &b));
        args[n_args++] = (dnnl_exec_arg_t){op == CONV_FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, b};
    }
    return amp_dnnl_execute(plan->prim, n_args, args);
}

static amp_status conv_run(const conv_plan *plan, conv_op op, const conv_io *io,
                           amp_dnnl_mems *mems) {
    void *arena = NULL;
    if (plan->arena_nbytes) AMP_TRY(amp_dnnl_scratch(plan->arena_nbytes, &arena));
    dnnl_memory_t user[3] = {NULL}, prim[3] = {NULL};
    for (int i = 0; i < 3; i++) {
        const conv_tensor *t = &plan->t[i];
        AMP_TRY(amp_dnnl_mem(mems, &t->user_md, i < 2 ? io->in[i] : io->out, &user[i]));
        prim[i] = user[i];
        if (t->reorder) {
            AMP_TRY(amp_dnnl_mem(mems, &t->prim_md, (char *)arena + t->offset, &prim[i]));
            if (i < 2) AMP_TRY(conv_reorder(t, user[i], prim[i], arena, mems));
        }
    }
    AMP_TRY(conv_execute(plan, op, io, prim, arena, mems));
    if (plan->t[2].reorder) AMP_TRY(conv_reorder(&plan->t[2], prim[2], user[2], arena, mems));
    return amp_dnnl_wait();
}

static int64_t numel4(int64_t a, int64_t b, int64_t c, int64_t d) { return a * b * c * d; }

/* The elements of x (0), w (1) or y (2). */
static int64_t conv_numel(const amp_conv2d_desc *d, int xwy) {
    return xwy == 0   ? numel4(d->n, d->c_in, d->h_in, d->w_in)
           : xwy == 1 ? numel4(d->c_out, d->c_in, d->kh, d->kw)
                      : numel4(d->n, d->c_out, d->h_out, d->w_out);
}

/* The channels and the positions of a plane of activation x (0) or y (2). */
static int64_t conv_channels(const amp_conv2d_desc *d, int xwy) {
    return xwy == 0 ? d->c_in : d->c_out;
}
static int64_t conv_plane(const amp_conv2d_desc *d, int xwy) {
    return xwy == 0 ? d->h_in * d->w_in : d->h_out * d->w_out;
}

/* Whether md, the f32 layout the kernel takes for an activation, keeps each 16 channels of a
 * position together with the positions of a plane evenly spaced (nChw16c; channels-last with
 * 16 channels), and where it puts them: then amp_cpu_widen_to_c16 and amp_cpu_narrow_from_c16
 * convert between it and half NCHW in one pass. */
static bool conv_c16_layout(const dnnl_memory_desc_t *md, amp_c16_layout *l) {
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->ndims != 4 || md->format_kind != dnnl_blocked || md->offset0 != 0 ||
        md->extra.flags != 0 || md->dims[1] % 16 != 0)
        return false;
    for (int i = 0; i < 4; i++)
        if (md->padded_dims[i] != md->dims[i] || md->padded_offsets[i] != 0) return false;
    if (b->strides[2] != md->dims[3] * b->strides[3]) return false;
    if (b->inner_nblks == 1 && b->inner_blks[0] == 16 && b->inner_idxs[0] == 1) {
        *l = (amp_c16_layout){.n = b->strides[0], .block = b->strides[1], .hw = b->strides[3]};
        return true;
    }
    if (b->inner_nblks == 0 && b->strides[1] == 1) {
        *l = (amp_c16_layout){.n = b->strides[0], .block = 16, .hw = b->strides[3]};
        return true;
    }
    return false;
}

/* Whether conv_run_widened converts tensor i of the call straight between half NCHW and the
 * kernel's layout (l). */
static bool conv_direct(const conv_plan *plan, conv_op op, const amp_conv2d_desc *d, int i,
                        bool out_f32, amp_c16_layout *l) {
    int xwy = conv_xwy[op][i];
    return plan->t[i].reorder && xwy != 1 && !(i == 2 && out_f32) &&
           amp_cpu_c16_vectorised(d->dtype, conv_channels(d, xwy)) &&
           conv_c16_layout(&plan->t[i].prim_md, l);
}

/* A half call through plan, the f32 plan of the same convolution (oneDNN has no kernel for the
 * half dtype here). Each half input is widened to f32 in the layout the kernel takes: in one
 * pass when that layout keeps 16 channels together (conv_c16_layout), else into a dense copy
 * that the plan's reorder (if any) then converts. The output goes back the same ways, rounded
 * to d->dtype, or in f32 when out_f32 (the parts the sliced backward weight adds). `dense`
 * holds the dense copies: room for every tensor of the call in f32 (conv_dense_nbytes). */
static amp_status conv_run_widened(const conv_plan *plan, conv_op op, const amp_conv2d_desc *d,
                                   const conv_io *io, bool out_f32, char *dense,
                                   amp_dnnl_mems *mems) {
    void *arena = NULL;
    if (plan->arena_nbytes) AMP_TRY(amp_dnnl_scratch(plan->arena_nbytes, &arena));
    dnnl_memory_t prim[3] = {NULL}, flat[3] = {NULL};
    float *flat_p[3] = {NULL}, *blocked_p[3] = {NULL};
    bool direct[3] = {false};
    amp_c16_layout l[3];
    for (int i = 0; i < 3; i++) {
        const conv_tensor *t = &plan->t[i];
        int xwy = conv_xwy[op][i];
        int64_t numel = conv_numel(d, xwy);
        bool f32_out = i == 2 && out_f32;
        direct[i] = conv_direct(plan, op, d, i, out_f32, &l[i]);
        if (t->reorder) {
            blocked_p[i] = (float *)((char *)arena + t->offset);
            AMP_TRY(amp_dnnl_mem(mems, &t->prim_md, blocked_p[i], &prim[i]));
        }
        if (!direct[i]) {
            flat_p[i] = f32_out ? (float *)io->out : (float *)dense;
            if (!f32_out) dense += amp_dnnl_f32_nbytes(numel);
            AMP_TRY(amp_dnnl_mem(mems, &t->user_md, flat_p[i], &flat[i]));
            if (!t->reorder) prim[i] = flat[i];
        }
        if (i == 2) break;
        if (direct[i]) {
            amp_cpu_widen_to_c16(blocked_p[i], &l[i], io->in[i], d->dtype, d->n,
                                 conv_channels(d, xwy), conv_plane(d, xwy));
        } else {
            amp_dnnl_widen(flat_p[i], numel, io->in[i], d->dtype, 1, numel, 0);
            if (t->reorder) AMP_TRY(conv_reorder(t, flat[i], prim[i], arena, mems));
        }
    }
    AMP_TRY(conv_execute(plan, op, io, prim, arena, mems));
    AMP_TRY(amp_dnnl_wait());
    int out = conv_xwy[op][2];
    if (direct[2]) {
        amp_cpu_narrow_from_c16(io->out, d->dtype, blocked_p[2], &l[2], d->n,
                                conv_channels(d, out), conv_plane(d, out));
        return AMP_OK;
    }
    if (plan->t[2].reorder) {
        AMP_TRY(conv_reorder(&plan->t[2], prim[2], flat[2], arena, mems));
        AMP_TRY(amp_dnnl_wait());
    }
    if (!out_f32) amp_dnnl_narrow(io->out, d->dtype, 1, conv_numel(d, out), 0, flat_p[2]);
    return AMP_OK;
}

/* Room for the dense f32 copies conv_run_widened makes with plan (NULL: at most, every tensor
 * of the call). */
static size_t conv_dense_nbytes(const conv_plan *plan, conv_op op, const amp_conv2d_desc *d,
                                bool out_f32) {
    size_t n = 0;
    amp_c16_layout l;
    for (int i = 0; i < 3; i++)
        if (!plan || (!conv_direct(plan, op, d, i, out_f32, &l) && !(i == 2 && out_f32)))
            n += amp_dnnl_f32_nbytes(conv_numel(d, conv_xwy[op][i]));
    return n;
}

/* The f32 plan of a half convolution (d with dtype f32), held until amp_dnnl_cache_put. */
static amp_status conv_f32_plan(conv_op op, const amp_conv2d_desc *d, bool has_bias,
                                conv_plan **plan, amp_dnnl_cache_ref **ref);

/* No oneDNN kernel for this dtype: through the f32 plan (conv_run_widened). */
static amp_status conv_widened(conv_op op, const amp_conv2d_desc *d, const conv_io *io) {
    conv_plan *plan = NULL;
    amp_dnnl_cache_ref *ref = NULL;
    AMP_TRY(conv_f32_plan(op, d, io->bias != NULL, &plan, &ref));
    char *dense = NULL;
    amp_status s = amp_dnnl_arena(AMP_DNNL_ARENA_WIDEN, conv_dense_nbytes(plan, op, d, false),
                                  (void **)&dense);
    amp_dnnl_mems mems = {0};
    if (s == AMP_OK) s = conv_run_widened(plan, op, d, io, false, dense, &mems);
    amp_dnnl_mems_free(&mems);
    amp_dnnl_cache_put(ref);
    return s;
}

/* Bytes of f32 copies (x and dy, then the channels-last copies the f32 kernel reorders them
 * into) that a widened backward weight takes at most a slice of the batch at a time. */
#define CONV_WIDEN_SLICE_BYTES ((size_t)4 << 20)

/* A half backward weight widened to f32, a slice of the batch at a time: the f32 copies of x and
 * dy, and the reorders of them the f32 kernel makes, then hold a slice instead of the batch (the
 * ConvNet's first layer at batch 512: 26 MiB of f32 copies and 24.5 MiB of reorders, against
 * about 4 and 3 in slices of 74). Each slice's dW and dbias come out in f32 and are added in f32
 * in slice order, then dW is rounded once. The bits depend on the slicing, fixed by the shape. */
static amp_status conv_widened_bwd_weight(const amp_conv2d_desc *d, const conv_io *io) {
    int64_t per_x = numel4(1, d->c_in, d->h_in, d->w_in);
    int64_t per_y = numel4(1, d->c_out, d->h_out, d->w_out);
    int64_t nw = numel4(d->c_out, d->c_in, d->kh, d->kw);
    int64_t most = (int64_t)(CONV_WIDEN_SLICE_BYTES / ((size_t)(per_x + per_y) * sizeof(float)));
    if (most < 1) most = 1;
    int64_t n_slices = (d->n + most - 1) / most;
    int64_t slice = (d->n + n_slices - 1) / n_slices;
    amp_conv2d_desc sd = *d;
    sd.n = slice;
    size_t bd = conv_dense_nbytes(NULL, CONV_BWD_WEIGHT, &sd, true);
    size_t bw = amp_dnnl_f32_nbytes(nw), bb = amp_dnnl_f32_nbytes(d->c_out);
    char *arena = NULL;
    AMP_TRY(amp_dnnl_arena(AMP_DNNL_ARENA_WIDEN, bd + 2 * bw + 2 * bb, (void **)&arena));
    char *dense = arena;
    float *dw = (float *)(arena + bd), *dw_part = (float *)(arena + bd + bw);
    float *db_part = (float *)(arena + bd + 2 * bw);
    float *db = (float *)io->bias; /* dbias (f32, the caller's output) or NULL */
    float *db_out = db ? (float *)(arena + bd + 2 * bw + bb) : NULL;
    size_t esz = amp_dtype_size(d->dtype);
    for (int64_t n0 = 0; n0 < d->n; n0 += slice) {
        sd.n = d->n - n0 < slice ? d->n - n0 : slice;
        bool first = n0 == 0;
        conv_io sio = {{(const char *)io->in[0] + (size_t)(n0 * per_x) * esz,
                        (const char *)io->in[1] + (size_t)(n0 * per_y) * esz},
                       first ? dw : dw_part,
                       db ? (first ? db_out : db_part) : NULL};
        conv_plan *plan = NULL;
        amp_dnnl_cache_ref *ref = NULL;
        AMP_TRY(conv_f32_plan(CONV_BWD_WEIGHT, &sd, db != NULL, &plan, &ref));
        amp_dnnl_mems mems = {0};
        amp_status s = conv_run_widened(plan, CONV_BWD_WEIGHT, &sd, &sio, true, dense, &mems);
        amp_dnnl_mems_free(&mems);
        amp_dnnl_cache_put(ref);
        AMP_TRY(s);
        if (first) continue;
        for (int64_t i = 0; i < nw; i++) dw[i] += dw_part[i];
        for (int64_t i = 0; db && i < d->c_out; i++) db_out[i] += db_part[i];
    }
    amp_dnnl_narrow(io->out, d->dtype, 1, nw, 0, dw);
    if (db) memcpy(db, db_out, (size_t)d->c_out * sizeof *db);
    return AMP_OK;
}

/* The checks every backend makes (core/backend_check.c); oneDNN then takes any of the three
 * float dtypes (f16 widened where it has no kernel). */
static amp_status conv_validate(conv_op op, const amp_conv2d_desc *d) {
    return amp_backend_check_conv2d(conv_op_name[op], d);
}

/* The plan of d's op (its dtype's, or NULL prim where oneDNN has no kernel for it), held until
 * amp_dnnl_cache_put. */
static amp_status conv_plan_get(conv_op op, const amp_conv2d_desc *d, bool has_bias,
                                conv_plan **plan, amp_dnnl_cache_ref **ref) {
    conv_key key;
    memset(&key, 0, sizeof key);
    key.d = *d;
    /* Ignored here (true f32, deterministic): not a reason for another plan. */
    key.d.allow_tf32 = key.d.allow_nondeterministic = false;
    key.op = op;
    key.has_bias = has_bias;
    key.n_threads = amp_dnnl_threads();
    amp_status s = amp_dnnl_cache_get(&key, sizeof key, conv_plan_build, conv_plan_destroy,
                                      (void **)plan, ref);
    if (s != AMP_OK)
        return amp_fail_context(s, "%s(x [%lld, %lld, %lld, %lld], w [%lld, %lld, %lld, %lld], %s)",
                                conv_op_name[op], (long long)d->n, (long long)d->c_in,
                                (long long)d->h_in, (long long)d->w_in, (long long)d->c_out,
                                (long long)d->c_in, (long long)d->kh, (long long)d->kw,
                                amp_dtype_name(d->dtype));
    return AMP_OK;
}

static amp_status conv_f32_plan(conv_op op, const amp_conv2d_desc *d, bool has_bias,
                                conv_plan **plan, amp_dnnl_cache_ref **ref) {
    amp_conv2d_desc f = *d;
    f.dtype = AMP_F32;
    AMP_TRY(conv_plan_get(op, &f, has_bias, plan, ref));
    if ((*plan)->prim) return AMP_OK;
    amp_dnnl_cache_put(*ref);
    return amp_fail(AMP_ERR_UNSUPPORTED, "%s: oneDNN has no f32 kernel for this convolution",
                    conv_op_name[op]);
}

static amp_status conv_call(conv_op op, const amp_conv2d_desc *d, const conv_io *io) {
    /* A half backward weight with few input channels runs widened to f32 (see the header). */
    if (op == CONV_BWD_WEIGHT && d->dtype != AMP_F32 && d->c_in < CONV_BLOCKED_MIN_C_IN)
        return conv_widened_bwd_weight(d, io);
    conv_plan *plan = NULL;
    amp_dnnl_cache_ref *ref = NULL;
    AMP_TRY(conv_plan_get(op, d, io->bias != NULL, &plan, &ref));
    amp_status s;
    if (plan->prim) {
        amp_dnnl_mems mems = {0};
        s = conv_run(plan, op, io, &mems);
        amp_dnnl_mems_free(&mems);
        amp_dnnl_cache_put(ref);
    } else {
        amp_dnnl_cache_put(ref);
        s = conv_widened(op, d, io);
    }
    return s;
}

amp_status amp_cpu_conv2d_fwd(amp_device_ctx *dev, const amp_conv2d_desc *d, const void *x,
                              const void *w, const float *bias, void *y) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(y);
    AMP_TRY(conv_validate(CONV_FWD, d));
    conv_io io = {{x, w}, y, bias};
    return conv_call(CONV_FWD, d, &io);
}

amp_status amp_cpu_conv2d_bwd_data(amp_device_ctx *dev, const amp_conv2d_desc *d, const void *dy,
                                   const void *w, void *dx) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(w);
    AMP_CHECK_ARG(dx);
    AMP_TRY(conv_validate(CONV_BWD_DATA, d));
    conv_io io = {{dy, w}, dx, NULL};
    return conv_call(CONV_BWD_DATA, d, &io);
}

amp_status amp_cpu_conv2d_bwd_weight(amp_device_ctx *dev, const amp_conv2d_desc *d, const void *x,
                                     const void *dy, void *dw, float *dbias) {
    AMP_CHECK_ARG(d);
    AMP_CHECK_ARG(x);
    AMP_CHECK_ARG(dy);
    AMP_CHECK_ARG(dw);
    AMP_TRY(conv_validate(CONV_BWD_WEIGHT, d));
    conv_io io = {{x, dy}, dw, dbias};
    return conv_call(CONV_BWD_WEIGHT, d, &io);
}
