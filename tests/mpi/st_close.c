/* st_close A B TOL: the f32 tensors of safetensors file A against those of the same names in B,
 * norm-wise over all of them (||a - b|| / ||b||, the model's weights as one vector); prints that
 * and the worst tensor's own, and exits 0 when the former is at most TOL, 1 when it is not or the
 * files do not hold the same tensors, 2 on bad arguments. For the mpi tests that hold N
 * processes against one (weights within 1e-5 relative after 20 steps). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: st_close A B TOL\n");
        return 2;
    }
    double tol = atof(argv[3]), worst = 0, all_d = 0, all_n = 0;
    amp_st_reader *a = NULL, *b = NULL;
    if (amp_st_reader_open(argv[1], &a) != AMP_OK || amp_st_reader_open(argv[2], &b) != AMP_OK) {
        fprintf(stderr, "st_close: %s\n", amp_last_error());
        return 2;
    }
    const char *worst_name = "";
    int bad = amp_st_reader_n(a) != amp_st_reader_n(b);
    for (size_t i = 0; i < amp_st_reader_n(a) && !bad; i++) {
        amp_st_tensor ta, tb;
        if (amp_st_reader_at(a, i, &ta) != AMP_OK || amp_st_reader_find(b, ta.name, &tb) != AMP_OK ||
            ta.dtype != AMP_ST_F32 || tb.dtype != AMP_ST_F32 || ta.numel != tb.numel) {
            fprintf(stderr, "st_close: tensor %zu (%s) does not match\n", i, ta.name);
            bad = 1;
            break;
        }
        double d = 0, n = 0;
        for (int64_t j = 0; j < ta.numel; j++) {
            float x, y;
            memcpy(&x, (const char *)ta.data + 4 * j, 4);
            memcpy(&y, (const char *)tb.data + 4 * j, 4);
            d += ((double)x - y) * ((double)x - y);
            n += (double)y * y;
        }
        all_d += d, all_n += n;
        double rel = n > 0 ? sqrt(d / n) : sqrt(d);
        if (!(rel <= worst)) worst = rel, worst_name = ta.name;
    }
    double model = all_n > 0 ? sqrt(all_d / all_n) : sqrt(all_d);
    printf("st_close: %zu tensors: %.3g relative over all of them (tolerance %g); the worst "
           "tensor %s, %.3g\n", amp_st_reader_n(a), model, tol, worst_name, worst);
    amp_st_reader_free(a);
    amp_st_reader_free(b);
    return bad || !(model <= tol);
}
