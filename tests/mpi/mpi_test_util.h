/* What the mpi tests share: the rank and size, the device under test, the random batches, a
 * model's parameters or buffers as f64 values, their comparison across ranks and against a
 * single-process reference. */
#ifndef AMP_TESTS_MPI_TEST_UTIL_H
#define AMP_TESTS_MPI_TEST_UTIL_H

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "core/half.h"
#include "test_util.h"
#include "core/tensor_internal.h"

#define PER_RANK 64
#define IMG (28 * 28)

static int g_rank, g_size;
/* AMP_TEST_DEVICE=cuda: the CUDA backend (NCCL collectives), e.g. under the cudacpu build. */
static amp_device g_device = AMP_DEVICE_CPU;

static inline void mpi_test_init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *dev = getenv("AMP_TEST_DEVICE");
    if (dev && !strcmp(dev, "cuda")) g_device = AMP_DEVICE_CUDA;
}

/* Every rank fails when one does; rank 0 prints the summary. */
static inline int mpi_test_finish(const char *name) {
    int fails = test_n_fail, total_fails;
    MPI_Allreduce(&fails, &total_fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int rc = g_rank == 0 ? test_summary(name) : (test_n_fail ? 1 : 0);
    MPI_Finalize();
    return total_fails ? 1 : rc;
}

/* The global batch of step `step` (a fixed LCG from `seed`): x [g, 1, 28, 28] in [0, 1),
 * labels in [0, 10). */
static inline void make_batch_seeded(uint32_t seed, int step, int g, float *x, int32_t *y) {
    uint32_t s = seed + 7919u * (uint32_t)step;
    for (int i = 0; i < g * IMG; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f;
    }
    for (int i = 0; i < g; i++) {
        s = s * 1664525u + 1013904223u;
        y[i] = (int32_t)((s >> 16) % 10);
    }
}

/* Every parameter (or every buffer: running statistics) as f64 values, concatenated. */
static inline double *state_of(const amp_model *m, bool buffers, int64_t *n_out) {
    int n_t = buffers ? amp_model_n_buffers(m) : amp_model_n_params(m);
    int64_t n = 0;
    for (int i = 0; i < n_t; i++)
        n += (buffers ? amp_model_buffer(m, i) : amp_model_param(m, i))->numel;
    double *w = malloc((size_t)n * sizeof *w);
    int64_t k = 0;
    for (int i = 0; i < n_t; i++) {
        const amp_tensor *p = buffers ? amp_model_buffer(m, i) : amp_model_param(m, i);
        void *tmp = malloc(amp_tensor_nbytes(p));
        CHECK_OK(amp_tensor_to_host(p, tmp, amp_tensor_nbytes(p)));
        for (int64_t j = 0; j < p->numel; j++) {
            uint16_t h = ((uint16_t *)tmp)[j];
            w[k++] = p->dtype == AMP_F32 ? (double)((float *)tmp)[j]
                     : p->dtype == AMP_F16 ? (double)amp_f16_bits_to_f32(h)
                                           : (double)amp_bf16_bits_to_f32(h);
        }
        free(tmp);
    }
    *n_out = n;
    return w;
}

/* The values are bit-identical on every rank: rank 0's go to all, each compares. */
static inline void check_same_on_all_ranks(const amp_model *m, bool buffers, const char *what) {
    int64_t n;
    double *w = state_of(m, buffers, &n);
    double *w0 = malloc((size_t)n * sizeof *w0);
    memcpy(w0, w, (size_t)n * sizeof *w0);
    MPI_Bcast(w0, (int)n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += memcmp(&w[i], &w0[i], sizeof w[i]) != 0;
    CHECK_MSG(differ == 0, "%s: rank %d has %lld %s that differ from rank 0's", what, g_rank,
              (long long)differ, buffers ? "running statistics" : "weights");
    free(w);
    free(w0);
}

/* ||a - b|| / ||b|| over all values (the relative error of the vector); *max_rel gets
 * max |a - b| / max |b|. One ReLU whose input sits within rounding of 0 can flip between two
 * correct summation orders and move its unit's row by far more than an ulp, so the element-wise
 * maximum is reported but the vector's relative error is what is bounded. */
static inline double rel_diff(const amp_model *a, const amp_model *b, bool buffers,
                              double *max_rel) {
    int64_t na, nb;
    double *wa = state_of(a, buffers, &na), *wb = state_of(b, buffers, &nb);
    double dmax = 0, bmax = 0, d2 = 0, b2 = 0;
    for (int64_t i = 0; i < na && na == nb; i++) {
        double d = wa[i] - wb[i];
        dmax = fmax(dmax, fabs(d));
        bmax = fmax(bmax, fabs(wb[i]));
        d2 += d * d;
        b2 += wb[i] * wb[i];
    }
    free(wa);
    free(wb);
    *max_rel = na == nb ? dmax / bmax : INFINITY;
    return na == nb ? sqrt(d2 / b2) : INFINITY;
}

#endif
