/* The op trace behind amp_trace_enable and AMP_TRACE=1: "trace linear: f16[128, 784], f16[2048,
 * 784], f32[2048] -> f16[128, 2048]". */
#include <stdio.h>
#include <string.h>

#include "core/ctx.h"
#include "core/log.h"
#include "core/tensor_internal.h"

static void amp_trace_log(void *user, const char *op, const amp_tensor *const *in, int n_in,
                          const amp_tensor *out) {
    (void)user;
    char line[512], shape[64];
    size_t off = (size_t)snprintf(line, sizeof line, "trace %s:", op);
    for (int i = 0; i < n_in && off < sizeof line; i++) {
        if (!in[i]) continue;
        off += (size_t)snprintf(line + off, sizeof line - off, "%s %s%s", i ? "," : "",
                                amp_dtype_name(in[i]->dtype), amp_shape_str(in[i], shape, sizeof shape));
    }
    if (off < sizeof line)
        snprintf(line + off, sizeof line - off, " -> %s%s", amp_dtype_name(out->dtype),
                 amp_shape_str(out, shape, sizeof shape));
    amp_log_msg(AMP_LOG_INFO, "%s", line);
}

void amp_trace_enable(amp_ctx *ctx, bool enabled) {
    if (!ctx) return;
    ctx->trace = enabled ? amp_trace_log : NULL;
    ctx->trace_user = NULL;
}
