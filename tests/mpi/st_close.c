/* st_close A B TOL [INIT [NAME:FROM:TO]]: the f32 tensors of safetensors file A against those of
 * the same names in B, norm-wise over all of them (the model's weights as one vector):
 * ||a - b|| / ||b||, or with INIT ||a - b|| / ||b - init||, in units of the distance B trained
 * from INIT (a step's difference, and a planted error in it, are sized by the step, not by the
 * weights). NAME:FROM:TO leaves the elements [FROM, TO) of each tensor whose name ends in NAME
 * out of both norms (a slice the loss does not depend on, which any two summation orders may
 * move apart) and prints their difference on its own. Prints that, and the worst tensor's own;
 * exits 0 when the former is at most TOL (TOL inf: a figure, not a bound), 1 when it is not, 2
 * on bad arguments or files that do not hold the same tensors. For the mpi tests that hold N
 * processes against one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"

/* Element j of an f32 tensor, widened (exactly) to double. */
static double at(const amp_st_tensor *t, int64_t j) {
    float x;
    memcpy(&x, (const char *)t->data + 4 * j, 4);
    return x;
}

static int same_f32(const amp_st_tensor *x, const amp_st_tensor *y) {
    return x->dtype == AMP_ST_F32 && y->dtype == AMP_ST_F32 && x->numel == y->numel;
}

int main(int argc, char **argv) {
    char skip[256] = "";
    long skip_from = 0, skip_to = 0;
    if (argc < 4 || argc > 6 ||
        (argc == 6 && sscanf(argv[5], "%255[^:]:%ld:%ld", skip, &skip_from, &skip_to) != 3)) {
        fprintf(stderr, "usage: st_close A B TOL [INIT [NAME:FROM:TO]]\n");
        return 2;
    }
    double tol = atof(argv[3]), worst = 0, all_d = 0, all_n = 0, skip_d = 0;
    amp_st_reader *a = NULL, *b = NULL, *w0 = NULL;
    if (amp_st_reader_open(argv[1], &a) != AMP_OK || amp_st_reader_open(argv[2], &b) != AMP_OK ||
        (argc >= 5 && amp_st_reader_open(argv[4], &w0) != AMP_OK)) {
        fprintf(stderr, "st_close: %s\n", amp_last_error());
        return 2;
    }
    const char *worst_name = "";
    size_t skip_len = strlen(skip);
    int64_t n_skipped = 0;
    int bad = amp_st_reader_n(a) != amp_st_reader_n(b);
    if (bad)
        fprintf(stderr, "st_close: %zu tensors against %zu\n", amp_st_reader_n(a),
                amp_st_reader_n(b));
    for (size_t i = 0; i < amp_st_reader_n(a) && !bad; i++) {
        amp_st_tensor ta, tb, t0;
        if (amp_st_reader_at(a, i, &ta) != AMP_OK || amp_st_reader_find(b, ta.name, &tb) != AMP_OK ||
            !same_f32(&ta, &tb) ||
            (w0 && (amp_st_reader_find(w0, ta.name, &t0) != AMP_OK || !same_f32(&ta, &t0)))) {
            fprintf(stderr, "st_close: tensor %zu (%s) does not match\n", i, ta.name);
            bad = 1;
            break;
        }
        size_t len = strlen(ta.name);
        int sliced = skip_len && len >= skip_len && !strcmp(ta.name + len - skip_len, skip);
        double d = 0, n = 0;
        for (int64_t j = 0; j < ta.numel; j++) {
            double x = at(&ta, j), y = at(&tb, j), ref = w0 ? at(&t0, j) : 0;
            if (sliced && j >= skip_from && j < skip_to) {
                skip_d += (x - y) * (x - y);
                n_skipped++;
                continue;
            }
            d += (x - y) * (x - y);
            n += (y - ref) * (y - ref);
        }
        all_d += d, all_n += n;
        double rel = n > 0 ? sqrt(d / n) : sqrt(d);
        if (!(rel <= worst)) worst = rel, worst_name = ta.name;
    }
    double model = all_n > 0 ? sqrt(all_d / all_n) : sqrt(all_d);
    if (!bad) {
        printf("st_close: %zu tensors: %.3g %s over all of them (tolerance %g); the worst tensor "
               "%s, %.3g", amp_st_reader_n(a), model,
               w0 ? "of the distance trained" : "relative", tol, worst_name, worst);
        if (n_skipped)
            printf("; left out %lld elements of *%s, their difference %.3g of the same",
                   (long long)n_skipped, skip, all_n > 0 ? sqrt(skip_d / all_n) : sqrt(skip_d));
        printf("\n");
    }
    amp_st_reader_free(a);
    amp_st_reader_free(b);
    amp_st_reader_free(w0);
    return bad ? 2 : !(model <= tol);
}
