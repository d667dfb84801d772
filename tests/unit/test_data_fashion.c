/* The real Fashion-MNIST files, when installed (/usr/share/datasets/fashion-mnist, or the folder
 * named by $AMP_FASHION_MNIST): 60000 training and 10000 test images of 28 x 28, 6000 / 1000 per
 * class (the counts Zalando's README states), and the normalisation constants in amp/data.h
 * recomputed from the training pixels. Skipped (ctest SKIPPED) when the files are absent. */
#define _POSIX_C_SOURCE 200809L

#include <string.h>
#include <sys/stat.h>

#include "amp/data.h"
#include "tests/test_util.h"

static void check_split(const char *dir, bool train) {
    const int64_t want_n = train ? 60000 : 10000;
    amp_dataset *ds = NULL;
    CHECK_OK(amp_mnist_load_ex(dir, train, &(amp_mnist_opts){.mean = 0, .std = 1}, &ds));
    if (!ds) return;
    int64_t shape[3];
    amp_dataset_sample_shape(ds, shape);
    CHECK(amp_dataset_n(ds) == want_n);
    CHECK(shape[0] == 1 && shape[1] == 28 && shape[2] == 28);
    CHECK(amp_dataset_n_classes(ds) == 10);

    int64_t counts[10] = {0};
    const int32_t *y = amp_dataset_labels(ds);
    for (int64_t i = 0; i < amp_dataset_n(ds); i++)
        if (y[i] >= 0 && y[i] < 10) counts[y[i]]++;
    int balanced = 1;
    for (int c = 0; c < 10; c++) balanced &= counts[c] == want_n / 10;
    CHECK_MSG(balanced, "class counts %lld %lld ... want %lld each", (long long)counts[0],
              (long long)counts[1], (long long)(want_n / 10));

    /* Pixel mean and (population) std of x/255 in double: the training set's must round to
     * AMP_FASHION_MNIST_MEAN / _STD, the constants users normalise with. */
    const float *x = amp_dataset_images(ds);
    int64_t numel = amp_dataset_n(ds) * 28 * 28;
    double sum = 0, sum_sq = 0, lo = 1, hi = 0;
    for (int64_t i = 0; i < numel; i++) {
        sum += x[i];
        sum_sq += (double)x[i] * x[i];
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    double mean = sum / (double)numel, std = sqrt(sum_sq / (double)numel - mean * mean);
    printf("fashion-mnist %s: n %lld, pixel mean %.4f std %.4f, range [%g, %g]\n",
           train ? "train" : "t10k", (long long)amp_dataset_n(ds), mean, std, lo, hi);
    CHECK(lo == 0.0 && hi == 1.0);
    if (train) {
        CHECK_MSG(fabs(mean - AMP_FASHION_MNIST_MEAN) < 5e-5, "mean %.5f", mean);
        CHECK_MSG(fabs(std - AMP_FASHION_MNIST_STD) < 5e-5, "std %.5f", std);
    }

    /* A whole shuffled epoch through the prefetching loader: every sample once. */
    amp_loader *ld = NULL;
    CHECK_OK(amp_loader_create(ds, &(amp_loader_opts){.batch_size = 256, .shuffle = true,
                                                      .seed = 1}, &ld));
    int64_t seen = 0, label_counts[10] = {0};
    for (amp_batch b; ld && amp_loader_next(ld, &b) == AMP_OK && b.n > 0;) {
        seen += b.n;
        for (int64_t r = 0; r < b.n; r++)
            if (b.y[r] >= 0 && b.y[r] < 10) label_counts[b.y[r]]++;
    }
    CHECK(seen == want_n && memcmp(label_counts, counts, sizeof counts) == 0);
    amp_loader_free(ld);
    amp_dataset_free(ds);
}

int main(void) {
    const char *dir = getenv("AMP_FASHION_MNIST");
    if (!dir || !*dir) dir = "/usr/share/datasets/fashion-mnist";
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", dir);
    struct stat st;
    if (stat(probe, &st) != 0) {
        snprintf(probe, sizeof probe, "no Fashion-MNIST in %s (set AMP_FASHION_MNIST)", dir);
        return test_skip("test_data_fashion", probe);
    }
    check_split(dir, true);
    check_split(dir, false);
    return test_summary("test_data_fashion");
}
