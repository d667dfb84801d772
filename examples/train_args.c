#include "train_args.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: amp-train [options]\n"
            "  --model convnet|mlp      network (default convnet)\n"
            "  --epochs N               passes over the training set (default 2)\n"
            "  --batch-size B           (default 128)\n"
            "  --lr X                   learning rate (default 0.05 for sgd, 0.001 for adam)\n"
            "  --momentum X             SGD momentum (default 0.9)\n"
            "  --optimizer sgd|adam     (default sgd)\n"
            "  --seed S                 initialisation, shuffling and dropout (default 0)\n"
            "  --data DIR               Fashion-MNIST IDX files (default "
            "/usr/share/datasets/fashion-mnist)\n"
            "  --max-steps N            stop after N optimizer steps (default: no limit)\n"
            "  --threads N              CPU threads (default: all cores)\n"
            "  --opt-level O0|O1|O2|O3  mixed precision level, as Apex's (default O0)\n"
            "  --half fp16|bf16         half type of O1-O3 (default fp16)\n"
            "  --loss-scale dynamic|N   override the level's loss scale\n"
            "  --init-scale N           a dynamic scaler's first scale (default 65536)\n"
            "  --skip-nonfinite on|off  skip steps with inf/NaN gradients (default: on at O1-O3)\n"
            "  --checkpoint-dir DIR     save checkpoints there (at the end, on SIGTERM/SIGINT, and\n"
            "                           every --save-every N steps); --keep K keeps the newest K\n"
            "  --resume latest|PATH     go on from DIR's latest checkpoint or a step folder\n"
            "  --no-eval                skip the test-set evaluation (accuracy reads 0)\n"
            "  --init-weights FILE      start from these weights (a safetensors state_dict)\n"
            "  --device auto|cpu|cuda   where to train (default auto: CUDA when a device\n"
            "                           answers and has every op, else the CPU); --cpu = cpu\n"
            "  --log-every N            every N steps print step, loss, loss scale and whether\n"
            "                           the step was skipped (with --json: one JSON object a line)\n"
            "  --accumulate K           K micro-batches of --batch-size per optimizer step, their\n"
            "                           losses divided by K (under mpirun: all-reduced once)\n"
            "  --sync-bn                under mpirun: batch norm statistics over every rank's batch\n"
            "  --allreduce-fp32         under mpirun: half gradients all-reduced in f32\n"
            "  --batch-per-process      under mpirun: --batch-size is each process's batch (the\n"
            "                           global batch grows with the processes) instead of the\n"
            "                           global batch split over them\n"
            "  --allow-tf32             CUDA: f32 GEMMs and convolutions may use TF32 (PyTorch's\n"
            "                           allow_tf32; the CPU computes true f32 either way)\n"
            "  --nondeterministic       CUDA: cuDNN may pick faster non-deterministic algorithms\n"
            "  --json                   end with one line holding a JSON summary\n"
            "Under mpirun or srun every process trains its share of each epoch (DDP); rank 0\n"
            "prints, and what it prints holds for all: the loss averaged over the ranks and the\n"
            "samples/s of all of them. --batch-size is the global batch, split over the\n"
            "processes, so that N processes train as one does, only faster.\n");
}

static int parse_number(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "amp-train: --%s '%s': want a number in [%g, %g]\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int train_args_parse(int argc, char **argv, train_args *a) {
    *a = (train_args){.model = "convnet", .optimizer = "sgd",
                      .data_dir = "/usr/share/datasets/fashion-mnist", .epochs = 2,
                      .batch_size = 128, .lr = -1, .momentum = 0.9f, .accumulate = 1};
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"epochs", required_argument, 0, 'e'},
        {"batch-size", required_argument, 0, 'b'}, {"lr", required_argument, 0, 'l'},
        {"momentum", required_argument, 0, 'M'},  {"optimizer", required_argument, 0, 'o'},
        {"seed", required_argument, 0, 's'},      {"data", required_argument, 0, 'd'},
        {"max-steps", required_argument, 0, 'x'}, {"threads", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},            {"cpu", no_argument, 0, 'c'},
        {"opt-level", required_argument, 0, 'O'}, {"half", required_argument, 0, 'H'},
        {"loss-scale", required_argument, 0, 'S'}, {"skip-nonfinite", required_argument, 0, 'N'},
        {"checkpoint-dir", required_argument, 0, 'C'}, {"save-every", required_argument, 0, 'E'},
        {"keep", required_argument, 0, 'K'},      {"resume", required_argument, 0, 'R'},
        {"init-scale", required_argument, 0, 'I'}, {"no-eval", no_argument, 0, 'V'},
        {"init-weights", required_argument, 0, 'W'}, {"device", required_argument, 0, 'D'},
        {"log-every", required_argument, 0, 'L'}, {"accumulate", required_argument, 0, 'A'},
        {"sync-bn", no_argument, 0, 'B'},          {"allreduce-fp32", no_argument, 0, 'F'},
        {"batch-per-process", no_argument, 0, 'G'}, {"allow-tf32", no_argument, 0, 'T'},
        {"nondeterministic", no_argument, 0, 'Z'},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    int c;
    double v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        const char *name = "";
        for (const struct option *o = opts; o->name; o++)
            if (o->val == c) name = o->name;
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'o': a->optimizer = optarg; break;
        case 'd': a->data_dir = optarg; break;
        case 'j': a->json = true; break;
        case 'C': a->checkpoint_dir = optarg; break;
        case 'V': a->no_eval = true; break;
        case 'W': a->init_weights = optarg; break;
        case 'I': if (parse_number(name, optarg, 1e-30, 1e30, &v)) return -1; a->init_scale = (float)v; break;
        case 'R': a->resume = optarg; break;
        case 'E': if (parse_number(name, optarg, 1, 1e12, &v)) return -1; a->save_every = (int64_t)v; break;
        case 'K': if (parse_number(name, optarg, 1, 1e6, &v)) return -1; a->keep = (int)v; break;
        case 'c': a->device = 1; break;
        case 'D':
            if (!strcmp(optarg, "auto")) a->device = 0;
            else if (!strcmp(optarg, "cpu")) a->device = 1;
            else if (!strcmp(optarg, "cuda")) a->device = 2;
            else {
                fprintf(stderr, "amp-train: --device '%s': want auto, cpu or cuda\n", optarg);
                return -1;
            }
            break;
        case 'L': if (parse_number(name, optarg, 1, 1e12, &v)) return -1; a->log_every = (int64_t)v; break;
        case 'A': if (parse_number(name, optarg, 1, 1e6, &v)) return -1; a->accumulate = (int64_t)v; break;
        case 'B': a->sync_bn = true; break;
        case 'G': a->batch_per_process = true; break;
        case 'T': a->allow_tf32 = true; break;
        case 'Z': a->nondeterministic = true; break;
        case 'F': a->allreduce_fp32 = true; break;
        case 'h': train_usage(stdout); return 1;
        case 'O':
            if (strlen(optarg) != 2 || optarg[0] != 'O' || optarg[1] < '0' || optarg[1] > '3') {
                fprintf(stderr, "amp-train: --opt-level '%s': want O0, O1, O2 or O3\n", optarg);
                return -1;
            }
            a->opt_level = optarg[1] - '0';
            break;
        case 'H':
            if (strcmp(optarg, "fp16") && strcmp(optarg, "bf16")) {
                fprintf(stderr, "amp-train: --half '%s': want fp16 or bf16\n", optarg);
                return -1;
            }
            a->bf16 = strcmp(optarg, "bf16") == 0;
            break;
        case 'N':
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "amp-train: --skip-nonfinite '%s': want on or off\n", optarg);
                return -1;
            }
            a->skip_nonfinite = strcmp(optarg, "on") == 0 ? 1 : -1;
            break;
        case 'S':
            if (strcmp(optarg, "dynamic") == 0) a->loss_scale = -1.0f;
            else if (parse_number(name, optarg, 1e-30, 1e30, &v)) return -1;
            else a->loss_scale = (float)v;
            break;
        case 'e': if (parse_number(name, optarg, 1, 1e6, &v)) return -1; a->epochs = (int)v; break;
        case 'b': if (parse_number(name, optarg, 1, 1e6, &v)) return -1; a->batch_size = (int64_t)v; break;
        case 'l': if (parse_number(name, optarg, 0, 1e3, &v)) return -1; a->lr = (float)v; break;
        case 'M': if (parse_number(name, optarg, 0, 1, &v)) return -1; a->momentum = (float)v; break;
        case 's': if (parse_number(name, optarg, 0, 1.8e19, &v)) return -1; a->seed = (uint64_t)v; break;
        case 'x': if (parse_number(name, optarg, 0, 1e12, &v)) return -1; a->max_steps = (int64_t)v; break;
        case 't': if (parse_number(name, optarg, 0, 4096, &v)) return -1; a->threads = (int)v; break;
        default:
            fprintf(stderr, "amp-train: unknown or incomplete option '%s'\n", argv[optind - 1]);
            train_usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "amp-train: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (strcmp(a->model, "convnet") && strcmp(a->model, "mlp")) {
        fprintf(stderr, "amp-train: --model '%s': want convnet or mlp\n", a->model);
        return -1;
    }
    if (strcmp(a->optimizer, "sgd") && strcmp(a->optimizer, "adam")) {
        fprintf(stderr, "amp-train: --optimizer '%s': want sgd or adam\n", a->optimizer);
        return -1;
    }
    if ((a->save_every || a->keep) && !a->checkpoint_dir) {
        fprintf(stderr, "amp-train: --save-every and --keep need --checkpoint-dir\n");
        return -1;
    }
    if (a->resume && !strcmp(a->resume, "latest") && !a->checkpoint_dir) {
        fprintf(stderr, "amp-train: --resume latest needs --checkpoint-dir\n");
        return -1;
    }
    if (a->lr < 0) a->lr = strcmp(a->optimizer, "sgd") == 0 ? 0.05f : 0.001f;
    return 0;
}
