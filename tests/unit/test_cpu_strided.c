/* CPU backend copy_strided, binary_bcast and where (strided.c) against references that address
 * every element on its own (kernels/math/strided.h's offsets): the GPT's permutes (the q, k, v
 * split of [B, T, 3, nh, hs] and the heads back to [B, T, C]), a transpose of the last dim,
 * expands (stride 0), a narrow and a 1-D view, in 2- and 4-byte elements, large enough for the
 * rows to be split between threads, with 1, 2 and 3 threads (row splits that fall inside every
 * dim). The broadcast add and the where read the case's view as a and a dense b; where's cond is
 * broadcast along the last dim. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/pointwise_op.h"
#include "kernels/math/load_store.h"
#include "kernels/math/strided.h"
#include "test_util.h"

typedef struct copy_case {
    const char *name;
    int ndim;
    int64_t shape[6];
    int perm[6];    /* the view's dim k is the source's dim perm[k] */
    int64_t src[6]; /* the source's extents, dense row-major (0: expanded, stride 0) */
    int64_t at;     /* the view's first element in the source (a narrow) */
} copy_case;

/* The view's strides through the source: the source's dense strides, permuted. */
static void view_strides(const copy_case *c, int64_t *stride, int64_t *src_elems) {
    int64_t dense[6], acc = 1;
    for (int k = c->ndim - 1; k >= 0; k--) {
        dense[k] = c->src[k] ? acc : 0;
        acc *= c->src[k] ? c->src[k] : 1;
    }
    for (int k = 0; k < c->ndim; k++) stride[k] = dense[c->perm[k]];
    *src_elems = acc;
}

static void run_case(const copy_case *c, amp_dtype dt, int threads) {
    amp_strided_desc d = {.dt = dt, .ndim = c->ndim};
    int64_t n = 1, src_elems;
    memcpy(d.shape, c->shape, sizeof c->shape);
    view_strides(c, d.src_stride, &src_elems);
    for (int k = c->ndim - 1; k >= 0; k--) {
        d.dst_stride[k] = n;
        n *= c->shape[k];
    }
    size_t es = amp_dtype_size(dt);
    unsigned char *src = malloc((size_t)src_elems * es), *got = malloc((size_t)n * es),
                  *want = malloc((size_t)n * es);
    for (int64_t i = 0; i < src_elems * (int64_t)es; i++) /* no period a row's length divides */
        src[i] = (unsigned char)(((uint64_t)i * 2654435761u) >> 11);
    memset(got, 0xa5, (size_t)n * es);
    for (int64_t i = 0; i < n; i++) {
        int64_t so = c->at + amp_view_offset(c->ndim, d.shape, d.src_stride, i);
        memcpy(want + i * (int64_t)es, src + so * (int64_t)es, es);
    }
    omp_set_num_threads(threads);
    CHECK_OK(amp_cpu_copy_strided(amp_cpu_device(), &d, src + c->at * (int64_t)es, got));
    CHECK_MSG(memcmp(got, want, (size_t)n * es) == 0, "copy_strided %s, %s, %d threads", c->name,
              amp_dtype_name(dt), threads);

    /* y = a + b and y = cond ? a : b, a the view, b and cond dense (cond's last dim broadcast). */
    amp_bcast_desc bd = {.op = AMP_BINARY_ADD, .dt = dt, .ndim = c->ndim};
    amp_where_desc wd = {.dt = dt, .ndim = c->ndim};
    memcpy(bd.shape, c->shape, sizeof c->shape);
    memcpy(wd.shape, c->shape, sizeof c->shape);
    memcpy(bd.a_stride, d.src_stride, sizeof d.src_stride);
    memcpy(wd.a_stride, d.src_stride, sizeof d.src_stride);
    memcpy(bd.b_stride, d.dst_stride, sizeof d.dst_stride);
    memcpy(wd.b_stride, d.dst_stride, sizeof d.dst_stride);
    memcpy(wd.cond_stride, d.dst_stride, sizeof d.dst_stride);
    wd.cond_stride[c->ndim - 1] = 0;
    int32_t *cond = malloc((size_t)n * sizeof *cond);
    for (int64_t i = 0; i < n; i++) cond[i] = (int32_t)((i / c->shape[c->ndim - 1]) % 3 == 1);
    unsigned char *b = malloc((size_t)n * es);
    for (int64_t i = 0; i < n * (int64_t)es; i++)
        b[i] = (unsigned char)(((uint64_t)i * 2246822519u) >> 13);
    /* Finite values (exponent bit 30, or 14, cleared: below 2 in magnitude), so that every sum
     * depends on both of its elements. */
    for (int64_t i = 0; i < src_elems; i++) src[i * (int64_t)es + es - 1] &= 0xbf;
    for (int64_t i = 0; i < n; i++) b[i * (int64_t)es + es - 1] &= 0xbf;
    const unsigned char *a = src + c->at * (int64_t)es;
    for (int64_t i = 0; i < n; i++) {
        int64_t ao = amp_view_offset(c->ndim, d.shape, d.src_stride, i);
        float v = amp_binary_apply(AMP_BINARY_ADD, amp_load_f32(a, dt, ao), amp_load_f32(b, dt, i));
        amp_store_f32(want, dt, i, v);
    }
    CHECK_OK(amp_cpu_binary_bcast(amp_cpu_device(), &bd, a, b, got));
    CHECK_MSG(memcmp(got, want, (size_t)n * es) == 0, "binary_bcast %s, %s, %d threads", c->name,
              amp_dtype_name(dt), threads);
    for (int64_t i = 0; i < n; i++) {
        int64_t ao = amp_view_offset(c->ndim, d.shape, d.src_stride, i);
        const unsigned char *from = cond[i - i % c->shape[c->ndim - 1]] ? a + ao * (int64_t)es
                                                                          : b + i * (int64_t)es;
        memcpy(want + i * (int64_t)es, from, es);
    }
    CHECK_OK(amp_cpu_where(amp_cpu_device(), &wd, cond, a, b, got));
    CHECK_MSG(memcmp(got, want, (size_t)n * es) == 0, "where %s, %s, %d threads", c->name,
              amp_dtype_name(dt), threads);
    free(cond);
    free(b);
    free(src);
    free(got);
    free(want);
}

int main(void) {
    const copy_case cases[] = {
        /* [B, T, 3, nh, hs] -> [3, B, nh, T, hs] */
        {"qkv split", 5, {3, 4, 4, 37, 64}, {2, 0, 3, 1, 4}, {4, 37, 3, 4, 64}, 0},
        /* [B, nh, T, hs] -> [B, T, nh, hs] */
        {"heads back", 4, {3, 129, 5, 64}, {0, 2, 1, 3}, {3, 5, 129, 64}, 0},
        /* a transpose of the last dim: strided rows */
        {"transpose", 3, {7, 300, 61}, {0, 2, 1}, {7, 61, 300}, 0},
        /* [rows, 1] expanded to [rows, cols] and [1, cols] to [rows, cols] */
        {"expand rows", 2, {513, 130}, {0, 1}, {513, 0}, 0},
        {"expand cols", 3, {2, 400, 97}, {0, 1, 2}, {2, 0, 97}, 0},
        /* columns 5 to 94 of a [400, 128] source */
        {"narrow", 2, {400, 90}, {0, 1}, {400, 128}, 5},
        {"1-D", 1, {70001}, {0}, {70001}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int threads = 1; threads <= 3; threads++) {
            run_case(&cases[i], AMP_BF16, threads);
            run_case(&cases[i], AMP_F32, threads);
        }
    return test_summary("test_cpu_strided");
}
