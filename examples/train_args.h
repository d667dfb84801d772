/* amp-train's command line. */
#ifndef AMP_EXAMPLES_TRAIN_ARGS_H
#define AMP_EXAMPLES_TRAIN_ARGS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct train_args {
    const char *model;     /* convnet | mlp */
    const char *optimizer; /* sgd | adam */
    const char *data_dir;
    int epochs;
    int64_t batch_size;
    float lr, momentum;
    uint64_t seed;
    int64_t max_steps; /* 0: no limit */
    int threads;       /* 0: all cores */
    bool json, cpu;
    int opt_level;         /* 0..3 */
    bool bf16;             /* --half bf16 (default fp16) */
    float loss_scale;      /* 0: the level's; -1: dynamic; > 0: static */
    int skip_nonfinite;    /* 0: the level's; 1: on; -1: off */
} train_args;

/* Fills args from argv; returns 0 to go on, 1 after printing help, -1 after printing an error. */
int train_args_parse(int argc, char **argv, train_args *args);

#endif
