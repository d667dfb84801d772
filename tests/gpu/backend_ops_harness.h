/* The machinery of test_backend_ops: typed host buffers ("slots") with a guard zone after each,
 * seeded inputs sprinkled with NaN, Inf and the other values where conversions and IEEE
 * arithmetic have edge cases, and the element-by-element comparison of two backends' results.
 *
 * A slot is one argument of a backend entry: an input (IN), an output (OUT) or both (INOUT).
 * Run k (0 = reference, 1 = backend under test) copies back nbytes + GUARD_NBYTES into back[k].
 * A slot may also hold a list of tensors (the multi-tensor entries): its parts, each one tensor;
 * the padding between them belongs to no tensor and must come back as it went. */
#ifndef AMP_TESTS_GPU_BACKEND_OPS_HARNESS_H
#define AMP_TESTS_GPU_BACKEND_OPS_HARNESS_H

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/half.h"
#include "kernels/math/scaler.h"

/* Bytes after every buffer, written on the device with the buffer: they must come back as they
 * went (a kernel that writes one element past its end fails here, not in someone's heap). */
#define GUARD_NBYTES 64
#define GUARD_BYTE 0xA5
/* Outputs start as these bytes, a different pattern on each run, so an element that a backend
 * leaves unwritten cannot agree with the other run (outputs are overwritten by contract). */
static const unsigned char PREFILL_BYTE[2] = {0x5A, 0xC3};
/* Mismatching elements printed per buffer. */
#define MAX_REPORTED 5
/* One element in this many of a "specials" input is replaced by a special value. */
#define SPECIALS_EVERY 16

/* Element kinds: the float dtypes, i32 (labels, argmax, casts), u8 (dropout masks), i64 (step
 * counts) and the loss scaler's device state, one amp_scaler_dev (kernels/math/scaler.h) per
 * element, compared bit for bit and reported field by field. */
typedef enum ek { EK_F32, EK_F16, EK_BF16, EK_I32, EK_U8, EK_I64, EK_SCALER } ek;

static const char *const ek_names[] = {"f32", "f16", "bf16", "i32", "u8", "i64", "scaler"};

static size_t ek_size(ek k) {
    switch (k) {
    case EK_U8: return 1;
    case EK_F16:
    case EK_BF16: return 2;
    case EK_I64: return 8;
    case EK_SCALER: return sizeof(amp_scaler_dev);
    default: return 4;
    }
}

/* One unit in the last place at 1.0 of a float kind: a bound on a one-ulp difference relative
 * to the value (normal numbers). */
static double ek_ulp(ek k) {
    return k == EK_F16 ? 0x1p-10 : k == EK_BF16 ? 0x1p-7 : 0x1p-23;
}

static bool ek_is_float(ek k) {
    return k == EK_F32 || k == EK_F16 || k == EK_BF16;
}

static ek ek_of(amp_dtype dt) {
    switch (dt) {
    case AMP_F16: return EK_F16;
    case AMP_BF16: return EK_BF16;
    case AMP_I32: return EK_I32;
    default: return EK_F32;
    }
}

/* Element i as a number (EK_SCALER has none: its fields are read by name below). */
static double ek_load(const void *p, ek k, int64_t i) {
    switch (k) {
    case EK_F16: return amp_f16_bits_to_f32(((const uint16_t *)p)[i]);
    case EK_BF16: return amp_bf16_bits_to_f32(((const uint16_t *)p)[i]);
    case EK_I32: return ((const int32_t *)p)[i];
    case EK_U8: return ((const uint8_t *)p)[i];
    case EK_I64: return (double)((const int64_t *)p)[i];
    case EK_SCALER: return NAN;
    default: return ((const float *)p)[i];
    }
}

/* Stores v rounded to the kind (round to nearest even for the floats, truncation for i32). */
static void ek_store(void *p, ek k, int64_t i, double v) {
    switch (k) {
    case EK_F16: ((uint16_t *)p)[i] = amp_f32_to_f16_bits((float)v); break;
    case EK_BF16: ((uint16_t *)p)[i] = amp_f32_to_bf16_bits((float)v); break;
    case EK_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case EK_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case EK_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case EK_SCALER: break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

/* The bits of element i, for messages (not EK_SCALER's). */
static uint64_t ek_bits(const void *p, ek k, int64_t i) {
    size_t es = ek_size(k);
    uint64_t u = 0;
    if (es == 8) memcpy(&u, (const char *)p + (size_t)i * 8, 8);
    else if (es == 4) {
        uint32_t w;
        memcpy(&w, (const char *)p + (size_t)i * 4, 4);
        u = w;
    } else if (es == 2) u = ((const uint16_t *)p)[i];
    else u = ((const uint8_t *)p)[i];
    return u;
}

/* amp_scaler_dev's fields, for messages: a field added to the struct must be added here (the
 * size check below fails until it is). */
typedef struct scaler_field {
    const char *name;
    size_t offset;
    ek kind; /* EK_F32, EK_I32 or EK_I64 */
} scaler_field;

#define SCALER_FIELD(f, k) {#f, offsetof(amp_scaler_dev, f), k}
static const scaler_field scaler_fields[] = {
    SCALER_FIELD(scale, EK_F32),           SCALER_FIELD(used_scale, EK_F32),
    SCALER_FIELD(inv_used_scale, EK_F32),  SCALER_FIELD(half_grad_scale, EK_F32),
    SCALER_FIELD(clip_coef, EK_F32),       SCALER_FIELD(grad_norm, EK_F32),
    SCALER_FIELD(hysteresis_left, EK_I32), SCALER_FIELD(last_skipped, EK_I32),
    SCALER_FIELD(overflow_scale, EK_F32),  SCALER_FIELD(overflow_hysteresis, EK_I32),
    SCALER_FIELD(growth_tracker, EK_I64),  SCALER_FIELD(total_steps, EK_I64),
    SCALER_FIELD(skipped_steps, EK_I64),   SCALER_FIELD(overflows, EK_I64),
    SCALER_FIELD(taken_steps, EK_I64),
};
static_assert(sizeof(amp_scaler_dev) == 7 * 4 + 3 * 4 + 5 * 8,
              "amp_scaler_dev changed: update scaler_fields");

/* ---- Seeded generator (splitmix64) ---------------------------------------------------------- */

static uint64_t rng_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { /* [0, 1) */
    return (double)(rng_u64(s) >> 11) * 0x1p-53;
}

static int64_t rng_below(uint64_t *s, int64_t n) {
    return (int64_t)(rng_u64(s) % (uint64_t)n);
}

/* ---- Slots ---------------------------------------------------------------------------------- */

typedef enum role { ROLE_NONE, ROLE_IN, ROLE_OUT, ROLE_INOUT } role;

#define MAX_SLOTS 11 /* attn_bwd: its 11 arrays */

typedef struct slot {
    const char *name;
    role role;
    ek kind;
    int64_t n;
    size_t nbytes;
    unsigned char *init;    /* IN and INOUT: the values every run starts from */
    unsigned char *back[2]; /* nbytes + GUARD_NBYTES as each run left them */
    /* A list of tensors (n_parts > 0): tensor t is elements [part_off[t], part_off[t] +
     * part_len[t]), in increasing order; the elements outside every part are padding, compared
     * with what they were (init, or the run's prefill), never between the runs. */
    int n_parts;
    const int64_t *part_off, *part_len;
} slot;

/* One row's arguments: slot i is argument i of the entry (ROLE_NONE: passed as NULL). */
typedef struct tcase {
    slot s[MAX_SLOTS];
    uint64_t rng;
    void *owned; /* memory the setup keeps for the case (the parts' arrays); freed with it */
} tcase;

static void *xcalloc(size_t nbytes) {
    void *p = calloc(nbytes ? nbytes : 1, 1);
    if (!p) {
        fprintf(stderr, "test_backend_ops: out of host memory (%zu bytes)\n", nbytes);
        exit(1);
    }
    return p;
}

/* Declares slot i; returns its initial values (zeroed) for IN and INOUT, else NULL. */
static void *slot_decl(tcase *c, int i, const char *name, role r, ek k, int64_t n) {
    slot *s = &c->s[i];
    s->name = name;
    s->role = r;
    s->kind = k;
    s->n = n;
    s->nbytes = (size_t)n * ek_size(k);
    if (r == ROLE_IN || r == ROLE_INOUT) s->init = xcalloc(s->nbytes);
    return s->init;
}

static void tcase_free(tcase *c) {
    for (int i = 0; i < MAX_SLOTS; i++) {
        free(c->s[i].init);
        free(c->s[i].back[0]);
        free(c->s[i].back[1]);
    }
    free(c->owned);
}

/* Slot i's initial values uniform in [lo, hi), rounded to the slot's kind. */
static void gen_uniform(tcase *c, int i, double lo, double hi) {
    slot *s = &c->s[i];
    for (int64_t j = 0; j < s->n; j++)
        ek_store(s->init, s->kind, j, lo + (hi - lo) * rng_unit(&c->rng));
}

/* f32 bit patterns: quiet and signalling NaNs with either sign and a payload; infinities; signed
 * zeros; the largest f16 (65504), just below and at the f16 overflow threshold 65520; the smallest
 * f16 subnormal 2^-24, the tie 2^-25 (rounds to 0) and 1.5 * 2^-25 (rounds up); the smallest f32
 * subnormal and a larger one; +-FLT_MAX; the bf16 ties 1 + 2^-8 (to even: down) and 1 + 3 * 2^-8
 * (up), the f16 ties 1 + 2^-11 and 1 + 3 * 2^-11; +-2^31 and 2^24 + 2 (i32 saturation and
 * exactness); -0.5 (truncates to 0). */
static const uint32_t specials_f32[] = {
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffa5a5a5u, 0x7f800000u, 0xff800000u, 0x00000000u,
    0x80000000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u, 0x33800000u, 0x33000000u,
    0x33400000u, 0x00000001u, 0x00400000u, 0x7f7fffffu, 0xff7fffffu, 0x3f808000u, 0x3f818000u,
    0x3f801000u, 0x3f803000u, 0x4f000000u, 0xcf000000u, 0x4b800001u, 0xbf000000u,
};
/* Half bit patterns no f32 value rounds to: NaN payloads (kept when a half is widened),
 * signalling NaNs, the largest finite and smallest subnormal values, the infinities. */
static const uint16_t specials_f16[] = {0x7c01, 0xfe00, 0x7e55, 0x7bff, 0xfbff,
                                        0x0001, 0x8001, 0x03ff, 0x7c00, 0xfc00};
static const uint16_t specials_bf16[] = {0x7f81, 0xffc1, 0x7fa5, 0x7f7f, 0xff7f,
                                         0x0001, 0x8001, 0x007f, 0x7f80, 0xff80};
static const int32_t specials_i32[] = {INT32_MIN, INT32_MAX, 16777217, -16777217, 16777219, 0, -1};

#define N_OF(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

/* Replaces about one element in SPECIALS_EVERY of slot i by a special value of its kind; the
 * first elements get one of each f32 special in turn, so every special appears at least once. */
static void gen_specials(tcase *c, int i) {
    slot *s = &c->s[i];
    int64_t next = 0;
    for (int64_t j = 0; j < s->n; j++) {
        if (j >= N_OF(specials_f32) && rng_below(&c->rng, SPECIALS_EVERY) != 0) continue;
        int64_t pick = j < N_OF(specials_f32) ? next++ : rng_below(&c->rng, N_OF(specials_f32));
        uint32_t bits = specials_f32[pick];
        float f;
        memcpy(&f, &bits, sizeof f);
        bool raw_half = j >= N_OF(specials_f32) && rng_below(&c->rng, 3) == 0;
        switch (s->kind) {
        case EK_F32: memcpy(s->init + (size_t)j * 4, &bits, 4); break;
        case EK_F16: {
            uint16_t raw = specials_f16[rng_below(&c->rng, N_OF(specials_f16))];
            ((uint16_t *)s->init)[j] = raw_half ? raw : amp_f32_to_f16_bits(f);
            break;
        }
        case EK_BF16: {
            uint16_t raw = specials_bf16[rng_below(&c->rng, N_OF(specials_bf16))];
            ((uint16_t *)s->init)[j] = raw_half ? raw : amp_f32_to_bf16_bits(f);
            break;
        }
        case EK_I32:
            ((int32_t *)s->init)[j] = specials_i32[rng_below(&c->rng, N_OF(specials_i32))];
            break;
        case EK_U8:
        case EK_I64:
        case EK_SCALER: break;
        }
    }
}

/* ---- Comparison ----------------------------------------------------------------------------- */

/* exact: the bits must agree. Otherwise NaN must meet NaN (its sign and payload are free: x86
 * makes negative NaNs, CUDA positive ones), an infinity the same infinity, and finite values
 * |dev - ref| <= atol + max(rtol, ulps * ulp) * |ref|, ulp that of the output's kind (ek_ulp):
 * `ulps` lets one row allow the same few units in the last place to its f32 outputs and to the
 * f16/bf16 values rounded from them. Integer outputs are always compared exactly. */
typedef struct tol {
    bool exact;
    double atol, rtol;
    double ulps;
} tol;

typedef struct cmp_stats {
    double max_abs, max_rel;
} cmp_stats;

static bool guard_intact(const unsigned char *p, size_t nbytes) {
    for (size_t i = 0; i < GUARD_NBYTES; i++)
        if (p[nbytes + i] != GUARD_BYTE) return false;
    return true;
}

static void print_element(const char *label, const void *p, ek k, int64_t i) {
    printf("%s %.9g (0x%0*" PRIx64 ")", label, ek_load(p, k, i), (int)ek_size(k) * 2,
           ek_bits(p, k, i));
}

/* The fields in which element i of two scaler slots differ, each with both values. */
static void print_scaler_diff(const char *dev_name, const unsigned char *dev,
                              const unsigned char *ref, int64_t i) {
    const char *sep = "";
    for (size_t f = 0; f < sizeof scaler_fields / sizeof scaler_fields[0]; f++) {
        const scaler_field *sf = &scaler_fields[f];
        size_t at = (size_t)i * sizeof(amp_scaler_dev) + sf->offset, es = ek_size(sf->kind);
        if (memcmp(dev + at, ref + at, es) == 0) continue;
        printf("%s%s: ", sep, sf->name);
        print_element(dev_name, dev + at, sf->kind, 0);
        print_element(", reference", ref + at, sf->kind, 0);
        sep = "; ";
    }
}

/* Whether element i agrees between the runs under t; finite float differences go into st. */
static bool element_ok(const slot *s, int64_t i, tol t, cmp_stats *st) {
    const unsigned char *ref = s->back[0], *dev = s->back[1];
    size_t es = ek_size(s->kind);
    if (t.exact || !ek_is_float(s->kind))
        return memcmp(ref + (size_t)i * es, dev + (size_t)i * es, es) == 0;
    double a = ek_load(ref, s->kind, i), b = ek_load(dev, s->kind, i);
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    double d = fabs(b - a), rtol = fmax(t.rtol, t.ulps * ek_ulp(s->kind));
    if (d > st->max_abs) st->max_abs = d;
    if (a != 0.0 && d / fabs(a) > st->max_rel) st->max_rel = d / fabs(a);
    return d <= t.atol + rtol * fabs(a);
}

/* Compares back[1] with back[0] over the slot's elements (a list's: its tensors' only); prints
 * the first mismatches and returns how many elements differ. */
static int64_t compare_slot(const char *row, const char *dev_name, const slot *s, tol t,
                            cmp_stats *st) {
    int64_t bad = 0, total = 0;
    int n_parts = s->n_parts > 0 ? s->n_parts : 1;
    for (int p = 0; p < n_parts; p++) {
        int64_t off = s->n_parts > 0 ? s->part_off[p] : 0;
        int64_t len = s->n_parts > 0 ? s->part_len[p] : s->n;
        total += len;
        for (int64_t j = 0; j < len; j++) {
            if (element_ok(s, off + j, t, st) || bad++ >= MAX_REPORTED) continue;
            printf("       %s: %s %s", row, s->name, ek_names[s->kind]);
            if (s->n_parts > 0) printf(" tensor %d", p);
            printf("[%" PRId64 "]: ", j);
            if (s->kind == EK_SCALER) {
                print_scaler_diff(dev_name, s->back[1], s->back[0], off + j);
            } else {
                print_element(dev_name, s->back[1], s->kind, off + j);
                print_element(", reference", s->back[0], s->kind, off + j);
            }
            printf("\n");
        }
    }
    if (bad > MAX_REPORTED)
        printf("       %s: %s: %" PRId64 " of %" PRId64 " elements differ\n", row, s->name, bad,
               total);
    return bad;
}

/* A list slot's padding as run k left it: each byte as it went (the initial values, or the
 * run's prefill for an output). Returns the first element index that changed, or -1. */
static int64_t padding_changed(const slot *s, int k) {
    size_t es = ek_size(s->kind), from = 0;
    for (int p = 0; p <= s->n_parts; p++) {
        size_t to = p < s->n_parts ? (size_t)s->part_off[p] * es : s->nbytes;
        for (size_t b = from; b < to; b++) {
            unsigned char want = s->init ? s->init[b] : PREFILL_BYTE[k];
            if (s->back[k][b] != want) return (int64_t)(b / es);
        }
        if (p < s->n_parts) from = (size_t)(s->part_off[p] + s->part_len[p]) * es;
    }
    return -1;
}

/* ---- Running an entry on a backend and checking both runs ---------------------------------- */

struct op_row;
/* Calls one backend entry; p[i] is slot i's device pointer (NULL for ROLE_NONE). */
typedef amp_status (*entry_run_fn)(const struct op_row *r, const amp_backend *be, void *const *p);

/* Run k on `be`: every slot to the device with its guard zone (outputs prefilled with
 * PREFILL_BYTE[k]), the entry, every slot back into back[k]. Prints why on failure. */
static bool tcase_execute(tcase *c, const struct op_row *r, const char *row, const char *member,
                          entry_run_fn run, const amp_backend *be, int k) {
    void *dev[MAX_SLOTS] = {0};
    amp_status st = AMP_OK;
    const char *what = "";
    for (int i = 0; i < MAX_SLOTS && st == AMP_OK; i++) {
        slot *s = &c->s[i];
        if (s->role == ROLE_NONE) continue;
        size_t total = s->nbytes + GUARD_NBYTES;
        unsigned char *stage = s->back[k] = xcalloc(total);
        if (s->init) memcpy(stage, s->init, s->nbytes);
        else memset(stage, PREFILL_BYTE[k], s->nbytes);
        memset(stage + s->nbytes, GUARD_BYTE, GUARD_NBYTES);
        what = "alloc";
        st = be->alloc(be->dev, total, &dev[i]);
        if (st != AMP_OK) break;
        what = "copy_from_host";
        st = be->copy_from_host(be->dev, dev[i], stage, total);
    }
    if (st == AMP_OK) {
        what = member;
        st = run(r, be, dev);
    }
    if (st == AMP_OK) {
        what = "sync";
        st = be->sync(be->dev);
    }
    for (int i = 0; i < MAX_SLOTS && st == AMP_OK; i++) {
        slot *s = &c->s[i];
        if (s->role == ROLE_NONE) continue;
        what = "copy_to_host";
        st = be->copy_to_host(be->dev, s->back[k], dev[i], s->nbytes + GUARD_NBYTES);
    }
    if (st != AMP_OK)
        printf("       %s: %s: %s returned %d: %s\n", row, be->name, what, (int)st,
               amp_last_error());
    for (int i = 0; i < MAX_SLOTS; i++)
        if (dev[i]) be->free(be->dev, dev[i]);
    return st == AMP_OK;
}

/* After both runs: guard zones intact and inputs unchanged on both backends, outputs of be[1]
 * within `t` of be[0]'s. Prints one line per problem; returns whether there was none. */
static bool tcase_check(const tcase *c, const char *row, tol t, const amp_backend *const be[2],
                        cmp_stats *st) {
    bool ok = true;
    for (int i = 0; i < MAX_SLOTS; i++) {
        const slot *s = &c->s[i];
        if (s->role == ROLE_NONE) continue;
        for (int k = 0; k < 2; k++) {
            if (!guard_intact(s->back[k], s->nbytes)) {
                printf("       %s: guard zone after %s overwritten on %s\n", row, s->name,
                       be[k]->name);
                ok = false;
            }
            if (s->role == ROLE_IN && memcmp(s->back[k], s->init, s->nbytes) != 0) {
                printf("       %s: input %s changed by %s\n", row, s->name, be[k]->name);
                ok = false;
            }
            int64_t pad = s->n_parts > 0 ? padding_changed(s, k) : -1;
            if (pad >= 0) {
                printf("       %s: %s: padding element %" PRId64 " between tensors written by "
                       "%s\n", row, s->name, pad, be[k]->name);
                ok = false;
            }
        }
        if (s->role != ROLE_IN && compare_slot(row, be[1]->name, s, t, st) != 0) ok = false;
    }
    return ok;
}

#endif
