/* The multi-tensor planner (core/multi_tensor.c), without a GPU: no memory is touched, so the
 * addresses are fake and a tensor may have 2^31 elements and more.
 *
 * Two independent checks run on every plan:
 *   - a brute-force coverage checker: every element of every tensor is covered exactly once
 *     across all launches, in list order and chunk order, no launch is over its limits, and each
 *     slot's addresses, numel and list index are the input's (per element with a counter array
 *     for small lists, by intervals for huge tensors);
 *   - a replay of Apex's host loop (multi_tensor_apply.cuh) written here in its own shape: a flat
 *     walk over (tensor, chunk) that records where Apex issues its kernel; the planner's launches
 *     must be the same cuts: same slots, same (slot, chunk) blocks.
 * Cases: empty list, all-empty tensors, one tensor of exactly one chunk, a tensor larger than a
 * chunk (several blocks and launches), more tensors than a launch holds at every depth 1..5,
 * more blocks than a launch holds, mixed dtypes per list, a tensor of 2^31 + 12345 elements, a
 * random sweep, and the argument checks. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/multi_tensor.h"
#include "test_util.h"

/* Fake, distinct, aligned address of tensor i in list d. */
static void *fake_ptr(int64_t i, int d) {
    return (void *)(uintptr_t)(((uint64_t)(d + 1) << 40) + ((uint64_t)i << 20) + 256u);
}

static amp_mt_tensor *make_list(int64_t n, const int64_t *numels) {
    amp_mt_tensor *t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
    for (int64_t i = 0; i < n; i++) {
        t[i].numel = numels[i];
        for (int d = 0; d < AMP_MT_MAX_DEPTH; d++) t[i].ptr[d] = fake_ptr(i, d);
    }
    return t;
}

/* ---- Apex's cuts, replayed. ---------------------------------------------------------------- */

typedef struct ref_launch {
    int n_tensors, n_blocks;
    int64_t tensor[AMP_MT_MAX_TENSORS];
    int slot[AMP_MT_MAX_BLOCKS];
    int64_t chunk[AMP_MT_MAX_BLOCKS];
} ref_launch;

/* Walks every (tensor, chunk) of the non-empty tensors; issues a launch where Apex does. */
static ref_launch *ref_plan(const amp_mt_tensor *ts, int64_t n, amp_mt_limits lim,
                            int64_t *n_launches) {
    int64_t cap = 16, nl = 0;
    ref_launch *out = malloc((size_t)cap * sizeof *out);
    ref_launch cur = {0};
    int64_t last = -1;
    for (int64_t i = 0; i < n; i++)
        if (ts[i].numel > 0) last = i;
    for (int64_t i = 0; i <= last; i++) {
        if (ts[i].numel == 0) continue;
        cur.tensor[cur.n_tensors++] = i;
        int64_t nc = (ts[i].numel + lim.chunk_numel - 1) / lim.chunk_numel;
        for (int64_t c = 0; c < nc; c++) {
            cur.slot[cur.n_blocks] = cur.n_tensors - 1;
            cur.chunk[cur.n_blocks] = c;
            cur.n_blocks++;
            int issue = (cur.n_tensors == lim.max_tensors && c == nc - 1) ||
                        cur.n_blocks == lim.max_blocks || (i == last && c == nc - 1);
            if (!issue) continue;
            if (nl == cap) out = realloc(out, (size_t)(cap *= 2) * sizeof *out);
            out[nl++] = cur;
            cur.n_blocks = 0;
            if (c == nc - 1) {
                cur.n_tensors = 0;
            } else { /* Apex copies the cut tensor into slot 0 */
                cur.tensor[0] = i;
                cur.n_tensors = 1;
            }
        }
    }
    *n_launches = nl;
    return out;
}

/* ---- The checker. ------------------------------------------------------------------------- */

typedef struct plan_stats {
    int64_t n_launches, n_blocks, carried; /* carried: launches whose slot 0 continues a tensor */
    int ok;
} plan_stats;

/* Runs the planner over the list and checks everything above. Per-element counting when the
 * list has at most `count_limit` elements in all. */
static plan_stats check_plan(int depth, const amp_dtype *dts, const amp_mt_tensor *ts, int64_t n,
                             amp_mt_limits lim) {
    plan_stats st = {0, 0, 0, 1};
    const int64_t count_limit = (int64_t)1 << 24;
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += ts[i].numel;
    uint8_t *count = total <= count_limit ? calloc((size_t)total + 1, 1) : NULL;
    int64_t *base = calloc((size_t)n + 1, sizeof *base); /* first element of tensor i in count */
    for (int64_t i = 1; i <= n; i++) base[i] = base[i - 1] + ts[i - 1].numel;
    int64_t *cursor = calloc((size_t)n + 1, sizeof *cursor); /* next element expected */
    int64_t cur_tensor = -1; /* tensor whose elements come now; earlier ones must be done */
    int64_t n_ref = 0;
    ref_launch *ref = ref_plan(ts, n, lim, &n_ref);

    amp_mt_planner pl;
    CHECK_OK(amp_mt_planner_init(&pl, depth, dts, ts, n, lim));
    amp_mt_launch *l = malloc(sizeof *l);
    while (amp_mt_planner_next(&pl, l)) {
        int bad = 0;
        bad |= l->n_blocks < 1 || l->n_blocks > lim.max_blocks;
        bad |= l->n_tensors < 1 || l->n_tensors > lim.max_tensors;
        bad |= l->n_tensors * depth > AMP_MT_MAX_ADDRS;
        bad |= l->depth != depth || l->chunk_numel != lim.chunk_numel;
        bad |= l->first_block != st.n_blocks;
        for (int d = 0; d < depth; d++)
            bad |= l->dtype[d] != dts[d] || l->elem_size[d] != amp_dtype_size(dts[d]);
        for (int s = 0; s < l->n_tensors && !bad; s++) {
            int64_t i = l->tensor_index[s];
            bad |= i < 0 || i >= n || l->numel[s] != ts[i].numel;
            bad |= s > 0 && i <= l->tensor_index[s - 1]; /* slots in list order */
            for (int d = 0; d < depth && !bad; d++) bad |= l->addr[s * depth + d] != ts[i].ptr[d];
        }
        int64_t *slot_blocks = calloc(AMP_MT_MAX_TENSORS, sizeof *slot_blocks);
        if (!bad && cursor[l->tensor_index[0]] > 0) st.carried++;
        for (int b = 0; b < l->n_blocks && !bad; b++) {
            int s = amp_mt_block_slot(l, b);
            bad |= s < 0 || s >= l->n_tensors;
            if (bad) break;
            slot_blocks[s]++;
            int64_t i = l->tensor_index[s];
            int64_t off = amp_mt_block_offset(l, b), cnt = amp_mt_block_numel(l, b);
            /* in order: the block starts where the tensor's previous one ended, and every
             * tensor before this one is complete */
            bad |= off != cursor[i] || cnt < 1 || off + cnt > ts[i].numel;
            bad |= cnt != lim.chunk_numel && off + cnt != ts[i].numel;
            if (i != cur_tensor) {
                bad |= cur_tensor >= 0 &&
                       (i < cur_tensor || cursor[cur_tensor] != ts[cur_tensor].numel);
                for (int64_t k = cur_tensor + 1; k < i; k++) bad |= ts[k].numel != 0;
                cur_tensor = i;
            }
            for (int d = 0; d < depth; d++) {
                char *want = (char *)ts[i].ptr[d] + off * (int64_t)amp_dtype_size(dts[d]);
                bad |= (char *)amp_mt_block_ptr(l, b, d) != want;
            }
            cursor[i] = off + cnt;
            if (count)
                for (int64_t e = 0; e < cnt; e++) count[base[i] + off + e]++;
        }
        for (int s = 0; s < l->n_tensors; s++) bad |= slot_blocks[s] == 0; /* no idle slot */
        free(slot_blocks);
        /* Apex's cuts */
        if (!bad && st.n_launches < n_ref) {
            const ref_launch *r = &ref[st.n_launches];
            bad |= r->n_tensors != l->n_tensors || r->n_blocks != l->n_blocks;
            for (int s = 0; s < l->n_tensors && !bad; s++)
                bad |= r->tensor[s] != l->tensor_index[s];
            for (int b = 0; b < l->n_blocks && !bad; b++)
                bad |= r->slot[b] != amp_mt_block_slot(l, b) ||
                       r->chunk[b] != amp_mt_block_chunk(l, b);
        } else {
            bad = 1;
        }
        CHECK_MSG(!bad, "launch %lld is wrong", (long long)st.n_launches);
        if (bad) {
            st.ok = 0;
            break;
        }
        st.n_launches++;
        st.n_blocks += l->n_blocks;
    }
    if (st.ok) {
        CHECK_MSG(st.n_launches == n_ref, "%lld launches, Apex makes %lld",
                  (long long)st.n_launches, (long long)n_ref);
        int64_t want_blocks = 0;
        for (int64_t i = 0; i < n; i++) {
            CHECK_MSG(cursor[i] == ts[i].numel, "tensor %lld covered up to %lld of %lld",
                      (long long)i, (long long)cursor[i], (long long)ts[i].numel);
            want_blocks += amp_mt_n_chunks(ts[i].numel, lim.chunk_numel);
        }
        CHECK(st.n_blocks == want_blocks);
        int64_t wrong = 0;
        for (int64_t e = 0; count && e < total; e++) wrong += count[e] != 1;
        CHECK_MSG(wrong == 0, "%lld elements not covered exactly once", (long long)wrong);
    }
    CHECK(!amp_mt_planner_next(&pl, l)); /* stays finished */
    free(l);
    free(ref);
    free(cursor);
    free(base);
    free(count);
    return st;
}

static const amp_dtype k_f32[AMP_MT_MAX_DEPTH] = {AMP_F32, AMP_F32, AMP_F32, AMP_F32, AMP_F32};

/* ---- Cases. ------------------------------------------------------------------------------- */

static void test_layout(void) {
    size_t sz = sizeof(amp_mt_launch);
    printf("sizeof(amp_mt_launch) = %zu bytes (limit %d, %d left for op arguments)\n", sz,
           AMP_MT_KERNEL_ARG_LIMIT, AMP_MT_KERNEL_ARG_LIMIT - (int)sz);
    CHECK(sz + AMP_MT_OP_ARG_BYTES <= AMP_MT_KERNEL_ARG_LIMIT);
    if (sizeof(void *) == 8) { /* the offsets the header documents */
        CHECK(offsetof(amp_mt_launch, numel) == 1200);
        CHECK(offsetof(amp_mt_launch, chunk_numel) == 2080);
        CHECK(offsetof(amp_mt_launch, first_block) == 2088);
        CHECK(offsetof(amp_mt_launch, tensor_index) == 2096);
        CHECK(offsetof(amp_mt_launch, block) == 2536);
        CHECK(offsetof(amp_mt_launch, n_tensors) == 3816);
        CHECK(offsetof(amp_mt_launch, depth) == 3824);
        CHECK(sz == 3840);
    }
    for (int depth = 1; depth <= AMP_MT_MAX_DEPTH; depth++) {
        amp_mt_limits lim = amp_mt_limits_apex(depth);
        CHECK(lim.chunk_numel == 65536 && lim.max_blocks == 320);
        CHECK(lim.max_tensors * depth <= AMP_MT_MAX_ADDRS);
        printf("depth %d: %d slots, %d address bytes used\n", depth, lim.max_tensors,
               lim.max_tensors * depth * (int)sizeof(void *));
    }
    static const int apex[] = {110, 64, 48, 36, 30};
    for (int d = 1; d <= 5; d++) CHECK(amp_mt_limits_apex(d).max_tensors == apex[d - 1]);
}

static void test_empty(void) {
    amp_mt_planner pl;
    amp_mt_launch l;
    CHECK_OK(amp_mt_planner_init(&pl, 4, k_f32, NULL, 0, amp_mt_limits_apex(4)));
    CHECK(!amp_mt_planner_next(&pl, &l));

    int64_t numels[7] = {0, 0, 0, 0, 0, 0, 0};
    amp_mt_tensor *ts = make_list(7, numels);
    for (int i = 0; i < 7; i++) ts[i].ptr[0] = NULL; /* empty tensors need no address */
    CHECK_OK(amp_mt_planner_init(&pl, 2, k_f32, ts, 7, amp_mt_limits_apex(2)));
    CHECK(!amp_mt_planner_next(&pl, &l));
    plan_stats st = check_plan(2, k_f32, ts, 7, amp_mt_limits_apex(2));
    CHECK(st.ok && st.n_launches == 0);
    free(ts);
}

static void test_one_chunk(void) {
    int64_t numels[1] = {AMP_MT_CHUNK_NUMEL};
    amp_mt_tensor *ts = make_list(1, numels);
    amp_mt_planner pl;
    amp_mt_launch l;
    CHECK_OK(amp_mt_planner_init(&pl, 4, k_f32, ts, 1, amp_mt_limits_apex(4)));
    CHECK(amp_mt_planner_next(&pl, &l));
    CHECK(l.n_tensors == 1 && l.n_blocks == 1 && l.first_block == 0);
    CHECK(amp_mt_block_slot(&l, 0) == 0 && amp_mt_block_chunk(&l, 0) == 0);
    CHECK(amp_mt_block_numel(&l, 0) == AMP_MT_CHUNK_NUMEL);
    CHECK(!amp_mt_planner_next(&pl, &l));
    plan_stats st = check_plan(4, k_f32, ts, 1, amp_mt_limits_apex(4));
    CHECK(st.ok && st.n_launches == 1 && st.n_blocks == 1);
    /* one element more: a second block of one element */
    ts[0].numel = AMP_MT_CHUNK_NUMEL + 1;
    st = check_plan(4, k_f32, ts, 1, amp_mt_limits_apex(4));
    CHECK(st.ok && st.n_launches == 1 && st.n_blocks == 2);
    free(ts);
}

/* Empty tensors around one of 700 chunks and a bit, 320 blocks a launch: three launches, the
 * tensor carried twice; then a small tensor that joins the last launch. */
static void test_spanning(void) {
    amp_mt_limits lim = {4, 48, 320};
    int64_t numels[5] = {0, 4 * 700 + 3, 0, 5, 0};
    amp_mt_tensor *ts = make_list(5, numels);
    plan_stats st = check_plan(3, k_f32, ts, 5, lim);
    CHECK(st.ok && st.n_launches == 3 && st.n_blocks == 701 + 2 && st.carried == 2);
    amp_mt_planner pl;
    amp_mt_launch l;
    CHECK_OK(amp_mt_planner_init(&pl, 3, k_f32, ts, 5, lim));
    CHECK(amp_mt_planner_next(&pl, &l) && l.n_blocks == 320 && l.tensor_index[0] == 1);
    CHECK(amp_mt_planner_next(&pl, &l) && l.n_blocks == 320 && amp_mt_block_chunk(&l, 0) == 320);
    CHECK(amp_mt_planner_next(&pl, &l) && l.n_tensors == 2 && l.n_blocks == 61 + 2);
    CHECK(l.tensor_index[1] == 3 && amp_mt_block_numel(&l, 60) == 3);
    CHECK(l.first_block == 640);
    free(ts);
}

/* 2 * max_tensors + 7 one-chunk tensors at Apex's limits: full tables, then the rest. */
static void test_many_tensors_every_depth(void) {
    for (int depth = 1; depth <= AMP_MT_MAX_DEPTH; depth++) {
        amp_mt_limits lim = amp_mt_limits_apex(depth);
        int64_t n = 2 * lim.max_tensors + 7;
        int64_t *numels = malloc((size_t)n * sizeof *numels);
        for (int64_t i = 0; i < n; i++) numels[i] = 100 + i;
        amp_mt_tensor *ts = make_list(n, numels);
        plan_stats st = check_plan(depth, k_f32, ts, n, lim);
        CHECK_MSG(st.ok && st.n_launches == 3 && st.carried == 0, "depth %d: %lld launches",
                  depth, (long long)st.n_launches);
        /* the same with a multi-chunk tensor at the table's last slot: it keeps the launch open
         * until it is done (Apex flushes a full table only at its tensor's last chunk) */
        numels[lim.max_tensors - 1] = 3 * AMP_MT_CHUNK_NUMEL;
        free(ts);
        ts = make_list(n, numels);
        amp_mt_planner pl;
        amp_mt_launch l;
        CHECK_OK(amp_mt_planner_init(&pl, depth, k_f32, ts, n, lim));
        CHECK(amp_mt_planner_next(&pl, &l));
        CHECK(l.n_tensors == lim.max_tensors && l.n_blocks == lim.max_tensors + 2);
        st = check_plan(depth, k_f32, ts, n, lim);
        CHECK(st.ok && st.n_launches == 3);
        free(ts);
        free(numels);
    }
}

/* 40 tensors of 30 chunks each: 1200 blocks, cut at 320; the cuts at 320 and 640 fall inside a
 * tensor (carried), the one at 960 at a tensor's end. */
static void test_many_blocks(void) {
    amp_mt_limits lim = {16, 36, 320};
    int64_t numels[40];
    for (int i = 0; i < 40; i++) numels[i] = 16 * 30 - (i % 3);
    amp_mt_tensor *ts = make_list(40, numels);
    plan_stats st = check_plan(4, k_f32, ts, 40, lim);
    CHECK(st.ok && st.n_launches == 4 && st.n_blocks == 1200 && st.carried == 2);
    free(ts);
}

/* Grad f16, param f32, state bf16 and i32: each list advances by its own element size. */
static void test_mixed_dtypes(void) {
    const amp_dtype dts[4] = {AMP_F16, AMP_F32, AMP_BF16, AMP_I32};
    amp_mt_limits lim = {1000, 36, 7};
    int64_t numels[6] = {2500, 1, 0, 999, 1000, 4321};
    amp_mt_tensor *ts = make_list(6, numels);
    plan_stats st = check_plan(4, dts, ts, 6, lim);
    CHECK(st.ok && st.n_blocks == 3 + 1 + 1 + 1 + 5);
    amp_mt_planner pl;
    amp_mt_launch l;
    CHECK_OK(amp_mt_planner_init(&pl, 4, dts, ts, 6, lim));
    CHECK(amp_mt_planner_next(&pl, &l));
    CHECK((char *)amp_mt_block_ptr(&l, 2, 0) == (char *)ts[0].ptr[0] + 2 * 1000 * 2);
    CHECK((char *)amp_mt_block_ptr(&l, 2, 1) == (char *)ts[0].ptr[1] + 2 * 1000 * 4);
    CHECK((char *)amp_mt_block_ptr(&l, 2, 2) == (char *)ts[0].ptr[2] + 2 * 1000 * 2);
    CHECK(l.dtype[0] == AMP_F16 && l.dtype[1] == AMP_F32 && l.elem_size[3] == 4);
    free(ts);
}

/* 2^31 + 12345 elements at Apex's chunk: 32769 blocks in 103 launches, offsets past 2^31 and
 * f32 byte offsets past 2^33. Planning only. */
static void test_huge_tensor(void) {
    const int64_t big = ((int64_t)1 << 31) + 12345;
    int64_t numels[3] = {7, big, 70000};
    amp_mt_tensor *ts = make_list(3, numels);
    amp_mt_limits lim = amp_mt_limits_apex(4);
    plan_stats st = check_plan(4, k_f32, ts, 3, lim);
    int64_t chunks = 1 + 32769 + 2;
    CHECK(st.ok && st.n_blocks == chunks && st.n_launches == (chunks + 319) / 320);
    amp_mt_planner pl;
    amp_mt_launch l;
    CHECK_OK(amp_mt_planner_init(&pl, 4, k_f32, ts, 3, lim));
    int64_t last_off = -1, last_cnt = 0;
    char *last_ptr = NULL;
    while (amp_mt_planner_next(&pl, &l))
        for (int b = 0; b < l.n_blocks; b++)
            if (l.tensor_index[amp_mt_block_slot(&l, b)] == 1) {
                last_off = amp_mt_block_offset(&l, b);
                last_cnt = amp_mt_block_numel(&l, b);
                last_ptr = amp_mt_block_ptr(&l, b, 1);
            }
    CHECK(last_off == ((int64_t)1 << 31) && last_cnt == 12345);
    CHECK(last_ptr == (char *)ts[1].ptr[1] + ((int64_t)1 << 33));
    free(ts);
}

/* Random lists, depths and limits, each plan through both checkers. */
static void test_random(void) {
    uint64_t s = 0x9e3779b97f4a7c15u;
    int all_ok = 1;
    for (int iter = 0; iter < 300; iter++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        int depth = 1 + (int)((s >> 33) % 5);
        amp_mt_limits lim = amp_mt_limits_apex(depth);
        lim.chunk_numel = 1 + (int64_t)((s >> 20) % 9);
        lim.max_tensors = 1 + (int)((s >> 40) % (uint64_t)lim.max_tensors);
        lim.max_blocks = 1 + (int)((s >> 50) % 40);
        int64_t n = (int64_t)((s >> 8) % 200);
        int64_t *numels = malloc((size_t)(n + 1) * sizeof *numels);
        for (int64_t i = 0; i < n; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            numels[i] = (s >> 60) < 3 ? 0 : (int64_t)((s >> 30) % 60);
        }
        amp_mt_tensor *ts = make_list(n, numels);
        all_ok &= check_plan(depth, k_f32, ts, n, lim).ok;
        free(ts);
        free(numels);
    }
    CHECK(all_ok);
}

static void test_errors(void) {
    int64_t numels[2] = {10, 20};
    amp_mt_tensor *ts = make_list(2, numels);
    amp_mt_planner pl;
    amp_mt_launch l;
    amp_mt_limits lim = amp_mt_limits_apex(4);
    CHECK_FAILS(amp_mt_planner_init(&pl, 0, k_f32, ts, 2, lim), AMP_ERR_INVALID_ARG, "depth");
    CHECK(!amp_mt_planner_next(&pl, &l)); /* a failed init yields nothing */
    CHECK_FAILS(amp_mt_planner_init(&pl, 6, k_f32, ts, 2, lim), AMP_ERR_INVALID_ARG, "depth");
    amp_mt_limits bad = lim;
    bad.max_tensors = 38; /* 38 * 4 addresses > 150 */
    CHECK_FAILS(amp_mt_planner_init(&pl, 4, k_f32, ts, 2, bad), AMP_ERR_INVALID_ARG,
                "max_tensors = 38, want 1..37");
    bad.max_tensors = 111; /* over the slot table */
    CHECK_FAILS(amp_mt_planner_init(&pl, 1, k_f32, ts, 2, bad), AMP_ERR_INVALID_ARG,
                "max_tensors = 111, want 1..110");
    bad = lim;
    bad.max_blocks = 321;
    CHECK_FAILS(amp_mt_planner_init(&pl, 4, k_f32, ts, 2, bad), AMP_ERR_INVALID_ARG,
                "max_blocks");
    bad = lim;
    bad.chunk_numel = 0;
    CHECK_FAILS(amp_mt_planner_init(&pl, 4, k_f32, ts, 2, bad), AMP_ERR_INVALID_ARG,
                "chunk_numel");
    const amp_dtype odd[4] = {AMP_F32, (amp_dtype)9, AMP_F32, AMP_F32};
    CHECK_FAILS(amp_mt_planner_init(&pl, 4, odd, ts, 2, lim), AMP_ERR_DTYPE, "list 1");
    CHECK_FAILS(amp_mt_planner_init(&pl, 4, k_f32, NULL, 2, lim), AMP_ERR_INVALID_ARG,
                "tensors");
    CHECK_FAILS(amp_mt_planner_init(&pl, 4, k_f32, ts, -1, lim), AMP_ERR_INVALID_ARG,
                "n_tensors");
    ts[1].ptr[3] = NULL;
    CHECK_FAILS(amp_mt_planner_init(&pl, 4, k_f32, ts, 2, lim), AMP_ERR_INVALID_ARG,
                "tensor 1 has a NULL address in list 3");
    CHECK_OK(amp_mt_planner_init(&pl, 3, k_f32, ts, 2, lim)); /* list 3 is not read at depth 3 */
    ts[1].numel = -5;
    CHECK_FAILS(amp_mt_planner_init(&pl, 3, k_f32, ts, 2, lim), AMP_ERR_INVALID_ARG,
                "numel -5");
    ts[1].numel = AMP_MT_MAX_CHUNKS_PER_TENSOR * 2 + 1;
    bad = lim;
    bad.chunk_numel = 2;
    CHECK_FAILS(amp_mt_planner_init(&pl, 3, k_f32, ts, 2, bad), AMP_ERR_INVALID_ARG, "chunks");
    bad.chunk_numel = 3; /* the same tensor in fewer chunks is fine */
    CHECK_OK(amp_mt_planner_init(&pl, 3, k_f32, ts, 2, bad));
    free(ts);
}

int main(void) {
    test_layout();
    test_empty();
    test_one_chunk();
    test_spanning();
    test_many_tensors_every_depth();
    test_many_blocks();
    test_mixed_dtypes();
    test_huge_tensor();
    test_random();
    test_errors();
    return test_summary("test_multi_tensor");
}
