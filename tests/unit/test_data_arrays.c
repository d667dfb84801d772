/* Datasets of any f32 inputs and targets (amp_dataset_from_arrays, PyTorch's TensorDataset)
 * through the loader and the stager, as a regression or a feature-vector classifier uses them:
 *  - every batch carries its real shapes (x [n, 10], not [n, 10, 1, 1]; targets [n, 2]) and each
 *    input stays with its own target through the shuffle; every sample once per epoch, sharded
 *    across ranks as before;
 *  - class ids from arrays ([n, 5] features), and 0-dimensional samples and targets ([n]);
 *  - the seeds' SimpleModel (x [32, 10], MSE against [32, 2]) trains at O1 from the loader through
 *    the stager, on every device that answers: the loss falls;
 *  - bad descriptions are refused with a message naming the field. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "test_devices.h"
#include "test_util.h"
#include "core/tensor_internal.h"

#define NAME "test_data_arrays"
enum { N = 96, F = 10, T = 2 };

/* x[i] = sin(i, j) features; target[i] = {sum of x[i], i}: the second column names the sample. */
static void make_regression(float *x, float *y) {
    for (int i = 0; i < N; i++) {
        float sum = 0;
        for (int j = 0; j < F; j++) sum += x[i * F + j] = (float)sin(0.7 * i + 1.3 * j);
        y[i * T] = sum;
        y[i * T + 1] = (float)i;
    }
}

static void test_shapes_and_pairs(void) {
    float x[N * F], y[N * T];
    make_regression(x, y);
    amp_dataset *ds = NULL;
    CHECK_OK(amp_dataset_from_arrays(&(amp_dataset_desc){.n = N, .x_ndim = 1, .x_shape = {F},
                                                         .x = x, .y_ndim = 1, .y_shape = {T},
                                                         .y = y},
                                     &ds));
    if (!ds) return;
    int64_t ts[3];
    CHECK(amp_dataset_sample_ndim(ds) == 1 && amp_dataset_sample_numel(ds) == F &&
          amp_dataset_target_shape(ds, ts) == 1 && ts[0] == T && amp_dataset_n_classes(ds) == 0 &&
          !amp_dataset_labels(ds) && amp_dataset_target_numel(ds) == T);
    for (int world = 1; world <= 2; world++) {
        int seen[N] = {0};
        for (int rank = 0; rank < world; rank++) {
            amp_loader *ld = NULL;
            CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 32, .shuffle = true,
                                                              .seed = 9, .rank = rank,
                                                              .world_size = world},
                                       &ld));
            if (!ld) continue;
            for (amp_batch b; amp_loader_next(ld, &b) == AMP_OK && b.n > 0;) {
                CHECK_MSG(b.ndim == 2 && b.shape[0] == b.n && b.shape[1] == F && b.targets &&
                              !b.y && b.target_ndim == 2 && b.target_shape[0] == b.n &&
                              b.target_shape[1] == T,
                          "batch: ndim %d shape [%lld, %lld], target ndim %d", b.ndim,
                          (long long)b.shape[0], (long long)b.shape[1], b.target_ndim);
                for (int64_t r = 0; r < b.n; r++) {
                    int i = (int)b.targets[r * T + 1];
                    float sum = 0;
                    for (int j = 0; j < F; j++) sum += b.x[r * F + j];
                    CHECK_MSG(i >= 0 && i < N && memcmp(b.x + r * F, x + i * F, sizeof(float) * F) == 0
                                  && b.targets[r * T] == sum,
                              "row %lld: its input is not sample %d's", (long long)r, i);
                    if (i >= 0 && i < N) seen[i]++;
                }
            }
            amp_loader_free(ld);
        }
        int once = 0;
        for (int i = 0; i < N; i++) once += seen[i] == 1;
        CHECK_MSG(once == N, "world %d: %d of %d samples seen once in the epoch", world, once, N);
    }
    amp_dataset_free(ds);

    /* Class ids from arrays, and scalar samples with scalar targets. */
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = i % 3;
    CHECK_OK(amp_dataset_from_arrays(&(amp_dataset_desc){.n = N, .x_ndim = 1, .x_shape = {5},
                                                         .x = x, .labels = ids, .n_classes = 3},
                                     &ds));
    amp_loader *ld = NULL;
    if (ds) CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 40}, &ld));
    amp_batch b;
    if (ld) {
        CHECK_OK(amp_loader_next(ld, &b));
        CHECK(b.n == 40 && b.ndim == 2 && b.shape[1] == 5 && b.y && !b.targets && b.y[4] == 1 &&
              b.x[5 * 5] == x[25] && amp_dataset_n_classes(ds) == 3);
    }
    amp_loader_free(ld);
    amp_dataset_free(ds);
    CHECK_OK(amp_dataset_from_arrays(&(amp_dataset_desc){.n = N, .x = x, .y = y}, &ds));
    ld = NULL;
    if (ds) CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 50}, &ld));
    if (ld) {
        CHECK_OK(amp_loader_next(ld, &b));
        CHECK(b.n == 50 && b.ndim == 1 && b.target_ndim == 1 && b.target_shape[0] == 50 &&
              b.x[7] == x[7] && b.targets[7] == y[7]);
        CHECK_OK(amp_loader_next(ld, &b));
        CHECK(b.n == 46 && b.target_shape[0] == 46 && b.x[0] == x[50]);
    }
    amp_loader_free(ld);
    amp_dataset_free(ds);
}

static void test_bad_descriptions(void) {
    float x[8] = {0}, y[8] = {0};
    int32_t ids[4] = {0, 1, 2, 5};
    amp_dataset *ds = (amp_dataset *)&ds;
    CHECK_FAILS(amp_dataset_from_arrays(&(amp_dataset_desc){.n = 4, .x = x}, &ds),
                AMP_ERR_INVALID_ARG, "neither is set");
    CHECK(ds == NULL);
    CHECK_FAILS(amp_dataset_from_arrays(&(amp_dataset_desc){.n = 4, .x = x, .y = y, .labels = ids,
                                                            .n_classes = 6},
                                        &ds),
                AMP_ERR_INVALID_ARG, "both are set");
    CHECK_FAILS(amp_dataset_from_arrays(&(amp_dataset_desc){.n = 4, .x = x, .labels = ids,
                                                            .n_classes = 5},
                                        &ds),
                AMP_ERR_INVALID_ARG, "labels[3] = 5 not in [0, 5)");
    CHECK_FAILS(amp_dataset_from_arrays(&(amp_dataset_desc){.n = 4, .x_ndim = 4, .x = x, .y = y},
                                        &ds),
                AMP_ERR_INVALID_ARG, "x_ndim 4");
    CHECK_FAILS(amp_dataset_from_arrays(&(amp_dataset_desc){.n = 4, .x = x, .y = y, .y_ndim = 2,
                                                            .y_shape = {2, 0}},
                                        &ds),
                AMP_ERR_INVALID_ARG, "y_shape[1] = 0");
    CHECK_FAILS(amp_dataset_from_arrays(&(amp_dataset_desc){.n = 0, .x = x, .y = y}, &ds),
                AMP_ERR_INVALID_ARG, "n 0");
    CHECK_FAILS(amp_dataset_from_arrays(&(amp_dataset_desc){.n = 4, .y = y}, &ds), AMP_ERR_INVALID_ARG,
                "'d->x'");
}

/* The seeds' SimpleModel: Linear(10, 10), ReLU, Linear(10, 2), MSE, O1, from the loader through
 * the stager; the regression target is a fixed linear map of x, which the model can learn. */
static void train_simple_model(amp_device device) {
    float x[N * F], y[N * T];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) x[i * F + j] = (float)sin(0.37 * i + 0.91 * j);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < T; k++) {
            float v = 0;
            for (int j = 0; j < F; j++) v += x[i * F + j] * (float)cos(0.5 * j + k);
            y[i * T + k] = v / 4;
        }
    amp_ctx *ctx = NULL;
    amp_dataset *ds = NULL;
    amp_loader *ld = NULL;
    amp_stager *st = NULL;
    amp_model *m = NULL;
    amp_optimizer *opt = NULL;
    CHECK_OK(amp_ctx_create(&(amp_ctx_opts){.device = device, .seed = 4}, &ctx));
    CHECK_OK(amp_dataset_from_arrays(&(amp_dataset_desc){.n = N, .x_ndim = 1, .x_shape = {F},
                                                         .x = x, .y_ndim = 1, .y_shape = {T},
                                                         .y = y},
                                     &ds));
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 32, .shuffle = true, .seed = 1},
                               &ld));
    CHECK_OK(amp_stager_create(ctx, &st));
    CHECK_OK(amp_seq_create(ctx, &m));
    CHECK_OK(amp_seq_add_linear(m, "0", F, 10, true));
    CHECK_OK(amp_seq_add_relu(m, "1"));
    CHECK_OK(amp_seq_add_linear(m, "2", 10, T, true));
    CHECK_OK(amp_adam_create(m, &(amp_adam_opts){.lr = 1e-2f}, &opt));
    CHECK_OK(amp_initialize_ex(m, opt, &(amp_options){.opt_level = AMP_O1, .quiet = true}));
    double first = 0, last = 0;
    enum { EPOCHS = 40 };
    for (int e = 0; ld && st && opt && e < EPOCHS; e++) {
        double sum = 0;
        int n = 0;
        for (amp_batch b; amp_loader_next(ld, &b) == AMP_OK && b.n > 0;) {
            amp_tensor *xb = NULL, *yb = NULL, *out = NULL, *loss = NULL;
            CHECK_OK(amp_stager_put(st, &b, &xb, &yb));
            if (!xb) break;
            CHECK(xb->ndim == 2 && xb->shape[1] == F && yb->dtype == AMP_F32 && yb->ndim == 2 &&
                  yb->shape[1] == T);
            CHECK_OK(amp_model_forward(m, xb, &out));
            CHECK_OK(amp_mse_loss(out, yb, &loss));
            float l = 0;
            CHECK_OK(amp_tensor_item(loss, &l));
            sum += l;
            n++;
            CHECK_OK(amp_backward(loss));
            CHECK_OK(amp_step(opt, NULL));
            CHECK_OK(amp_zero_grad(opt));
        }
        if (e == 0) first = sum / n;
        last = sum / n;
    }
    CHECK_MSG(last < 0.1 * first && isfinite(last), "%s: the SimpleModel's MSE went %g -> %g",
              device == AMP_DEVICE_CUDA ? "cuda" : "cpu", first, last);
    amp_optimizer_free(opt);
    amp_model_free(m);
    amp_stager_free(st);
    amp_loader_free(ld);
    amp_dataset_free(ds);
    amp_ctx_free(ctx);
}

int main(void) {
    test_shapes_and_pairs();
    test_bad_descriptions();
    test_on_each_device(train_simple_model);
    return test_summary(NAME);
}
