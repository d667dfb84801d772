/* test_backend_ops: the GEMM entry (its setup and run) and the rows of the descriptor fields
 * after the plain GEMM: the ReLU epilogue, the bias gradient, allow_tf32, the bias of a half
 * output (which a backend may round to the output's dtype first), and the convolution
 * descriptor's allow_tf32 and allow_nondeterministic. Included by test_backend_ops.c after
 * op_row, its helpers and the tolerance macros; the plain GEMM rows are in its own table.
 *
 * Tolerances: as the plain GEMM's (f32 accumulation in another order, one rounding to a half C;
 * both backends round a half C's bias to its dtype first, core/backend.h). The bias
 * gradient is a sum of k values, in f32 (cuBLASLt's epilogue) or double (sum_rows). TF32 rows
 * allow what TF32 may do on a device (the emulation rounds GEMM inputs to TF32, not convolution
 * inputs; the CPU computes true f32): each input rounded to 10 mantissa bits, so each product
 * off by up to 2^-10 of |a b|, k |a b| of about k / 4 for inputs in [-1, 1): k = 64 gives
 * 2^-10 * 16 = 0.016 on average, 3e-2 with the spread of the sum. */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_GEMM_H
#define AMP_TESTS_GPU_BACKEND_OPS_GEMM_H

/* Row variants of the GEMM entry (from 1 << 10, as the other headers' variants of their own
 * entries). */
enum {
    GEMM_RELU = 1 << 10,      /* epilogue AMP_GEMM_EPILOGUE_RELU */
    GEMM_BIAS_GRAD = 1 << 11, /* bias_grad (with TRANS_A) */
    GEMM_BCAST_B = 1 << 12,   /* with a batch: one B for every product (stride_b 0) */
    GEMM_GELU_TANH = 1 << 13, /* epilogue AMP_GEMM_EPILOGUE_GELU_TANH, the pre-activation in aux */
    GEMM_GELU_ERF = 1 << 14,  /* epilogue AMP_GEMM_EPILOGUE_GELU_ERF */
};

/* gemm: s = {m, n, k, pad, batch}: every leading dimension is its row length + pad; a and b in
 * dt, c in dt2, f = {alpha, beta}. With beta = 0, c starts as NaN: BLAS does not read C then.
 * bias (f32, n) with BIAS; bias_grad (f32, m) with GEMM_BIAS_GRAD. A batch (s[4] > 1) stacks the
 * products' matrices densely, one after another (B once with GEMM_BCAST_B). */
static int64_t gemm_cols(const op_row *r, int which) {
    int64_t m = r->s[0], n = r->s[1], k = r->s[2];
    if (which == 0) return (r->flags & TRANS_A ? m : k) + r->s[3];
    if (which == 1) return (r->flags & TRANS_B ? k : n) + r->s[3];
    return n + r->s[3];
}
/* The elements of one product's stored A (0), B (1) or C (2). */
static int64_t gemm_span(const op_row *r, int which) {
    int64_t m = r->s[0], n = r->s[1], k = r->s[2];
    int64_t rows = which == 0 ? (r->flags & TRANS_A ? k : m)
                   : which == 1 ? (r->flags & TRANS_B ? n : k) : m;
    return rows * gemm_cols(r, which);
}
static int64_t gemm_batch(const op_row *r) { return r->s[4] > 1 ? r->s[4] : 1; }
static void setup_gemm(const op_row *r, tcase *c) {
    int64_t n = r->s[1], nb = gemm_batch(r), nb_b = r->flags & GEMM_BCAST_B ? 1 : nb;
    in_main(r, c, 0, "a", ek_of(r->dt), nb * gemm_span(r, 0));
    in_main(r, c, 1, "b", ek_of(r->dt), nb_b * gemm_span(r, 1));
    slot_decl(c, 2, "c", ROLE_INOUT, ek_of(r->dt2), nb * gemm_span(r, 2));
    if (r->f[1] != 0.0f) gen_main(r, c, 2);
    else gen_uniform(c, 2, NAN, NAN);
    if (r->flags & BIAS) in_range(c, 3, "bias", ROLE_IN, EK_F32, n, -1, 1);
    if (r->flags & GEMM_BIAS_GRAD) slot_decl(c, 4, "bias_grad", ROLE_OUT, EK_F32, r->s[0]);
    if (r->flags & (GEMM_GELU_TANH | GEMM_GELU_ERF)) {
        /* C's layout, NaN in the padding between rows, which no backend may write */
        slot_decl(c, 5, "aux", ROLE_INOUT, ek_of(r->dt2), nb * gemm_span(r, 2));
        gen_uniform(c, 5, NAN, NAN);
    }
}
static amp_gemm_epilogue gemm_epilogue(const op_row *r) {
    return r->flags & GEMM_RELU        ? AMP_GEMM_EPILOGUE_RELU
           : r->flags & GEMM_GELU_TANH ? AMP_GEMM_EPILOGUE_GELU_TANH
           : r->flags & GEMM_GELU_ERF  ? AMP_GEMM_EPILOGUE_GELU_ERF
                                       : AMP_GEMM_EPILOGUE_NONE;
}
static amp_status run_gemm(const op_row *r, const amp_backend *be, void *const *p) {
    amp_gemm_desc d = {
        .trans_a = r->flags & TRANS_A, .trans_b = r->flags & TRANS_B,
        .m = r->s[0], .n = r->s[1], .k = r->s[2], .alpha = r->f[0], .beta = r->f[1],
        .a = p[0], .a_dtype = r->dt, .lda = gemm_cols(r, 0),
        .b = p[1], .b_dtype = r->dt, .ldb = gemm_cols(r, 1),
        .c = p[2], .c_dtype = r->dt2, .ldc = gemm_cols(r, 2),
        .bias = p[3],
        .epilogue = gemm_epilogue(r),
        .bias_grad = p[4],
        .aux = p[5],
        .allow_tf32 = r->flags & ALLOW_TF32,
        .batch = r->s[4],
        .stride_a = gemm_span(r, 0),
        .stride_b = r->flags & GEMM_BCAST_B ? 0 : gemm_span(r, 1),
        .stride_c = gemm_span(r, 2),
    };
    return be->k.gemm(be->dev, &d);
}

/* The ConvNet's and MLP's layers: fc1 of the MLP (784 -> 2048, here 784 -> 256 at batch 64), the
 * ConvNet's fc (1568 -> 10 at batch 8). */
static const op_row gemm_rows[] = {
    /* Bias + ReLU in the epilogue: f32 and a half C written directly, beta, padded leading
     * dimensions, no bias, and a half C of the other half dtype (CUDA's f32 scratch route). */
    {"gemm_f32_nt_bias_relu", E_gemm, {32, 128, 200}, F32, F32, .flags = TRANS_B | BIAS | GEMM_RELU, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_bf16_nt_bias_relu_fc1", E_gemm, {64, 256, 784}, BF16, BF16, .flags = TRANS_B | BIAS | GEMM_RELU, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"gemm_f16_nt_bias_relu_beta_ld", E_gemm, {33, 40, 72, 3}, F16, F16, .flags = TRANS_B | BIAS | GEMM_RELU, .f = {1, 0.5f}, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    {"gemm_f32_nn_relu_alpha", E_gemm, {40, 56, 48}, F32, F32, .flags = GEMM_RELU, .f = {-0.5f, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f16_bf16c_bias_relu", E_gemm, {24, 40, 64}, F16, BF16, .flags = TRANS_B | BIAS | GEMM_RELU, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"gemm_bf16_tt_f32c_bias_relu", E_gemm, {20, 36, 44, 2}, BF16, F32, .flags = TRANS_A | TRANS_B | BIAS | GEMM_RELU, .f = {1, 1}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    /* Bias + GELU: the pre-activation in aux (the same bits on both backends' routes, as the
     * bias epilogue writes), C its GELU; on CUDA the tanh form is cuBLASLt's GELU_AUX_BIAS where
     * an algorithm takes it (f32 C, a half C of the inputs' dtype, ldc a multiple of 8), the GELU
     * of the unrounded value, within 2^-p (2 |C| + 2 |aux|) (core/backend.h): the atol covers
     * 2^-7 2 |aux| for bf16 pre-activations of about 1 and 2^-10 2 |aux| for f16. Else the
     * unary GELU kernel from aux: a padded ldc, the erf form, f16 inputs into a bf16 C, a batch. */
    {"gemm_f32_nt_bias_gelu_tanh", E_gemm, {32, 128, 200}, F32, F32, .flags = TRANS_B | BIAS | GEMM_GELU_TANH, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -0.2f, .hi = 0.2f},
    {"gemm_bf16_nt_bias_gelu_tanh_fc", E_gemm, {64, 256, 96}, BF16, BF16, .flags = TRANS_B | BIAS | GEMM_GELU_TANH, .f = {1, 0}, .tol = TOL(2e-2, ULP_BF16), .lo = -0.3f, .hi = 0.3f},
    {"gemm_f16_nt_gelu_tanh_nobias", E_gemm, {40, 48, 64}, F16, F16, .flags = TRANS_B | GEMM_GELU_TANH, .f = {1, 0}, .tol = TOL(3e-3, ULP_F16), .lo = -0.3f, .hi = 0.3f},
    {"gemm_f16_nt_bias_gelu_erf_ld", E_gemm, {33, 40, 72, 3}, F16, F16, .flags = TRANS_B | BIAS | GEMM_GELU_ERF, .f = {1, 0}, .tol = TOL(1e-3, ULP_F16), .lo = -0.3f, .hi = 0.3f},
    {"gemm_f32_nn_gelu_tanh_ld", E_gemm, {20, 36, 44, 1}, F32, F32, .flags = BIAS | GEMM_GELU_TANH, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -0.3f, .hi = 0.3f},
    {"gemm_f16_bf16c_bias_gelu_tanh", E_gemm, {24, 40, 64}, F16, BF16, .flags = TRANS_B | BIAS | GEMM_GELU_TANH, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -0.3f, .hi = 0.3f},
    {"gemm_batch_bf16_nt_bias_gelu_erf", E_gemm, {16, 32, 40, 0, 3}, BF16, BF16, .flags = TRANS_B | BIAS | GEMM_GELU_ERF, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -0.3f, .hi = 0.3f},
    /* A half C with a bias and no epilogue: written directly, the bias rounded to f16 first. */
    {"gemm_f16_nt_bias_direct", E_gemm, {48, 64, 80}, F16, F16, .flags = TRANS_B | BIAS, .f = {1, 0}, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    /* The bias gradient with the weight gradient (dW = dY^T X): fused for an f32 C (dense and
     * padded dY, half inputs), sum_rows for a half C, alpha != 1 (the sum is not scaled) and
     * TF32. */
    {"gemm_f32_tn_dw_dbias_fc", E_gemm, {10, 1568, 8}, F32, F32, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f32_tn_dw_dbias_ld", E_gemm, {40, 72, 56, 4}, F32, F32, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f16_tn_f32c_dbias", E_gemm, {48, 64, 96}, F16, F32, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    /* O1's weight gradient: half operands into the f32 gradient, accumulating (beta 1) with the bias gradient fused */
    {"gemm_bf16_tn_f32c_dbias", E_gemm, {64, 48, 96}, BF16, F32, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_bf16_tn_f32c_dbias_accum", E_gemm, {64, 48, 96}, BF16, F32, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {1, 1}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f16_tn_f32c_dbias_accum", E_gemm, {48, 64, 96}, F16, F32, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {1, 1}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_bf16_tn_dw_dbias_fc1", E_gemm, {256, 784, 64}, BF16, BF16, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"gemm_f32_tn_dbias_alpha_beta", E_gemm, {24, 40, 33, 1}, F32, F32, .flags = TRANS_A | GEMM_BIAS_GRAD, .f = {2, 0.5f}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_f32_tn_dbias_tf32", E_gemm, {32, 48, 64}, F32, F32, .flags = TRANS_A | GEMM_BIAS_GRAD | ALLOW_TF32, .f = {1, 0}, .tol = TOL(3e-2, 1e-2), .lo = -1, .hi = 1},
    /* Strided batches: attention's scores Q K^T and output P V per (batch, head), a shared B,
     * a half C with a bias and a ReLU (product by product on CUDA), an f16 batch (widened by
     * product on the CPU). */
    {"gemm_batch_f32_nt_scores", E_gemm, {17, 17, 32, 0, 12}, F32, F32, .flags = TRANS_B, .f = {0.17677669f, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_batch_bf16_nn_pv", E_gemm, {33, 64, 33, 0, 8}, BF16, BF16, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"gemm_batch_bf16_f32c_shared_b", E_gemm, {24, 40, 48, 0, 5}, BF16, F32, .flags = GEMM_BCAST_B, .f = {1, 0}, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"gemm_batch_f16_tn_beta_ld", E_gemm, {20, 24, 28, 3, 4}, F16, F16, .flags = TRANS_A, .f = {1, 0.5f}, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
    {"gemm_batch_bf16_nt_bias_relu", E_gemm, {16, 32, 40, 0, 3}, BF16, BF16, .flags = TRANS_B | BIAS | GEMM_RELU, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    /* TF32: f32 inputs may be rounded; half inputs are not affected. */
    {"gemm_f32_nn_tf32", E_gemm, {64, 96, 64}, F32, F32, .flags = ALLOW_TF32, .f = {1, 0}, .tol = TOL(3e-2, 1e-2), .lo = -1, .hi = 1},
    {"gemm_f32_nt_bias_relu_tf32", E_gemm, {16, 40, 64, 2}, F32, F32, .flags = TRANS_B | BIAS | GEMM_RELU | ALLOW_TF32, .f = {1, 0}, .tol = TOL(3e-2, 1e-2), .lo = -1, .hi = 1},
    {"gemm_bf16_nt_tf32_ignored", E_gemm, {32, 48, 64}, BF16, BF16, .flags = TRANS_B | ALLOW_TF32, .f = {1, 0}, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    /* The convolution's switches. TF32: 25 products per output for layer 1 (2^-10 of about 6);
     * 324 per weight gradient of CONV_ODD (2^-10 of about 80). Nondeterministic algorithms sum
     * in another order: the f32 tolerances of the deterministic rows. */
    {"conv2d_fwd_f32_l1_bias_tf32", E_conv2d_fwd, CONV_L1, F32, .flags = BIAS | ALLOW_TF32, .tol = TOL(1e-2, 1e-2), .lo = -1, .hi = 1},
    {"conv2d_bwd_weight_f32_odd_tf32", E_conv2d_bwd_weight, CONV_ODD, F32, .flags = BIAS | ALLOW_TF32, .tol = TOL(1e-1, 1e-2), .lo = -1, .hi = 1},
    {"conv2d_fwd_bf16_l2_tf32_ignored", E_conv2d_fwd, CONV_L2, BF16, .flags = ALLOW_TF32, .tol = TOL(1e-3, ULP_BF16), .lo = -1, .hi = 1},
    {"conv2d_bwd_data_f32_l2_nondet", E_conv2d_bwd_data, CONV_L2, F32, .flags = NONDETERMINISTIC, .tol = TOL(1e-4, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_bwd_weight_f32_l1_nondet_dbias", E_conv2d_bwd_weight, CONV_L1, F32, .flags = BIAS | NONDETERMINISTIC, .tol = TOL(1e-3, 1e-4), .lo = -1, .hi = 1},
    {"conv2d_fwd_f16_odd_nondet", E_conv2d_fwd, CONV_ODD, F16, .flags = NONDETERMINISTIC, .tol = TOL(1e-3, ULP_F16), .lo = -1, .hi = 1},
};

#endif
