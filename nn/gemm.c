/* The GEMM helpers of the ops (nn/gemm_internal.h): descriptors of row-major tensors, the
 * gradient GEMM that writes an f32 weight's gradient in place, and a GEMM input written again
 * in backward (selective recomputation). */
#include "core/error.h"
#include "nn/autocast.h"
#include "nn/gemm_internal.h"

/* C[m, n] = op(A) op(B) of row-major tensors, C overwritten, with the context's TF32 switch; the
 * caller adds a bias, an epilogue or a bias gradient. c: the output, or the tensor whose
 * gradient C is (amp_gemm_grad then points C at it). */
amp_gemm_desc amp_gemm_desc_of(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                      const amp_tensor *a, int64_t lda, const amp_tensor *b,
                                      int64_t ldb, amp_tensor *c) {
    return (amp_gemm_desc){.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f,
                           .beta = 0.0f, .a = a->data, .a_dtype = a->dtype, .lda = lda,
                           .b = b->data, .b_dtype = b->dtype, .ldb = ldb, .c = c->data,
                           .c_dtype = c->dtype, .ldc = n, .allow_tf32 = c->ctx->allow_tf32};
}

amp_status amp_gemm(const amp_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           const amp_tensor *a, int64_t lda, const amp_tensor *b, int64_t ldb,
                           amp_tensor *c) {
    amp_gemm_desc d = amp_gemm_desc_of(ta, tb, m, n, k, a, lda, b, ldb, c);
    return AMP_BE(be, gemm, &d);
}

/* C = the gradient of t, from the GEMM d (its C unset): written through t's sink; or, when t is
 * autocast's half copy of an f32 tensor (O1's per-step weight cast), straight into that tensor's
 * f32 gradient (half x half -> f32, beta 1 after an earlier contribution). That skips the half
 * gradient, its rounding to half and the cast's backward pass over it (which torch.autocast and
 * Apex O1 make: a read of the half gradient and a write of the f32 one per parameter); an
 * overflow of the half type there no longer reaches the f32 gradient. *wrote: whether t wanted
 * a gradient at all. */
amp_status amp_gemm_grad(const amp_backend *be, amp_gemm_desc d, amp_tensor *t, bool *wrote) {
    *wrote = false;
    amp_tensor *src = amp_cast_f32_source(t);
    /* An f32 leaf (a parameter at O0 and O1, an input) takes the GEMM's output in place too, with
     * beta 1 after an earlier contribution: the bits of a temporary added to it (the GEMM sums
     * in f32 either way, and the f32 sum is rounded once), without the temporary, which
     * accumulation over micro-batches would otherwise need for every weight. */
    if (!src && t && t->requires_grad && t->dtype == AMP_F32 && !(t->flags & AMP_TENSOR_STEP))
        src = t;
    if (src) {
        amp_tensor *g;
        AMP_TRY(amp_grad_target(src, &g, &d.beta));
        d.c = g->data;
        d.c_dtype = AMP_F32;
        AMP_TRY(AMP_BE(be, gemm, &d));
        amp_grad_mark_written(src);
        *wrote = true;
        return AMP_OK;
    }
    amp_grad_sink s;
    AMP_TRY(amp_grad_begin(t, &s));
    if (s.buf) {
        d.c = s.buf->data;
        d.c_dtype = s.buf->dtype;
        AMP_TRY(AMP_BE(be, gemm, &d));
        *wrote = true;
    }
    return amp_grad_end(&s);
}

amp_status amp_check_recompute_input(const char *op, const amp_tensor *x) {
    if (!(x->node && x->node->regenerate))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.recompute_input: x is not the output of an "
                        "op that can write it again in backward (amp_norm's, "
                        "amp_linear_swiglu's or amp_linear_ex's with a GELU, directly or through "
                        "amp_reshape, in the dtype the op reads: no autocast cast between)",
                        op);
    /* Written in place since its producer ran: the producer would write the old values. */
    if (*x->version != x->node->out_version)
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: opts.recompute_input: x was written in place "
                        "after the %s that made it (write version %llu, made at %llu), so its "
                        "producer cannot write these values again; keep x (recompute_input "
                        "false) or write a copy",
                        op, x->node->op, (unsigned long long)*x->version,
                        (unsigned long long)x->node->out_version);
    return AMP_OK;
}

amp_status amp_regenerate_input(amp_tensor *x, amp_tensor **xv) {
    AMP_TRY(amp_tensor_step_like(x, x->dtype, xv));
    return x->node->regenerate(x->node, *xv);
}
