/* Gradient lists by dtype (amp/grad_lists_internal.h). */
#include <stdlib.h>

#include "core/error.h"
#include "amp/grad_lists_internal.h"

static const amp_dtype amp_grad_list_dtypes[3] = {AMP_F32, AMP_F16, AMP_BF16};

void amp_grad_lists_free(amp_grad_lists *l) {
    for (int k = 0; k < 3; k++) {
        free(l->list[k].numel);
        free((void *)l->list[k].src);
        free(l->list[k].dst);
    }
    *l = (amp_grad_lists){0};
}

amp_status amp_grad_lists_init(amp_grad_lists *l, int capacity) {
    *l = (amp_grad_lists){0};
    size_t m = capacity > 0 ? (size_t)capacity : 1;
    for (int k = 0; k < 3; k++) {
        amp_grad_list *g = &l->list[k];
        g->dtype = amp_grad_list_dtypes[k];
        g->numel = malloc(m * sizeof *g->numel);
        g->src = malloc(m * sizeof *g->src);
        g->dst = malloc(m * sizeof *g->dst);
        if (!g->numel || !g->src || !g->dst) {
            amp_grad_lists_free(l);
            return amp_fail(AMP_ERR_OOM, "gradient lists: out of host memory for %d tensors",
                            capacity);
        }
    }
    return AMP_OK;
}

amp_status amp_grad_lists_add(amp_grad_lists *l, amp_dtype dt, int64_t numel, const void *src,
                              float *dst) {
    for (int k = 0; k < 3; k++) {
        amp_grad_list *g = &l->list[k];
        if (g->dtype != dt) continue;
        g->numel[g->n] = numel;
        g->src[g->n] = src;
        g->dst[g->n] = dst;
        g->n++;
        return AMP_OK;
    }
    return amp_fail(AMP_ERR_DTYPE, "gradient lists: a %s gradient (want f32, f16 or bf16)",
                    amp_dtype_name(dt));
}
