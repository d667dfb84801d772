#include "train_args.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/checkpoint.h"

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: amp-train [options]\n"
            "  --model convnet|mlp|gpt|llama  network (default convnet); gpt, llama: see below\n"
            "  --epochs N               passes over the training set (default 2)\n"
            "  --batch-size B           (default 128)\n"
            "  --lr X                   learning rate (default 0.05 for sgd, 0.001 for adam)\n"
            "  --momentum X             SGD momentum (default 0.9)\n"
            "  --optimizer sgd|adam     (default sgd; adamw, the only one, for gpt)\n"
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
            "  --resume latest|PATH     go on from DIR's latest checkpoint or a step folder;\n"
            "                           latest where no save has completed yet starts at step 0\n"
            "  --no-eval                skip the test-set evaluation (--json: accuracy null)\n"
            "  --init-weights FILE      start from these weights (a safetensors state_dict;\n"
            "                           --model llama: a Hugging Face folder, config.json and\n"
            "                           model.safetensors or its shards)\n"
            "  --device auto|cpu|cuda   where to train (default auto: CUDA when a device\n"
            "                           answers and has every op, else the CPU); --cpu = cpu\n"
            "  --log-every N            every N steps print step, loss, loss scale and whether\n"
            "                           the step was skipped (with --json: one JSON object a line)\n"
            "  --accumulate K           K micro-batches of --batch-size per optimizer step, their\n"
            "                           losses divided by K (under mpirun: all-reduced once)\n"
            "  --sync-bn                under mpirun: batch norm statistics over every rank's batch\n"
            "  --allreduce-fp32         under mpirun: half gradients all-reduced in f32\n"
            "  --zero 1                 under mpirun: each process keeps and steps only its shard\n"
            "                           of the optimizer state and masters (ZeRO stage 1)\n"
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
            "processes, so that N processes train as one does, only faster.\n"
            "--model gpt (GPT-2, nanoGPT's names) trains on DIR/train.bin and DIR/val.bin (--data\n"
            "DIR, token files of llm.c's format; amp-text-tokens makes byte-level ones) with AdamW\n"
            "(betas 0.9, 0.95), --batch-size 16 and --lr 1e-3 unless given, and:\n"
            "  --n-layer 4 --n-head 4 --n-embd 256 --block-size 128 --vocab-size 256 --dropout 0\n"
            "  (saved with each checkpoint, nanoGPT's model_args: --resume takes those not given\n"
            "  from it and refuses those that differ)\n"
            "  --data-order random|sequential  windows drawn from (seed, step), or llm.c's order\n"
            "  --warmup-steps 100 --min-lr LR/10 --weight-decay 0.1 (2-D tensors only)\n"
            "  --lr-decay-steps N (where the cosine reaches --min-lr; default --max-steps: a run\n"
            "  stopped early and resumed keeps its schedule only when N stays the same)\n"
            "  --grad-clip 1.0 (0: none) --max-steps 2000 --eval-every 0 (and at the end)\n"
            "  --eval-batches 20 (0: no evaluation) --sample N (tokens printed at the end)\n"
            "  --temperature 1 --top-k 0\n"
            "  --tokenizer FILE  llm.c's tokenizer .bin (gpt2_tokenizer.bin for GPT-2's BPE): the\n"
            "                    sample starts at its end-of-text token and prints as text; without\n"
            "                    one a vocabulary of 256 prints as bytes, a larger one as ids\n"
            "  --eval-only       no training: the validation loss (and --sample) of the weights\n"
            "                    from --init-weights or --resume (nanoGPT's eval_only)\n"
            "  --start TEXT      the sample's prompt, its bytes the tokens (a vocabulary of 256\n"
            "                    without --tokenizer); --start-ids I,J,... for any vocabulary\n"
            "  --recompute none|selective|full  full: every block's activations recomputed in\n"
            "                    backward (its output kept only: one more forward); selective:\n"
            "                    the norms' outputs written again from their inputs; the same\n"
            "                    bits either way, less memory; not saved in checkpoints\n"
            "--model llama (Hugging Face's LlamaForCausalLM and its names) trains as --model gpt\n"
            "does, with the options above but the GPT's shape (--n-layer, --n-head, --n-embd,\n"
            "--dropout). Its shape is a LlamaConfig: --config FILE (a config.json), or that of\n"
            "--init-weights DIR, then these options over it, each a config.json field:\n"
            "  --hidden-size 256 --intermediate-size 704 --num-hidden-layers 4\n"
            "  --num-attention-heads 8 --num-key-value-heads 2 --head-dim (hidden / heads)\n"
            "  --max-position-embeddings 1024 --rope-theta 10000 --rms-norm-eps 1e-5\n"
            "  --tie-word-embeddings --vocab-size 256 (rope_scaling: from --config only)\n"
            "  --block-size T  the training window (default min(256, max_position_embeddings))\n"
            "  (the config is saved with each checkpoint, and as config.json in its folder: a\n"
            "  step folder is a Hugging Face folder; --resume refuses options that differ)\n");
}

/* An integer option: decimal digits (a '-' first where lo < 0), nothing else, in [lo, hi].
 * strtod would take "32.5" or "1.9" and the cast truncate them in silence. */
static int parse_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    bool starts = isdigit((unsigned char)s[0]) || (s[0] == '-' && lo < 0);
    if (!starts || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "amp-train: --%s '%s': want an integer in [%lld, %lld]\n", opt, s,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* --seed: an unsigned 64-bit integer (strtoull alone would take "-1" as 2^64 - 1). */
static int parse_seed(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!isdigit((unsigned char)s[0]) || errno || end == s || *end) {
        fprintf(stderr, "amp-train: --%s '%s': want an integer in [0, %llu]\n", opt, s,
                (unsigned long long)UINT64_MAX);
        return -1;
    }
    *out = v;
    return 0;
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
    *a = (train_args){.model = "convnet", .optimizer = NULL, .data_dir = NULL, .epochs = 2,
                      .batch_size = -1, .lr = -1, .momentum = 0.9f, .accumulate = 1,
                      .n_layer = 4, .n_head = 4, .n_embd = 256, .block_size = 128,
                      .vocab_size = 256, .min_lr = -1, .weight_decay = 0.1f, .grad_clip = 1.0f,
                      .temperature = 1.0f, .warmup_steps = 100, .eval_batches = 20};
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
        {"zero", required_argument, 0, 1022},
        {"batch-per-process", no_argument, 0, 'G'}, {"allow-tf32", no_argument, 0, 'T'},
        {"nondeterministic", no_argument, 0, 'Z'},
        {"n-layer", required_argument, 0, 1000},  {"n-head", required_argument, 0, 1001},
        {"n-embd", required_argument, 0, 1002},   {"block-size", required_argument, 0, 1003},
        {"vocab-size", required_argument, 0, 1004}, {"dropout", required_argument, 0, 1005},
        {"data-order", required_argument, 0, 1006}, {"warmup-steps", required_argument, 0, 1007},
        {"min-lr", required_argument, 0, 1008},   {"weight-decay", required_argument, 0, 1009},
        {"grad-clip", required_argument, 0, 1010}, {"eval-every", required_argument, 0, 1011},
        {"eval-batches", required_argument, 0, 1012}, {"sample", required_argument, 0, 1013},
        {"temperature", required_argument, 0, 1014}, {"top-k", required_argument, 0, 1015},
        {"lr-decay-steps", required_argument, 0, 1016}, {"tokenizer", required_argument, 0, 1017},
        {"eval-only", no_argument, 0, 1018}, {"start", required_argument, 0, 1019},
        {"start-ids", required_argument, 0, 1020}, {"recompute", required_argument, 0, 1021},
        {"config", required_argument, 0, 1100}, {"hidden-size", required_argument, 0, 1101},
        {"intermediate-size", required_argument, 0, 1102},
        {"num-hidden-layers", required_argument, 0, 1103},
        {"num-attention-heads", required_argument, 0, 1104},
        {"num-key-value-heads", required_argument, 0, 1105},
        {"head-dim", required_argument, 0, 1106},
        {"max-position-embeddings", required_argument, 0, 1107},
        {"rope-theta", required_argument, 0, 1108}, {"rms-norm-eps", required_argument, 0, 1109},
        {"tie-word-embeddings", no_argument, 0, 1110},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    int c;
    double v;
    int64_t i;
    /* the first option given of the language models' (gpt and llama), of the GPT's own and of
       the Llama's own */
    const char *lm_option = NULL, *gpt_option = NULL, *llama_option = NULL;
    const char *image_option = NULL; /* the first given of the MNIST models' own */
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        const char *name = "";
        for (const struct option *o = opts; o->name; o++)
            if (o->val == c) name = o->name;
        if (c >= 1000 && !lm_option) lm_option = name;
        bool gpt_own = c == 1000 || c == 1001 || c == 1002 || c == 1005;
        if (gpt_own && !gpt_option) gpt_option = name;
        if (c >= 1100 && !llama_option) llama_option = name;
        bool image_own = c == 'e' || c == 'M' || c == 'V' || c == 'B';
        if (image_own && !image_option) image_option = name;
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
        case 'E': if (parse_int(name, optarg, 1, 1000000000000, &i)) return -1; a->save_every = i; break;
        case 'K': if (parse_int(name, optarg, 1, 1000000, &i)) return -1; a->keep = (int)i; break;
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
        case 'L': if (parse_int(name, optarg, 1, 1000000000000, &i)) return -1; a->log_every = i; break;
        case 'A': if (parse_int(name, optarg, 1, 1000000, &i)) return -1; a->accumulate = i; break;
        case 'B': a->sync_bn = true; break;
        case 'G': a->batch_per_process = true; break;
        case 'T': a->allow_tf32 = true; break;
        case 'Z': a->nondeterministic = true; break;
        case 'F': a->allreduce_fp32 = true; break;
        case 'h': train_usage(stdout); return 1;
        case 1000:
            if (parse_int(name, optarg, 1, 64, &i)) return -1;
            a->n_layer = (int)i, a->given.n_layer = true;
            break;
        case 1001:
            if (parse_int(name, optarg, 1, 1024, &i)) return -1;
            a->n_head = (int)i, a->given.n_head = true;
            break;
        case 1002:
            if (parse_int(name, optarg, 1, 65536, &i)) return -1;
            a->n_embd = (int)i, a->given.n_embd = true;
            break;
        case 1003:
            if (parse_int(name, optarg, 1, 1 << 20, &i)) return -1;
            a->block_size = (int)i, a->given.block_size = true;
            break;
        case 1004:
            if (parse_int(name, optarg, 1, 65536, &i)) return -1;
            a->vocab_size = (int)i, a->given.vocab_size = true;
            break;
        case 1005: if (parse_number(name, optarg, 0, 0.999, &v)) return -1; a->dropout = (float)v; break;
        case 1006:
            if (strcmp(optarg, "random") && strcmp(optarg, "sequential")) {
                fprintf(stderr, "amp-train: --data-order '%s': want random or sequential\n", optarg);
                return -1;
            }
            a->data_order_sequential = strcmp(optarg, "sequential") == 0;
            break;
        case 1007: if (parse_int(name, optarg, 0, 1000000000000, &i)) return -1; a->warmup_steps = i; break;
        case 1008: if (parse_number(name, optarg, 0, 1e3, &v)) return -1; a->min_lr = (float)v; break;
        case 1009: if (parse_number(name, optarg, 0, 1e3, &v)) return -1; a->weight_decay = (float)v; break;
        case 1010: if (parse_number(name, optarg, 0, 1e6, &v)) return -1; a->grad_clip = (float)v; break;
        case 1011: if (parse_int(name, optarg, 0, 1000000000000, &i)) return -1; a->eval_every = i; break;
        case 1012: if (parse_int(name, optarg, 0, 1000000, &i)) return -1; a->eval_batches = i; break;
        case 1013: if (parse_int(name, optarg, 0, 10000000, &i)) return -1; a->sample = i; break;
        case 1014: if (parse_number(name, optarg, 1e-3, 1e3, &v)) return -1; a->temperature = (float)v; break;
        case 1015: if (parse_int(name, optarg, 0, 65536, &i)) return -1; a->top_k = (int)i; break;
        case 1016: if (parse_int(name, optarg, 1, 1000000000000, &i)) return -1; a->lr_decay_steps = i; break;
        case 1017: a->tokenizer = optarg; break;
        case 1018: a->eval_only = true; break;
        case 1019: a->start = optarg; break;
        case 1020: a->start_ids = optarg; break;
        case 1021:
            if (!strcmp(optarg, "none")) a->recompute = AMP_RECOMPUTE_NONE;
            else if (!strcmp(optarg, "selective")) a->recompute = AMP_RECOMPUTE_SELECTIVE;
            else if (!strcmp(optarg, "full")) a->recompute = AMP_RECOMPUTE_FULL;
            else {
                fprintf(stderr, "amp-train: --recompute '%s': want none, selective or full\n",
                        optarg);
                return -1;
            }
            break;
        case 1022:
            if (strcmp(optarg, "0") && strcmp(optarg, "1") && strcmp(optarg, "2")) {
                fprintf(stderr, "amp-train: --zero '%s': want 0, 1 or 2\n", optarg);
                return -1;
            }
            a->zero_stage = atoi(optarg); /* the library says which stages it has */
            break;
        case 1100: a->llama_config = optarg; break;
        case 1101:
            if (parse_int(name, optarg, 1, 1 << 20, &i)) return -1;
            a->llama.hidden_size = i, a->llama_given.hidden_size = true;
            break;
        case 1102:
            if (parse_int(name, optarg, 1, 1 << 22, &i)) return -1;
            a->llama.intermediate_size = i, a->llama_given.intermediate_size = true;
            break;
        case 1103:
            if (parse_int(name, optarg, 1, 1024, &i)) return -1;
            a->llama.num_hidden_layers = i, a->llama_given.num_hidden_layers = true;
            break;
        case 1104:
            if (parse_int(name, optarg, 1, 1024, &i)) return -1;
            a->llama.num_attention_heads = i, a->llama_given.num_attention_heads = true;
            break;
        case 1105:
            if (parse_int(name, optarg, 1, 1024, &i)) return -1;
            a->llama.num_key_value_heads = i, a->llama_given.num_key_value_heads = true;
            break;
        case 1106:
            if (parse_int(name, optarg, 2, 1024, &i)) return -1;
            a->llama.head_dim = i, a->llama_given.head_dim = true;
            break;
        case 1107:
            if (parse_int(name, optarg, 1, 1 << 24, &i)) return -1;
            a->llama.max_position_embeddings = i, a->llama_given.max_position_embeddings = true;
            break;
        case 1108:
            if (parse_number(name, optarg, 1, 1e9, &v)) return -1;
            a->llama.rope_theta = (float)v, a->llama_given.rope_theta = true;
            break;
        case 1109:
            if (parse_number(name, optarg, 0, 1, &v)) return -1;
            a->llama.rms_norm_eps = (float)v, a->llama_given.rms_norm_eps = true;
            break;
        case 1110: a->llama.tie_word_embeddings = a->llama_given.tie_word_embeddings = true; break;
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
        case 'e': if (parse_int(name, optarg, 1, 1000000, &i)) return -1; a->epochs = (int)i; break;
        case 'b': if (parse_int(name, optarg, 1, 1000000, &i)) return -1; a->batch_size = i; break;
        case 'l': if (parse_number(name, optarg, 0, 1e3, &v)) return -1; a->lr = (float)v; break;
        case 'M': if (parse_number(name, optarg, 0, 1, &v)) return -1; a->momentum = (float)v; break;
        case 's': if (parse_seed(name, optarg, &a->seed)) return -1; break;
        case 'x': if (parse_int(name, optarg, 0, 1000000000000, &i)) return -1; a->max_steps = i; break;
        case 't': if (parse_int(name, optarg, 0, 4096, &i)) return -1; a->threads = (int)i; break;
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
    bool gpt = strcmp(a->model, "gpt") == 0, llama = strcmp(a->model, "llama") == 0;
    bool lm = gpt || llama;
    if (strcmp(a->model, "convnet") && strcmp(a->model, "mlp") && !lm) {
        fprintf(stderr, "amp-train: --model '%s': want convnet, mlp, gpt or llama\n", a->model);
        return -1;
    }
    if (!lm && lm_option) {
        fprintf(stderr, "amp-train: --%s is an option of --model gpt and llama, not of --model "
                "%s\n", lm_option, a->model);
        return -1;
    }
    if (a->eval_only && a->eval_batches == 0) {
        fprintf(stderr, "amp-train: --eval-only evaluates: give --eval-batches 1 or more\n");
        return -1;
    }
    if (lm && image_option) {
        fprintf(stderr, "amp-train: --%s is an option of --model convnet and mlp, not of --model "
                "%s (%s)\n", image_option, a->model,
                !strcmp(image_option, "sync-bn") ? "it has no batch norm"
                : !strcmp(image_option, "epochs") ? "it trains --max-steps steps"
                : !strcmp(image_option, "momentum") ? "it trains with AdamW"
                                                    : "--eval-every and --eval-batches set its evaluation");
        return -1;
    }
    if (llama && gpt_option) {
        fprintf(stderr, "amp-train: --%s is an option of --model gpt; --model llama takes its "
                "shape from --config FILE or Hugging Face's field names (--num-hidden-layers, "
                "--num-attention-heads, --hidden-size, ...; dropout: attention_dropout in the "
                "config)\n", gpt_option);
        return -1;
    }
    if (gpt && llama_option) {
        fprintf(stderr, "amp-train: --%s is an option of --model llama, not of --model gpt\n",
                llama_option);
        return -1;
    }
    if (lm && !a->data_dir) {
        fprintf(stderr, "amp-train: --model %s needs --data DIR holding train.bin and val.bin "
                "(amp-text-tokens DIR FILE... makes them; scripts/train.sh --model gpt does it "
                "all on the fortunes corpus)\n", a->model);
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
    if (lm && a->optimizer && strcmp(a->optimizer, "adamw")) {
        fprintf(stderr, "amp-train: --optimizer '%s': --model %s trains with adamw\n",
                a->optimizer, a->model);
        return -1;
    }
    if (lm) {
        /* A resume may take either from the checkpoint; gpt_create checks the pair then. */
        bool both = !a->resume || (a->given.n_embd && a->given.n_head);
        if (gpt && both && a->n_embd % a->n_head) {
            fprintf(stderr, "amp-train: --n-embd %d is not a multiple of --n-head %d\n", a->n_embd,
                    a->n_head);
            return -1;
        }
        if (a->batch_size < 0) a->batch_size = 16;
        if (a->lr < 0) a->lr = 1e-3f;
        if (a->min_lr < 0) a->min_lr = a->lr / 10;
        if (a->min_lr > a->lr) {
            fprintf(stderr, "amp-train: --min-lr %g is above --lr %g\n", (double)a->min_lr, (double)a->lr);
            return -1;
        }
        if (a->log_every == 0) a->log_every = 10;
        a->optimizer = "adamw";
        return 0;
    }
    if (!a->data_dir) a->data_dir = "/usr/share/datasets/fashion-mnist";
    if (!a->optimizer) a->optimizer = "sgd";
    if (a->batch_size < 0) a->batch_size = 128;
    if (strcmp(a->optimizer, "sgd") && strcmp(a->optimizer, "adam")) {
        fprintf(stderr, "amp-train: --optimizer '%s': want sgd or adam\n", a->optimizer);
        return -1;
    }
    if (a->lr < 0) a->lr = strcmp(a->optimizer, "sgd") == 0 ? 0.05f : 0.001f;
    return 0;
}

amp_status train_resume_source(const train_args *a, bool say, char *from, size_t size,
                               bool *resume) {
    *resume = a->resume != NULL;
    from[0] = '\0';
    if (!a->resume) return AMP_OK;
    if (strcmp(a->resume, "latest") != 0) {
        if ((size_t)snprintf(from, size, "%s", a->resume) >= size)
            return amp_error(AMP_ERR_INVALID_ARG, "--resume '%s': the path is too long",
                             a->resume);
        return AMP_OK;
    }
    amp_status s = amp_checkpoint_find_latest(a->checkpoint_dir, from, size, resume);
    if (s == AMP_OK && !*resume && say)
        fprintf(stderr, "amp-train: --resume latest: no checkpoint has completed in %s yet "
                "(none was saved, or the run stopped before its first save); starting from step "
                "0\n", a->checkpoint_dir);
    return s;
}
