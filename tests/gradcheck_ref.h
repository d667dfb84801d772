/* Plain float64 references of the nn forward passes, written from the PyTorch definitions
 * (torch.nn.functional.linear, conv2d, batch_norm, max_pool2d, cross_entropy, mse_loss) and
 * independent of the library's kernels: the tests compare the library's f32 results with them and
 * differentiate them numerically. Row-major layouts as in the library: NCHW images, OIHW weights,
 * [out, in] linear weights. Also a small seeded generator for test inputs. */
#ifndef AMP_TESTS_GRADCHECK_REF_H
#define AMP_TESTS_GRADCHECK_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- test inputs: splitmix64, reproducible on every platform ---- */
typedef struct ref_rng {
    uint64_t s;
} ref_rng;

static inline uint64_t ref_rng_next(ref_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline double ref_rng_uniform(ref_rng *r, double lo, double hi) {
    return lo + (hi - lo) * (double)(ref_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline int ref_rng_below(ref_rng *r, int n) { return (int)(ref_rng_next(r) % (uint64_t)n); }

/* ---- forward references ---- */

/* y[n, out] = x[n, in] @ w[out, in]^T + b[out] (b may be NULL). */
static inline void ref_linear(int64_t n, int64_t in, int64_t out, const double *x, const double *w,
                              const double *b, double *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double acc = b ? b[o] : 0.0;
            for (int64_t k = 0; k < in; k++) acc += x[i * in + k] * w[o * in + k];
            y[i * out + o] = acc;
        }
}

/* y[m, n] = a[m, k] @ b[k, n]. */
static inline void ref_matmul(int64_t m, int64_t k, int64_t n, const double *a, const double *b,
                              double *y) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; p++) acc += a[i * k + p] * b[p * n + j];
            y[i * n + j] = acc;
        }
}

/* PyTorch's output extent of a convolution or pooling window: floor((in + 2p - k) / s) + 1. */
static inline int64_t ref_out_extent(int64_t in, int64_t k, int64_t stride, int64_t pad) {
    return (in + 2 * pad - k) / stride + 1;
}

/* Cross-correlation with zero padding, groups 1, dilation 1 (torch.nn.functional.conv2d). */
static inline void ref_conv2d(int64_t n, int64_t c_in, int64_t h, int64_t w, int64_t c_out,
                              int64_t kh, int64_t kw, int64_t stride, int64_t pad, const double *x,
                              const double *wt, const double *b, double *y) {
    int64_t ho = ref_out_extent(h, kh, stride, pad), wo = ref_out_extent(w, kw, stride, pad);
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < c_out; o++)
            for (int64_t oy = 0; oy < ho; oy++)
                for (int64_t ox = 0; ox < wo; ox++) {
                    double acc = b ? b[o] : 0.0;
                    for (int64_t c = 0; c < c_in; c++)
                        for (int64_t ky = 0; ky < kh; ky++) {
                            int64_t iy = oy * stride - pad + ky;
                            if (iy < 0 || iy >= h) continue;
                            for (int64_t kx = 0; kx < kw; kx++) {
                                int64_t ix = ox * stride - pad + kx;
                                if (ix < 0 || ix >= w) continue;
                                acc += x[((i * c_in + c) * h + iy) * w + ix] *
                                       wt[((o * c_in + c) * kh + ky) * kw + kx];
                            }
                        }
                    y[((i * c_out + o) * ho + oy) * wo + ox] = acc;
                }
}

/* Per-channel mean and biased variance of x[n, c, hw] over n and hw. */
static inline void ref_bn_stats(int64_t n, int64_t c, int64_t hw, const double *x, double *mean,
                                double *var) {
    for (int64_t ch = 0; ch < c; ch++) {
        double s = 0.0, ss = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < hw; k++) s += x[(i * c + ch) * hw + k];
        double m = s / (double)(n * hw);
        for (int64_t i = 0; i < n; i++)
            for (int64_t k = 0; k < hw; k++) {
                double d = x[(i * c + ch) * hw + k] - m;
                ss += d * d;
            }
        mean[ch] = m;
        var[ch] = ss / (double)(n * hw);
    }
}

/* y = (x - mean) / sqrt(var + eps) * gamma + beta, per channel. */
static inline void ref_bn_apply(int64_t n, int64_t c, int64_t hw, const double *x,
                                const double *gamma, const double *beta, const double *mean,
                                const double *var, double eps, double *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++) {
            double inv = 1.0 / sqrt(var[ch] + eps);
            for (int64_t k = 0; k < hw; k++) {
                int64_t j = (i * c + ch) * hw + k;
                y[j] = (x[j] - mean[ch]) * inv * gamma[ch] + beta[ch];
            }
        }
}

/* Training-mode batch norm: batch statistics (biased variance). When running_mean/var are not
 * NULL they are updated as torch.nn.BatchNorm2d does: with the UNBIASED batch variance. */
static inline void ref_bn_train(int64_t n, int64_t c, int64_t hw, const double *x,
                                const double *gamma, const double *beta, double eps,
                                double momentum, double *running_mean, double *running_var,
                                double *y) {
    double *mean = malloc((size_t)c * sizeof *mean), *var = malloc((size_t)c * sizeof *var);
    ref_bn_stats(n, c, hw, x, mean, var);
    ref_bn_apply(n, c, hw, x, gamma, beta, mean, var, eps, y);
    if (running_mean && running_var) {
        double cnt = (double)(n * hw);
        for (int64_t ch = 0; ch < c; ch++) {
            running_mean[ch] = (1.0 - momentum) * running_mean[ch] + momentum * mean[ch];
            running_var[ch] = (1.0 - momentum) * running_var[ch] + momentum * var[ch] * cnt / (cnt - 1.0);
        }
    }
    free(mean);
    free(var);
}

static inline void ref_relu(int64_t n, const double *x, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

/* Max over each k x k window; padded positions never win (PyTorch pads with -inf). */
static inline void ref_maxpool2d(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                                 int64_t stride, int64_t pad, const double *x, double *y) {
    int64_t ho = ref_out_extent(h, k, stride, pad), wo = ref_out_extent(w, k, stride, pad);
    for (int64_t p = 0; p < n * c; p++)
        for (int64_t oy = 0; oy < ho; oy++)
            for (int64_t ox = 0; ox < wo; ox++) {
                double best = -INFINITY;
                for (int64_t ky = 0; ky < k; ky++)
                    for (int64_t kx = 0; kx < k; kx++) {
                        int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                        double v = x[(p * h + iy) * w + ix];
                        if (v > best) best = v;
                    }
                y[(p * ho + oy) * wo + ox] = best;
            }
}

/* mean over rows of -log softmax(logits[row])[label[row]]. */
static inline double ref_cross_entropy(int64_t rows, int64_t classes, const double *logits,
                                       const int *labels) {
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const double *z = logits + r * classes;
        double mx = z[0];
        for (int64_t j = 1; j < classes; j++) mx = z[j] > mx ? z[j] : mx;
        double s = 0.0;
        for (int64_t j = 0; j < classes; j++) s += exp(z[j] - mx);
        total += -(z[labels[r]] - mx - log(s));
    }
    return total / (double)rows;
}

static inline double ref_mse(int64_t n, const double *a, const double *b) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (a[i] - b[i]) * (a[i] - b[i]);
    return s / (double)n;
}

/* ---- the ConvNet preset (nn/presets.c), parameters in PyTorch's named_parameters() order ---- */
enum {
    REF_CN_W1, REF_CN_B1, REF_CN_G1, REF_CN_BE1, REF_CN_W2, REF_CN_B2, REF_CN_G2, REF_CN_BE2,
    REF_CN_WF, REF_CN_BF, REF_CN_N_PARAMS
};
/* Buffers in named_buffers() order (without num_batches_tracked). */
enum { REF_CN_RM1, REF_CN_RV1, REF_CN_RM2, REF_CN_RV2, REF_CN_N_BUFFERS };

#define REF_BN_EPS 1e-5
#define REF_BN_MOMENTUM 0.1

/* logits[n, 10] of x[n, 1, 28, 28]. training: batch statistics (buffers updated when not NULL);
 * else the running statistics in buffers. */
static inline void ref_convnet_forward(int64_t n, const double *x, double *const *p,
                                       double *const *buffers, bool training, double *logits) {
    static const int64_t ch[3] = {1, 16, 32};
    int64_t side = 28;
    const double *in = x;
    double *owned = NULL;
    for (int blk = 0; blk < 2; blk++) {
        int64_t c_in = ch[blk], c_out = ch[blk + 1], hw = side * side;
        double *a = malloc((size_t)(n * c_out * hw) * sizeof *a);
        double *b = malloc((size_t)(n * c_out * hw) * sizeof *b);
        ref_conv2d(n, c_in, side, side, c_out, 5, 5, 1, 2, in, p[blk * 4 + 0], p[blk * 4 + 1], a);
        if (training) {
            ref_bn_train(n, c_out, hw, a, p[blk * 4 + 2], p[blk * 4 + 3], REF_BN_EPS,
                         REF_BN_MOMENTUM, buffers ? buffers[blk * 2] : NULL,
                         buffers ? buffers[blk * 2 + 1] : NULL, b);
        } else {
            ref_bn_apply(n, c_out, hw, a, p[blk * 4 + 2], p[blk * 4 + 3], buffers[blk * 2],
                         buffers[blk * 2 + 1], REF_BN_EPS, b);
        }
        ref_relu(n * c_out * hw, b, b);
        double *pooled = malloc((size_t)(n * c_out * hw / 4) * sizeof *pooled);
        ref_maxpool2d(n, c_out, side, side, 2, 2, 0, b, pooled);
        free(a);
        free(b);
        free(owned);
        owned = pooled;
        in = pooled;
        side /= 2;
    }
    ref_linear(n, 32 * 7 * 7, 10, in, p[REF_CN_WF], p[REF_CN_BF], logits);
    free(owned);
}

#endif
