/* test_backend_ops: the entries of the transformer ops (reduce_dim, scatter_dim, binary_bcast,
 * where, copy_strided, layernorm_*, softmax_*, embedding_*, rope, swiglu_*, xent_*, attn_*), their
 * setups, runs and rows. Included by
 * test_backend_ops.c after op_row, its helpers and the tolerance macros.
 *
 * These entries share their arithmetic and its order between the backends (kernels/math/
 * transcendental.h, lanes.h, strided.h; f64 sums in index order), so their rows are EXACT, or
 * TOL(0, 0) where specials put NaNs in (which NaN an operation makes is the hardware's). */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_TRANSFORMER_H
#define AMP_TESTS_GPU_BACKEND_OPS_TRANSFORMER_H

/* Row variants of these entries (from 1 << 10, as the other headers' variants of their own). */
enum {
    LN_RMS = 1 << 10, LN_RESIDUAL = 1 << 11, LN_NO_BIAS = 1 << 12, /* layernorm_* */
    LN_HALF_R = 1 << 13, LN_HALF_Y = 1 << 14, /* the residual, or y and dy, in dt2 */
    LN_ACCUMULATE = 1 << 15,                  /* layernorm_bwd adds into dx */
    LOG_SOFTMAX = 1 << 13, SM_MASKED = 1 << 14,                   /* softmax_* */
    XENT_IGNORE = 1 << 15, XENT_SUM = 1 << 16,                    /* xent_* */
    ATTN_CAUSAL = 1 << 17, ATTN_PADDED = 1 << 18, ATTN_PACKED = 1 << 19, /* attn_* */
    ROPE_INTERLEAVED = 1 << 10, ROPE_INVERSE = 1 << 11,                 /* rope */
    SWIGLU_APART = 1 << 10, /* swiglu_*: a and b two dense tensors (else halves of one) */
};

/* reduce_dim: s = {outer, n, inner}, op (amp_reduce_op), f = {alpha}; a max row writes idx. */
static void setup_reduce_dim(const op_row *r, tcase *c) {
    in_main(r, c, 0, "x", ek_of(r->dt), r->s[0] * r->s[1] * r->s[2]);
    slot_decl(c, 1, "y", ROLE_OUT, ek_of(r->dt), r->s[0] * r->s[2]);
    if (r->op == AMP_REDUCE_MAX) slot_decl(c, 2, "idx", ROLE_OUT, EK_I32, r->s[0] * r->s[2]);
}
static amp_status run_reduce_dim(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.reduce_dim(be->dev, (amp_reduce_op)r->op, r->dt, r->s[0], r->s[1], r->s[2], p[0],
                            r->f[0], p[1], r->op == AMP_REDUCE_MAX ? p[2] : NULL);
}

/* scatter_dim: s = {outer, n, inner}; idx in [0, n). */
static void setup_scatter_dim(const op_row *r, tcase *c) {
    int64_t m = r->s[0] * r->s[2];
    int32_t *idx = slot_decl(c, 0, "idx", ROLE_IN, EK_I32, m);
    for (int64_t j = 0; j < m; j++) idx[j] = (int32_t)rng_below(&c->rng, r->s[1]);
    in_main(r, c, 1, "dy", ek_of(r->dt), m);
    slot_decl(c, 2, "dx", ROLE_OUT, ek_of(r->dt), r->s[0] * r->s[1] * r->s[2]);
}
static amp_status run_scatter_dim(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.scatter_dim(be->dev, r->dt, r->s[0], r->s[1], r->s[2], p[0], p[1], p[2]);
}

/* binary_bcast: s = {ndim, flags-free shape...}: the output [s1, s2, s3, s4] (ndim 4) with a
 * broadcast along the dims whose bit is set in f[0] for a and f[1] for b (bit k: dim k). */
static void bcast_desc(const op_row *r, amp_bcast_desc *d, int64_t *na, int64_t *nb) {
    memset(d, 0, sizeof *d);
    d->op = (amp_binary_op)r->op;
    d->dt = r->dt;
    d->ndim = (int)r->s[0];
    int64_t sa = 1, sb = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        d->shape[k] = r->s[1 + k];
        bool ba = ((int)r->f[0] >> k) & 1, bb = ((int)r->f[1] >> k) & 1;
        d->a_stride[k] = ba ? 0 : sa;
        d->b_stride[k] = bb ? 0 : sb;
        sa *= ba ? 1 : d->shape[k];
        sb *= bb ? 1 : d->shape[k];
    }
    *na = sa;
    *nb = sb;
}
static void setup_binary_bcast(const op_row *r, tcase *c) {
    amp_bcast_desc d;
    int64_t na, nb;
    bcast_desc(r, &d, &na, &nb);
    in_main(r, c, 0, "a", ek_of(r->dt), na);
    in_main(r, c, 1, "b", ek_of(r->dt), nb);
    int64_t n = 1;
    for (int k = 0; k < d.ndim; k++) n *= d.shape[k];
    slot_decl(c, 2, "y", ROLE_OUT, ek_of(r->dt), n);
}
static amp_status run_binary_bcast(const op_row *r, const amp_backend *be, void *const *p) {
    amp_bcast_desc d;
    int64_t na, nb;
    bcast_desc(r, &d, &na, &nb);
    return be->k.binary_bcast(be->dev, &d, p[0], p[1], p[2]);
}

/* where: s and f as binary_bcast's, f[2] the cond's broadcast dims; cond random -1, 0 or 1. */
static void where_desc(const op_row *r, amp_where_desc *d, int64_t *na, int64_t *nb,
                       int64_t *nc) {
    amp_bcast_desc b;
    bcast_desc(r, &b, na, nb);
    memset(d, 0, sizeof *d);
    d->dt = r->dt;
    d->ndim = b.ndim;
    int64_t sc = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        d->shape[k] = b.shape[k];
        d->a_stride[k] = b.a_stride[k];
        d->b_stride[k] = b.b_stride[k];
        bool bc = ((int)r->f[2] >> k) & 1;
        d->cond_stride[k] = bc ? 0 : sc;
        sc *= bc ? 1 : d->shape[k];
    }
    *nc = sc;
}
static void setup_where(const op_row *r, tcase *c) {
    amp_where_desc d;
    int64_t na, nb, nc;
    where_desc(r, &d, &na, &nb, &nc);
    int32_t *cond = slot_decl(c, 0, "cond", ROLE_IN, EK_I32, nc);
    for (int64_t i = 0; i < nc; i++) cond[i] = (int32_t)rng_below(&c->rng, 3) - 1;
    in_main(r, c, 1, "a", ek_of(r->dt), na);
    in_main(r, c, 2, "b", ek_of(r->dt), nb);
    int64_t n = 1;
    for (int k = 0; k < d.ndim; k++) n *= d.shape[k];
    slot_decl(c, 3, "y", ROLE_OUT, ek_of(r->dt), n);
}
static amp_status run_where(const op_row *r, const amp_backend *be, void *const *p) {
    amp_where_desc d;
    int64_t na, nb, nc;
    where_desc(r, &d, &na, &nb, &nc);
    return be->k.where(be->dev, &d, p[0], p[1], p[2], p[3]);
}

/* copy_strided: s = {ndim, shape...}, f = {permutation as decimal digits, dim 0 first}: dst is
 * the dense permutation of a dense src (dst dim k = src dim perm[k]), strided reads. */
static void strided_desc(const op_row *r, amp_strided_desc *d) {
    memset(d, 0, sizeof *d);
    d->dt = r->dt;
    d->ndim = (int)r->s[0];
    int perm[AMP_BE_MAX_DIMS], code = (int)r->f[0];
    for (int k = d->ndim - 1; k >= 0; k--, code /= 10) perm[k] = code % 10;
    int64_t src_stride[AMP_BE_MAX_DIMS], st = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        src_stride[k] = st;
        st *= r->s[1 + k];
    }
    int64_t dst_st = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        d->shape[k] = r->s[1 + perm[k]];
        d->src_stride[k] = src_stride[perm[k]];
        d->dst_stride[k] = dst_st;
        dst_st *= d->shape[k];
    }
}
static void setup_copy_strided(const op_row *r, tcase *c) {
    int64_t n = 1;
    for (int k = 0; k < r->s[0]; k++) n *= r->s[1 + k];
    in_main(r, c, 0, "src", ek_of(r->dt), n);
    slot_decl(c, 1, "dst", ROLE_OUT, ek_of(r->dt), n);
}
static amp_status run_copy_strided(const op_row *r, const amp_backend *be, void *const *p) {
    amp_strided_desc d;
    strided_desc(r, &d);
    return be->k.copy_strided(be->dev, &d, p[0], p[1]);
}

/* layernorm_fwd: s = {rows, cols}, f = {eps}; flags: LN_RMS, LN_RESIDUAL (x + r fused),
 * NO_AFFINE (gamma and beta NULL), LN_NO_BIAS (beta NULL), LN_HALF_R and LN_HALF_Y (the residual,
 * or y and dy, in dt2 with an f32 x), LN_ACCUMULATE (the backward adds into dx). */
static amp_ln_desc ln_desc(const op_row *r) {
    return (amp_ln_desc){.rows = r->s[0], .cols = r->s[1], .eps = r->f[0], .dt = r->dt,
                         .r_dt = r->flags & LN_HALF_R ? r->dt2 : r->dt,
                         .y_dt = r->flags & LN_HALF_Y ? r->dt2 : r->dt,
                         .rms = r->flags & LN_RMS, .accumulate = r->flags & LN_ACCUMULATE};
}
static void setup_layernorm_fwd(const op_row *r, tcase *c) {
    int64_t n = r->s[0] * r->s[1];
    amp_ln_desc d = ln_desc(r);
    in_main(r, c, 0, "x", ek_of(r->dt), n);
    if (r->flags & LN_RESIDUAL) {
        in_main(r, c, 1, "r", ek_of(d.r_dt), n);
        slot_decl(c, 2, "sum", ROLE_OUT, ek_of(r->dt), n);
    }
    if (!(r->flags & NO_AFFINE)) {
        in_range(c, 3, "gamma", ROLE_IN, EK_F32, r->s[1], 0.5, 1.5);
        if (!(r->flags & LN_NO_BIAS)) in_range(c, 4, "beta", ROLE_IN, EK_F32, r->s[1], -1, 1);
    }
    slot_decl(c, 5, "y", ROLE_OUT, ek_of(d.y_dt), n);
    if (!(r->flags & LN_RMS)) slot_decl(c, 6, "mean", ROLE_OUT, EK_F32, r->s[0]);
    slot_decl(c, 7, "rstd", ROLE_OUT, EK_F32, r->s[0]);
}
static amp_status run_layernorm_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_ln_desc d = ln_desc(r);
    return be->k.layernorm_fwd(be->dev, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}

/* layernorm_bwd: as the forward's; mean and rstd are those of x, computed in double here. */
static void setup_layernorm_bwd(const op_row *r, tcase *c) {
    int64_t rows = r->s[0], cols = r->s[1], n = rows * cols;
    amp_ln_desc d = ln_desc(r);
    in_main(r, c, 0, "x", ek_of(r->dt), n);
    in_range(c, 1, "dy", ROLE_IN, ek_of(d.y_dt), n, -1, 1);
    if (!(r->flags & NO_AFFINE)) in_range(c, 2, "gamma", ROLE_IN, EK_F32, cols, 0.5, 1.5);
    float *mean = slot_decl(c, 3, "mean", ROLE_IN, EK_F32, rows);
    float *rstd = slot_decl(c, 4, "rstd", ROLE_IN, EK_F32, rows);
    for (int64_t i = 0; i < rows; i++) {
        double m = 0.0, v = 0.0;
        for (int64_t j = 0; j < cols; j++) m += ek_load(c->s[0].init, c->s[0].kind, i * cols + j);
        m = r->flags & LN_RMS ? 0.0 : m / (double)cols;
        for (int64_t j = 0; j < cols; j++) {
            double t = ek_load(c->s[0].init, c->s[0].kind, i * cols + j) - m;
            v += t * t;
        }
        mean[i] = (float)m;
        rstd[i] = (float)(1.0 / sqrt(v / (double)cols + r->f[0]));
    }
    if (r->flags & LN_ACCUMULATE) in_range(c, 5, "dx", ROLE_INOUT, ek_of(r->dt), n, -1, 1);
    else slot_decl(c, 5, "dx", ROLE_OUT, ek_of(r->dt), n);
    slot_decl(c, 6, "dgamma", ROLE_OUT, EK_F32, cols);
    if (!(r->flags & LN_RMS)) slot_decl(c, 7, "dbeta", ROLE_OUT, EK_F32, cols);
}
static amp_status run_layernorm_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_ln_desc d = ln_desc(r);
    return be->k.layernorm_bwd(be->dev, &d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}

/* softmax_fwd: s = {rows, cols}; flags LOG_SOFTMAX, SM_MASKED (the first row entirely -inf,
 * every row's last quarter -inf: an attention mask). */
static amp_softmax_desc sm_desc(const op_row *r) {
    return (amp_softmax_desc){.rows = r->s[0], .cols = r->s[1], .dt = r->dt,
                              .log = r->flags & LOG_SOFTMAX};
}
static void setup_softmax_fwd(const op_row *r, tcase *c) {
    int64_t rows = r->s[0], cols = r->s[1];
    in_main(r, c, 0, "x", ek_of(r->dt), rows * cols);
    if (r->flags & SM_MASKED)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                if (i == 0 || j >= cols - cols / 4)
                    ek_store(c->s[0].init, c->s[0].kind, i * cols + j, -INFINITY);
    slot_decl(c, 1, "y", ROLE_OUT, ek_of(r->dt), rows * cols);
}
static amp_status run_softmax_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_softmax_desc d = sm_desc(r);
    return be->k.softmax_fwd(be->dev, &d, p[0], p[1]);
}

/* softmax_bwd: y a softmax (or log-softmax) of the row's inputs, computed in double here. */
static void setup_softmax_bwd(const op_row *r, tcase *c) {
    int64_t rows = r->s[0], cols = r->s[1];
    void *y = slot_decl(c, 0, "y", ROLE_IN, ek_of(r->dt), rows * cols);
    for (int64_t i = 0; i < rows; i++) {
        double v[1024], m = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < cols; j++) {
            v[j] = r->lo + (r->hi - r->lo) * rng_unit(&c->rng);
            m = v[j] > m ? v[j] : m;
        }
        for (int64_t j = 0; j < cols; j++) s += exp(v[j] - m);
        for (int64_t j = 0; j < cols; j++)
            ek_store(y, c->s[0].kind, i * cols + j,
                     r->flags & LOG_SOFTMAX ? v[j] - m - log(s) : exp(v[j] - m) / s);
    }
    in_main(r, c, 1, "dy", ek_of(r->dt), rows * cols);
    slot_decl(c, 2, "dx", ROLE_OUT, ek_of(r->dt), rows * cols);
}
static amp_status run_softmax_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_softmax_desc d = sm_desc(r);
    return be->k.softmax_bwd(be->dev, &d, p[0], p[1], p[2]);
}

/* embedding_fwd: s = {n, dim, vocab}: n indices in [0, vocab) (repeats likely: n > vocab in
 * some rows), w [vocab, dim]. */
static void emb_indices(const op_row *r, tcase *c, int slot) {
    int32_t *idx = slot_decl(c, slot, "idx", ROLE_IN, EK_I32, r->s[0]);
    for (int64_t i = 0; i < r->s[0]; i++) idx[i] = (int32_t)rng_below(&c->rng, r->s[2]);
}
static void setup_embedding_fwd(const op_row *r, tcase *c) {
    emb_indices(r, c, 0);
    in_main(r, c, 1, "w", ek_of(r->dt), r->s[2] * r->s[1]);
    slot_decl(c, 2, "y", ROLE_OUT, ek_of(r->dt), r->s[0] * r->s[1]);
}
static amp_status run_embedding_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.embedding_fwd(be->dev, r->dt, r->s[0], r->s[1], r->s[2], p[0], p[1], p[2]);
}

/* embedding_bwd: as the forward's; dy [n, dim], dw f32 [vocab, dim]. */
static void setup_embedding_bwd(const op_row *r, tcase *c) {
    emb_indices(r, c, 0);
    in_main(r, c, 1, "dy", ek_of(r->dt), r->s[0] * r->s[1]);
    slot_decl(c, 2, "dw", ROLE_OUT, EK_F32, r->s[2] * r->s[1]);
}
static amp_status run_embedding_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    return be->k.embedding_bwd(be->dev, r->dt, r->s[0], r->s[1], r->s[2], p[0], p[1], p[2]);
}

/* rope: s = {batch, seq, heads, head_dim, rot_heads, offset, table_rows}; the table any values
 * in [-1, 1] (the kernel only reads them). */
static amp_rope_desc rope_desc(const op_row *r) {
    return (amp_rope_desc){.batch = r->s[0], .seq = r->s[1], .heads = r->s[2],
                           .head_dim = r->s[3], .rot_heads = r->s[4], .offset = r->s[5],
                           .table_rows = r->s[6], .dt = r->dt,
                           .interleaved = r->flags & ROPE_INTERLEAVED,
                           .inverse = r->flags & ROPE_INVERSE};
}
static void setup_rope(const op_row *r, tcase *c) {
    int64_t n = r->s[0] * r->s[1] * r->s[2] * r->s[3];
    in_range(c, 0, "table", ROLE_IN, EK_F32, r->s[6] * r->s[3], -1, 1);
    in_main(r, c, 1, "x", ek_of(r->dt), n);
    slot_decl(c, 2, "y", ROLE_OUT, ek_of(r->dt), n);
}
static amp_status run_rope(const op_row *r, const amp_backend *be, void *const *p) {
    amp_rope_desc d = rope_desc(r);
    return be->k.rope(be->dev, &d, p[0], p[1], p[2]);
}

/* swiglu_*: s = {rows, cols}; gu [rows, 2 cols] (a and b its halves, stride 2 cols), or with
 * SWIGLU_APART a and b dense [rows, cols] each (stride cols). */
static int64_t swiglu_ld(const op_row *r) { return r->flags & SWIGLU_APART ? r->s[1] : 2 * r->s[1]; }
static void swiglu_ab(const op_row *r, void *const *p, int slot, const void **a, const void **b) {
    *a = p[slot];
    *b = r->flags & SWIGLU_APART ? p[slot + 1]
                                 : (const char *)p[slot] + (size_t)r->s[1] * amp_dtype_size(r->dt);
}
static void setup_swiglu_fwd(const op_row *r, tcase *c) {
    int64_t n = r->s[0] * r->s[1];
    in_main(r, c, 0, "a", ek_of(r->dt), r->flags & SWIGLU_APART ? n : 2 * n);
    if (r->flags & SWIGLU_APART) in_main(r, c, 1, "b", ek_of(r->dt), n);
    slot_decl(c, 2, "y", ROLE_OUT, ek_of(r->dt), n);
}
static amp_status run_swiglu_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    const void *a, *b;
    swiglu_ab(r, p, 0, &a, &b);
    return be->k.swiglu_fwd(be->dev, r->dt, r->s[0], r->s[1], a, b, swiglu_ld(r), p[2]);
}
static void setup_swiglu_bwd(const op_row *r, tcase *c) {
    int64_t n = r->s[0] * r->s[1];
    bool apart = r->flags & SWIGLU_APART;
    in_main(r, c, 0, "a", ek_of(r->dt), apart ? n : 2 * n);
    if (apart) in_main(r, c, 1, "b", ek_of(r->dt), n);
    in_main(r, c, 2, "dy", ek_of(r->dt), n);
    slot_decl(c, 3, "da", ROLE_OUT, ek_of(r->dt), apart ? n : 2 * n);
    if (apart) slot_decl(c, 4, "db", ROLE_OUT, ek_of(r->dt), n);
}
static amp_status run_swiglu_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    const void *a, *b;
    swiglu_ab(r, p, 0, &a, &b);
    void *db = r->flags & SWIGLU_APART ? p[4] : (char *)p[3] + (size_t)r->s[1] * amp_dtype_size(r->dt);
    return be->k.swiglu_bwd(be->dev, r->dt, r->s[0], r->s[1], a, b, swiglu_ld(r), p[2], p[3], db);
}

/* xent_*: s = {rows, classes, padding}, f = {label_smoothing, dloss}; labels uniform over the
 * classes, every third row ignored with XENT_IGNORE (ignore_index -1); the sum with XENT_SUM;
 * each row's padding columns (a padded vocabulary) hold values too, never read. */
static amp_xent_desc xent_desc(const op_row *r) {
    return (amp_xent_desc){.rows = r->s[0], .classes = r->s[1], .dt = r->dt, .ignore_index = -1,
                           .label_smoothing = r->f[0], .sum = (r->flags & XENT_SUM) != 0,
                           .padding = r->s[2]};
}
static int32_t *xent_labels(const op_row *r, tcase *c, int i) {
    int32_t *labels = slot_decl(c, i, "labels", ROLE_IN, EK_I32, r->s[0]);
    for (int64_t j = 0; j < r->s[0]; j++)
        labels[j] = (r->flags & XENT_IGNORE) && j % 3 == 1 ? -1
                                                          : (int32_t)rng_below(&c->rng, r->s[1]);
    return labels;
}
static void setup_xent_fwd(const op_row *r, tcase *c) {
    in_main(r, c, 0, "logits", ek_of(r->dt), r->s[0] * (r->s[1] + r->s[2]));
    xent_labels(r, c, 1);
    slot_decl(c, 2, "stats", ROLE_OUT, EK_F32, 2 * r->s[0] + 1);
    slot_decl(c, 3, "loss", ROLE_OUT, EK_F32, 1);
}
static amp_status run_xent_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_xent_desc d = xent_desc(r);
    return be->k.xent_fwd(be->dev, &d, p[0], p[1], p[2], p[3]);
}
/* xent_bwd: stats hold each row's logsumexp (of the logits as stored, in double) and the count. */
static void setup_xent_bwd(const op_row *r, tcase *c) {
    int64_t rows = r->s[0], classes = r->s[1], width = classes + r->s[2];
    in_main(r, c, 0, "logits", ek_of(r->dt), rows * width);
    int32_t *labels = xent_labels(r, c, 1);
    float *stats = slot_decl(c, 2, "stats", ROLE_IN, EK_F32, 2 * rows + 1);
    int64_t count = 0;
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < classes; j++) m = fmax(m, ek_load(c->s[0].init, c->s[0].kind, i * width + j));
        for (int64_t j = 0; j < classes; j++) s += exp(ek_load(c->s[0].init, c->s[0].kind, i * width + j) - m);
        stats[i] = (float)(m + log(s));
        stats[rows + i] = 0.0f;
        count += labels[i] != -1;
    }
    stats[2 * rows] = (float)count;
    float *dloss = slot_decl(c, 3, "dloss", ROLE_IN, EK_F32, 1);
    dloss[0] = r->f[1];
    slot_decl(c, 4, "dlogits", ROLE_OUT, ek_of(r->dt), rows * width);
}
static amp_status run_xent_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_xent_desc d = xent_desc(r);
    return be->k.xent_bwd(be->dev, &d, p[0], p[1], p[2], p[3], p[4]);
}

/* attn_*: s = {batch, heads, seq, head_dim}, f = {dropout_p}; ATTN_PADDED: kv_len with batch 0
 * entirely padded (its rows see no key) and the others random. ATTN_PACKED: the qkvpacked
 * layout, q, k and v (dq, dk, dv) one slot of three parts, slots 1 and 2 (9 and 10) unused. */
/* attn_*: s = {batch, heads, seq, head_dim, kv_heads, kv_seq} (0: heads, seq); f = {dropout_p}. */
static amp_attn_desc attn_desc(const op_row *r) {
    return (amp_attn_desc){.batch = r->s[0], .heads = r->s[1], .seq = r->s[2],
                           .head_dim = r->s[3], .kv_heads = r->s[4], .kv_seq = r->s[5],
                           .dt = r->dt, .scale = (float)(1.0 / sqrt((double)r->s[3])),
                           .causal = (r->flags & ATTN_CAUSAL) != 0, .dropout_p = r->f[0],
                           .seed = 42, .offset = 7, .packed = (r->flags & ATTN_PACKED) != 0};
}
/* q, k and v (or dq, dk, dv) from their slot(s): three slots, or three parts of one. */
static void attn_parts(const amp_attn_desc *d, void *const *p, int first, void *out[3]) {
    size_t es = amp_dtype_size(d->dt), hd = (size_t)d->head_dim;
    size_t at[3] = {0, (size_t)d->heads * hd * es,
                    (size_t)(d->heads + amp_attn_kv_heads(d)) * hd * es};
    for (int a = 0; a < 3; a++) out[a] = d->packed ? (char *)p[first] + at[a] : p[first + a];
}
static int64_t attn_numel(const op_row *r) { return r->s[0] * r->s[1] * r->s[2] * r->s[3]; }
static int64_t attn_kv_numel(const op_row *r) {
    amp_attn_desc d = attn_desc(r);
    return d.batch * amp_attn_kv_heads(&d) * amp_attn_kv_seq(&d) * d.head_dim;
}
static int64_t attn_packed_numel(const op_row *r) { return attn_numel(r) + 2 * attn_kv_numel(r); }
static void attn_inputs(const op_row *r, tcase *c) {
    amp_attn_desc d = attn_desc(r);
    if (r->flags & ATTN_PACKED) {
        in_main(r, c, 0, "qkv", ek_of(r->dt), attn_packed_numel(r));
    } else {
        in_main(r, c, 0, "q", ek_of(r->dt), attn_numel(r));
        in_main(r, c, 1, "k", ek_of(r->dt), attn_kv_numel(r));
        in_main(r, c, 2, "v", ek_of(r->dt), attn_kv_numel(r));
    }
    int32_t *len = slot_decl(c, 3, "kv_len", ROLE_IN, EK_I32, r->s[0]);
    for (int64_t b = 0; b < r->s[0]; b++)
        len[b] = b == 0 ? 0 : (int32_t)(1 + rng_below(&c->rng, amp_attn_kv_seq(&d)));
}
static const int32_t *attn_len(const op_row *r, void *const *p) {
    return r->flags & ATTN_PADDED ? p[3] : NULL;
}
static void setup_attn_fwd(const op_row *r, tcase *c) {
    attn_inputs(r, c);
    slot_decl(c, 4, "o", ROLE_OUT, ek_of(r->dt), attn_numel(r));
    slot_decl(c, 5, "lse", ROLE_OUT, EK_F32, attn_numel(r) / r->s[3]);
}
static amp_status run_attn_fwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_attn_desc d = attn_desc(r);
    void *x[3];
    attn_parts(&d, p, 0, x);
    return be->k.attn_fwd(be->dev, &d, x[0], x[1], x[2], attn_len(r, p), p[4], p[5]);
}
/* attn_bwd: o and dout random; lse each row's logsumexp of its visible scores (in double). */
static void setup_attn_bwd(const op_row *r, tcase *c) {
    attn_inputs(r, c);
    in_main(r, c, 4, "o", ek_of(r->dt), attn_numel(r));
    in_main(r, c, 5, "dout", ek_of(r->dt), attn_numel(r));
    amp_attn_desc d = attn_desc(r);
    int64_t dim = d.head_dim, seq = d.seq;
    const int32_t *len = (const int32_t *)c->s[3].init;
    const void *q = c->s[0].init, *k = d.packed ? c->s[0].init : c->s[1].init;
    int64_t k_at = d.packed ? d.heads * dim : 0; /* k's part of qkv */
    float *lse = slot_decl(c, 6, "lse", ROLE_IN, EK_F32, attn_numel(r) / dim);
    for (int64_t bh = 0; bh < d.batch * d.heads; bh++)
        for (int64_t i = 0; i < seq; i++) {
            int64_t l = r->flags & ATTN_PADDED ? len[bh / d.heads] : amp_attn_kv_seq(&d);
            int64_t n = amp_attn_keys(&d, i, l), kvh = amp_attn_kv_of(&d, bh);
            double m = -INFINITY, sum = 0.0, s[512];
            for (int64_t j = 0; j < n; j++) {
                s[j] = 0.0;
                for (int64_t e = 0; e < dim; e++)
                    s[j] += ek_load(q, c->s[0].kind, amp_attn_row(&d, AMP_ATTN_Q, bh, i) + e) *
                            ek_load(k, c->s[0].kind,
                                    k_at + amp_attn_row(&d, AMP_ATTN_KV, kvh, j) + e);
                s[j] *= d.scale;
                m = s[j] > m ? s[j] : m;
            }
            for (int64_t j = 0; j < n; j++) sum += exp(s[j] - m);
            lse[bh * seq + i] = n ? (float)(m + log(sum)) : -INFINITY;
        }
    slot_decl(c, 7, "delta", ROLE_OUT, EK_F32, attn_numel(r) / dim);
    if (d.packed) {
        slot_decl(c, 8, "dqkv", ROLE_OUT, ek_of(r->dt), attn_packed_numel(r));
        return;
    }
    slot_decl(c, 8, "dq", ROLE_OUT, ek_of(r->dt), attn_numel(r));
    slot_decl(c, 9, "dk", ROLE_OUT, ek_of(r->dt), attn_kv_numel(r));
    slot_decl(c, 10, "dv", ROLE_OUT, ek_of(r->dt), attn_kv_numel(r));
}
static amp_status run_attn_bwd(const op_row *r, const amp_backend *be, void *const *p) {
    amp_attn_desc d = attn_desc(r);
    void *x[3], *g[3];
    attn_parts(&d, p, 0, x);
    attn_parts(&d, p, 8, g);
    return be->k.attn_bwd(be->dev, &d, x[0], x[1], x[2], attn_len(r, p), p[4], p[5], p[6], p[7],
                          g[0], g[1], g[2]);
}

static const op_row transformer_rows[] = {
    /* Over dims: the same order on both backends (sums in f64 in j order), so the same value;
     * a max selects bits. [outer, n, inner] as a softmax's last dim (inner 1), a mean over T
     * (inner C), a whole column (outer 1). */
    {"reduce_dim_sum_f32_last", E_reduce_dim, {96, 257, 1}, F32, .op = AMP_REDUCE_SUM, .f = {1}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"reduce_dim_mean_bf16_mid", E_reduce_dim, {4, 33, 96}, BF16, .op = AMP_REDUCE_SUM, .f = {1.0f / 33}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"reduce_dim_sum_f16_col", E_reduce_dim, {1, 1000, 7}, F16, .op = AMP_REDUCE_SUM, .f = {1}, .tol = TOL(0, 0), .lo = -4, .hi = 4},
    {"reduce_dim_max_f32_last", E_reduce_dim, {96, 257, 1}, F32, .op = AMP_REDUCE_MAX, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"reduce_dim_max_bf16_mid", E_reduce_dim, {4, 33, 96}, BF16, .op = AMP_REDUCE_MAX, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"reduce_dim_max_bf16_ties", E_reduce_dim, {8, 64, 3}, BF16, .op = AMP_REDUCE_MAX, .tol = EXACT, .lo = 1000, .hi = 1016},
    {"reduce_dim_max_f16", E_reduce_dim, {8, 64, 3}, F16, .op = AMP_REDUCE_MAX, .tol = EXACT, .lo = -2, .hi = 2},
    {"scatter_dim_f32", E_scatter_dim, {4, 33, 96}, F32, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"scatter_dim_bf16_last", E_scatter_dim, {96, 257, 1}, BF16, .tol = EXACT, .lo = -4, .hi = 4},
    /* Broadcasts: s = {ndim, shape...}, f = {a's broadcast dims, b's} as bit masks. A bias over
     * [B, T, C], a mask over heads, both sides broadcast, a scalar. */
    {"bcast_add_f32_bias", E_binary_bcast, {3, 4, 17, 96}, F32, .op = AMP_BINARY_ADD, .f = {0, 3}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"bcast_mul_bf16_heads", E_binary_bcast, {4, 2, 3, 16, 16}, BF16, .op = AMP_BINARY_MUL, .f = {0, 3}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    {"bcast_sub_f16_both", E_binary_bcast, {3, 5, 1, 7}, F16, .op = AMP_BINARY_SUB, .f = {4, 1}, .tol = TOL(0, 0), .lo = -4, .hi = 4},
    {"bcast_div_f32_both", E_binary_bcast, {3, 6, 5, 7}, F32, .op = AMP_BINARY_DIV, .f = {2, 5}, .tol = TOL(0, 0), .lo = -4, .hi = 4, .specials = true},
    /* where: bits selected, so EXACT with NaN/Inf in the operands too. */
    {"where_f32_all_broadcast", E_where, {3, 4, 17, 96}, F32, .f = {0, 3, 5}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"where_bf16_mask_over_heads", E_where, {4, 2, 3, 16, 16}, BF16, .f = {0, 0, 3}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"where_f16_scalar_fill", E_where, {2, 33, 65}, F16, .f = {3, 0, 0}, .tol = EXACT, .lo = -4, .hi = 4},
    {"bcast_silu_bwd_f32_scalar", E_binary_bcast, {2, 33, 65}, F32, .op = AMP_BINARY_SILU_BWD, .f = {0, 3}, .tol = TOL(0, 0), .lo = -4, .hi = 4},
    /* LayerNorm and RMSNorm: the same arithmetic in the same order on both backends (the warp's
     * lanes and butterfly), so the same bits; GPT-2's width 768 and odd widths, the fused
     * residual, no affine, RMSNorm without bias. */
    {"layernorm_fwd_f32_gpt2", E_layernorm_fwd, {64, 768}, F32, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_fwd_bf16_residual", E_layernorm_fwd, {33, 768}, BF16, .flags = LN_RESIDUAL, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_fwd_f16_odd_bare", E_layernorm_fwd, {17, 101}, F16, .flags = NO_AFFINE, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_fwd_f32_specials", E_layernorm_fwd, {8, 40}, F32, .f = {1e-5f}, .tol = TOL(0, 0), .lo = -3, .hi = 3, .specials = true},
    {"rmsnorm_fwd_bf16_no_bias", E_layernorm_fwd, {40, 257}, BF16, .flags = LN_RMS | LN_NO_BIAS, .f = {1e-6f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_fwd_f32_bf16_residual_y", E_layernorm_fwd, {33, 256}, F32, BF16, .flags = LN_RESIDUAL | LN_HALF_R | LN_HALF_Y, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_fwd_f32_f16_y_odd", E_layernorm_fwd, {17, 101}, F32, F16, .flags = LN_HALF_Y, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_fwd_f32_f16_residual", E_layernorm_fwd, {9, 70}, F32, F16, .flags = LN_RESIDUAL | LN_HALF_R, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_bwd_f32_gpt2", E_layernorm_bwd, {64, 768}, F32, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_bwd_bf16_odd", E_layernorm_bwd, {70, 101}, BF16, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_bwd_f16_bare", E_layernorm_bwd, {33, 64}, F16, .flags = NO_AFFINE, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"rmsnorm_bwd_f32", E_layernorm_bwd, {40, 257}, F32, .flags = LN_RMS, .f = {1e-6f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_bwd_f32_bf16_dy_accumulate", E_layernorm_bwd, {70, 256}, F32, BF16, .flags = LN_HALF_Y | LN_ACCUMULATE, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_bwd_f32_accumulate_odd", E_layernorm_bwd, {33, 101}, F32, .flags = LN_ACCUMULATE, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    {"layernorm_bwd_f32_f16_dy", E_layernorm_bwd, {17, 64}, F32, F16, .flags = LN_HALF_Y, .f = {1e-5f}, .tol = EXACT, .lo = -3, .hi = 3},
    /* Softmax: the same bits on both backends (warp-order max and sums, the shared exp); GPT-2's
     * vocabulary rows, attention rows with a mask and a fully masked row, NaN rows. */
    {"softmax_f32_vocab", E_softmax_fwd, {4, 50257}, F32, .tol = EXACT, .lo = -8, .hi = 8},
    {"softmax_bf16_masked", E_softmax_fwd, {64, 256}, BF16, .flags = SM_MASKED, .tol = EXACT, .lo = -8, .hi = 8},
    {"log_softmax_f16_odd", E_softmax_fwd, {33, 101}, F16, .flags = LOG_SOFTMAX, .tol = EXACT, .lo = -8, .hi = 8},
    {"log_softmax_f32_masked", E_softmax_fwd, {16, 64}, F32, .flags = LOG_SOFTMAX | SM_MASKED, .tol = EXACT, .lo = -8, .hi = 8},
    {"softmax_f32_specials", E_softmax_fwd, {8, 40}, F32, .tol = TOL(0, 0), .lo = -8, .hi = 8, .specials = true},
    {"softmax_bwd_f32", E_softmax_bwd, {64, 257}, F32, .tol = EXACT, .lo = -4, .hi = 4},
    {"softmax_bwd_bf16", E_softmax_bwd, {33, 128}, BF16, .tol = EXACT, .lo = -4, .hi = 4},
    {"log_softmax_bwd_f32", E_softmax_bwd, {40, 96}, F32, .flags = LOG_SOFTMAX, .tol = EXACT, .lo = -4, .hi = 4},
    {"log_softmax_bwd_f16", E_softmax_bwd, {17, 1000}, F16, .flags = LOG_SOFTMAX, .tol = EXACT, .lo = -4, .hi = 4},
    /* Embedding: a gather (bits), and the scatter-add in index order per (row, column) on both
     * backends (the same bits): GPT-2's token table shape cut down, positions, many repeats. */
    {"embedding_fwd_f32", E_embedding_fwd, {512, 96, 1000}, F32, .tol = EXACT, .lo = -1, .hi = 1, .specials = true},
    {"embedding_fwd_bf16_pos", E_embedding_fwd, {256, 768, 256}, BF16, .tol = EXACT, .lo = -1, .hi = 1},
    {"embedding_bwd_f32_repeats", E_embedding_bwd, {1000, 64, 50}, F32, .tol = EXACT, .lo = -1, .hi = 1},
    {"embedding_bwd_bf16", E_embedding_bwd, {512, 96, 1000}, BF16, .tol = EXACT, .lo = -1, .hi = 1},
    {"embedding_bwd_f16_odd", E_embedding_bwd, {77, 33, 7}, F16, .tol = EXACT, .lo = -1, .hi = 1},
    {"rope_f32_half_qkv", E_rope, {2, 17, 12, 64, 8, 3, 40}, F32, .tol = TOL(0, 0), .lo = -2, .hi = 2, .specials = true},
    {"rope_bf16_interleaved", E_rope, {3, 33, 4, 128, 4, 0, 33}, BF16, .flags = ROPE_INTERLEAVED, .tol = EXACT, .lo = -2, .hi = 2},
    {"swiglu_fwd_f32_halves", E_swiglu_fwd, {33, 176}, F32, .tol = TOL(0, 0), .lo = -8, .hi = 8, .specials = true},
    {"swiglu_fwd_bf16_apart", E_swiglu_fwd, {64, 688}, BF16, .flags = SWIGLU_APART, .tol = EXACT, .lo = -6, .hi = 6},
    {"swiglu_bwd_f16_halves", E_swiglu_bwd, {17, 45}, F16, .tol = EXACT, .lo = -6, .hi = 6},
    {"swiglu_bwd_bf16_apart", E_swiglu_bwd, {40, 176}, BF16, .flags = SWIGLU_APART, .tol = EXACT, .lo = -6, .hi = 6},
    {"swiglu_bwd_f32_specials", E_swiglu_bwd, {9, 64}, F32, .tol = TOL(0, 0), .lo = -90, .hi = 90, .specials = true},
    {"rope_f16_inverse_offset", E_rope, {1, 9, 6, 32, 5, 100, 109}, F16, .flags = ROPE_INVERSE, .tol = EXACT, .lo = -2, .hi = 2},
    /* Strided copies: s = {ndim, shape...}, f = {permutation}: attention's [B, T, H, D] ->
     * [B, H, T, D], a 2-D transpose, a 5-D permutation, i32. */
    {"copy_strided_f32_bthd", E_copy_strided, {4, 2, 17, 4, 8}, F32, .f = {213}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"copy_strided_bf16_t", E_copy_strided, {2, 33, 65}, BF16, .f = {10}, .tol = EXACT, .lo = -4, .hi = 4, .specials = true},
    {"copy_strided_f16_5d", E_copy_strided, {5, 2, 3, 4, 5, 6}, F16, .f = {42031}, .tol = EXACT, .lo = -4, .hi = 4},
    {"copy_strided_i32", E_copy_strided, {3, 7, 9, 11}, I32, .f = {201}, .tol = EXACT, .lo = -1e6, .hi = 1e6},
    /* Cross-entropy: the same arithmetic and order on both backends (kernels/math/xent.h), so
     * the same bits: MNIST's 10 classes, GPT-2's vocabulary, ignored rows, label smoothing, the
     * sum, a scaled dloss, NaN/Inf logits. */
    {"xent_fwd_f32_fc", E_xent_fwd, {64, 10}, F32, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_fwd_bf16_vocab", E_xent_fwd, {6, 50257}, BF16, .flags = XENT_IGNORE, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_fwd_f16_smooth", E_xent_fwd, {300, 1000}, F16, .flags = XENT_IGNORE, .f = {0.1f}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_fwd_f32_sum", E_xent_fwd, {513, 33}, F32, .flags = XENT_SUM, .f = {0.2f}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_fwd_f32_specials", E_xent_fwd, {16, 40}, F32, .tol = TOL(0, 0), .lo = -8, .hi = 8, .specials = true},
    {"xent_bwd_f32", E_xent_bwd, {64, 10}, F32, .f = {0, 1}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_bwd_bf16_scaled_vocab", E_xent_bwd, {4, 50257}, BF16, .flags = XENT_IGNORE, .f = {0, 65536}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_bwd_f16_smooth", E_xent_bwd, {17, 1000}, F16, .flags = XENT_IGNORE, .f = {0.1f, 1}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_bwd_f32_sum", E_xent_bwd, {33, 257}, F32, .flags = XENT_SUM, .f = {0.2f, 0.5f}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_fwd_bf16_padded_vocab", E_xent_fwd, {6, 50257, 47}, BF16, .flags = XENT_IGNORE, .f = {0.1f}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_bwd_f16_padded", E_xent_bwd, {9, 1000, 24}, F16, .flags = XENT_IGNORE, .f = {0.1f, 2}, .tol = EXACT, .lo = -8, .hi = 8},
    {"xent_bwd_f32_padded_specials", E_xent_bwd, {8, 40, 24}, F32, .f = {0, 1}, .tol = TOL(0, 0), .lo = -8, .hi = 8, .specials = true},
    /* Attention: each backend's own order of the products (oneDNN tiles, warps), so to rounding;
     * dropout's masks are the same draws (a different mask would miss by whole terms). */
    {"attn_fwd_f32_causal", E_attn_fwd, {2, 2, 65, 32}, F32, .flags = ATTN_CAUSAL, .tol = TOL(1e-5, 1e-4), .lo = -1, .hi = 1},
    {"attn_fwd_bf16_padded", E_attn_fwd, {3, 2, 40, 64}, BF16, .flags = ATTN_PADDED, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"attn_fwd_f16_dropout", E_attn_fwd, {2, 1, 33, 128}, F16, .flags = ATTN_CAUSAL | ATTN_PADDED, .f = {0.3f}, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    {"attn_bwd_f32_causal", E_attn_bwd, {2, 2, 65, 32}, F32, .flags = ATTN_CAUSAL, .tol = TOL(1e-4, 1e-3), .lo = -1, .hi = 1},
    {"attn_bwd_bf16_padded_dropout", E_attn_bwd, {3, 1, 40, 64}, BF16, .flags = ATTN_PADDED, .f = {0.25f}, .tol = TOL(1e-2, 2 * ULP_BF16), .lo = -1, .hi = 1},
    {"attn_fwd_f32_packed_causal", E_attn_fwd, {2, 3, 37, 32}, F32, .flags = ATTN_CAUSAL | ATTN_PACKED, .tol = TOL(1e-5, 1e-4), .lo = -1, .hi = 1},
    {"attn_fwd_bf16_packed_padded", E_attn_fwd, {3, 2, 40, 64}, BF16, .flags = ATTN_PADDED | ATTN_PACKED, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"attn_bwd_f32_packed_causal", E_attn_bwd, {2, 3, 37, 32}, F32, .flags = ATTN_CAUSAL | ATTN_PACKED, .tol = TOL(1e-4, 1e-3), .lo = -1, .hi = 1},
    {"attn_bwd_bf16_packed_dropout", E_attn_bwd, {2, 2, 33, 64}, BF16, .flags = ATTN_CAUSAL | ATTN_PACKED, .f = {0.25f}, .tol = TOL(1e-2, 2 * ULP_BF16), .lo = -1, .hi = 1},
    /* Grouped-query (kv_heads 1, 2, 4 of 8), packed too, and keys past the queries (a cache:
     * the causal mask aligned to the end). */
    {"attn_fwd_f32_kv4_causal", E_attn_fwd, {2, 8, 17, 64, 4}, F32, .flags = ATTN_CAUSAL, .tol = TOL(1e-5, 1e-4), .lo = -1, .hi = 1},
    {"attn_bwd_f32_kv1_causal", E_attn_bwd, {1, 8, 17, 64, 1}, F32, .flags = ATTN_CAUSAL, .tol = TOL(1e-4, 1e-3), .lo = -1, .hi = 1},
    /* dk and dv sum a group of 4 heads' parts, each rounded to bf16 by its backend: an ulp of
     * each part (up to 2^-8 of parts near 1) may differ, and the parts cancel, so the bound is
     * absolute, 4 of those ulps and more, not relative to the sum. */
    {"attn_bwd_bf16_kv2_packed_dropout", E_attn_bwd, {2, 8, 33, 128, 2}, BF16, .flags = ATTN_CAUSAL | ATTN_PACKED, .f = {0.25f}, .tol = TOL(3e-2, 2 * ULP_BF16), .lo = -1, .hi = 1},
    /* The CPU's bf16 products round P to bf16 (attention_bf16.c), CUDA's do not: an output
     * o = sum p v moves by up to 2^-8 sum p |v| <= 2^-8 max |v|, about 4e-3 here. */
    {"attn_fwd_bf16_kv2_packed_padded", E_attn_fwd, {2, 8, 40, 64, 2}, BF16, .flags = ATTN_PADDED | ATTN_PACKED, .tol = TOL(4e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"attn_fwd_f32_cache_one_query", E_attn_fwd, {2, 8, 1, 64, 2, 257}, F32, .flags = ATTN_CAUSAL | ATTN_PADDED, .tol = TOL(1e-5, 1e-4), .lo = -1, .hi = 1},
    {"attn_bwd_f32_cache_causal", E_attn_bwd, {1, 4, 9, 32, 2, 40}, F32, .flags = ATTN_CAUSAL, .tol = TOL(1e-4, 1e-3), .lo = -1, .hi = 1},
    {"attn_fwd_f16_kv4_t257", E_attn_fwd, {1, 8, 257, 128, 4}, F16, .flags = ATTN_CAUSAL, .f = {0.1f}, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
};

#endif
