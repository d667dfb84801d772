/* oneDNN glue: engine, per-thread stream and scratch arena, the plan cache, widening to f32.
 * See dnnl_util.h for the contract. */
#include "kernels/cpu/dnnl_util.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "core/cpu_info.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/math/load_store.h"

#define SCRATCH_ALIGN 64
#define ARENA_ROUND ((size_t)1 << 20) /* arena sizes: multiples of a MiB (and of SCRATCH_ALIGN) */

amp_status amp_dnnl_fail(dnnl_status_t s, const char *text, const char *func) {
    return amp_fail(AMP_ERR_BACKEND, "%s: oneDNN call %s failed: %s", func, text,
                    dnnl_status2str(s));
}

/* ---- engine and per-thread state ------------------------------------------------------------ */

typedef struct thread_state {
    dnnl_stream_t stream;
    void *buf[AMP_DNNL_ARENAS];
    size_t buf_nbytes[AMP_DNNL_ARENAS];
} thread_state;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static dnnl_status_t g_engine_status = dnnl_runtime_error;
static pthread_key_t g_thread_key;
static int g_key_status = -1;
static bool g_isa_refused; /* AMP_CPU_ISA came after oneDNN had chosen a higher ISA */

static void thread_state_free(void *p) {
    thread_state *t = p;
    if (t->stream) dnnl_stream_destroy(t->stream);
    for (int i = 0; i < AMP_DNNL_ARENAS; i++) {
        amp_cpu_memory_count(0, t->buf_nbytes[i]);
        free(t->buf[i]);
    }
    free(t);
}

/* oneDNN's ISA for the running level (core/cpu_info.h), as ONEDNN_MAX_CPU_ISA would set it, so
 * that AMP_CPU_ISA caps oneDNN's kernels with ours. Its 2.6 has no level between bf16 and AMX. */
static dnnl_cpu_isa_t dnnl_isa_of(amp_cpu_level level) {
    switch (level) {
    case AMP_CPU_SSE41: return dnnl_cpu_isa_sse41;
    case AMP_CPU_AVX2: return dnnl_cpu_isa_avx2;
    case AMP_CPU_AVX512_CORE: return dnnl_cpu_isa_avx512_core;
    case AMP_CPU_AVX512_CORE_BF16:
    case AMP_CPU_AVX512_CORE_FP16: return dnnl_cpu_isa_avx512_core_bf16;
    case AMP_CPU_AVX512_CORE_AMX: break;
    }
    return dnnl_cpu_isa_all;
}

static void init_once(void) {
    /* Only under a cap: otherwise ONEDNN_MAX_CPU_ISA, if set, keeps its say. It must come before
     * oneDNN's first look at the CPU, which engine creation is not yet. */
    if (*amp_cpu_isa_cap()) {
        dnnl_cpu_isa_t want = dnnl_isa_of(amp_cpu_level_get());
        /* Refused once the process's oneDNN has looked (a caller used it first): fine if what it
         * chose is within the cap, which the levels' bit masks tell. */
        if (dnnl_set_max_cpu_isa(want) != dnnl_success &&
            ((unsigned)dnnl_get_effective_cpu_isa() & ~(unsigned)want) != 0) {
            g_isa_refused = true;
            return;
        }
    }
    g_engine_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    g_key_status = pthread_key_create(&g_thread_key, thread_state_free);
}

amp_status amp_dnnl_engine(dnnl_engine_t *out) {
    pthread_once(&g_once, init_once);
    if (g_isa_refused)
        return amp_fail(AMP_ERR_BACKEND,
                        "AMP_CPU_ISA=%s: this process used oneDNN before libamp, and oneDNN "
                        "keeps the ISA it chose then (0x%x); set ONEDNN_MAX_CPU_ISA=%s too",
                        amp_cpu_isa_cap(), (unsigned)dnnl_get_effective_cpu_isa(),
                        amp_cpu_level_name(amp_cpu_level_get()));
    if (g_engine_status != dnnl_success)
        return amp_dnnl_fail(g_engine_status, "dnnl_engine_create(&engine, dnnl_cpu, 0)",
                             __func__);
    *out = g_engine;
    return AMP_OK;
}

static amp_status thread_state_get(thread_state **out) {
    dnnl_engine_t engine = NULL;
    AMP_TRY(amp_dnnl_engine(&engine));
    if (g_key_status != 0)
        return amp_fail(AMP_ERR_BACKEND, "%s: pthread_key_create failed (%d)", __func__,
                        g_key_status);
    thread_state *t = pthread_getspecific(g_thread_key);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t) return amp_fail(AMP_ERR_OOM, "%s: out of host memory", __func__);
        dnnl_status_t s = dnnl_stream_create(&t->stream, engine, dnnl_stream_default_flags);
        if (s != dnnl_success) {
            free(t);
            return amp_dnnl_fail(s, "dnnl_stream_create(&stream, engine, default)", __func__);
        }
        if (pthread_setspecific(g_thread_key, t) != 0) {
            thread_state_free(t);
            return amp_fail(AMP_ERR_BACKEND, "%s: pthread_setspecific failed", __func__);
        }
    }
    *out = t;
    return AMP_OK;
}

amp_status amp_dnnl_stream(dnnl_stream_t *out) {
    thread_state *t = NULL;
    AMP_TRY(thread_state_get(&t));
    *out = t->stream;
    return AMP_OK;
}

amp_status amp_dnnl_arena(amp_dnnl_arena_id id, size_t nbytes, void **out) {
    thread_state *t = NULL;
    AMP_TRY(thread_state_get(&t));
    if (nbytes > t->buf_nbytes[id]) {
        /* The largest request, rounded up to a MiB so that slightly larger ones do not
         * reallocate each time: a training step asks for the same sizes every step, so the
         * arena stops growing in the first one, and holds no more than its largest call needs
         * (it is workspace in amp/memory.h). */
        size_t want = (nbytes + ARENA_ROUND - 1) / ARENA_ROUND * ARENA_ROUND;
        void *p = aligned_alloc(SCRATCH_ALIGN, want);
        if (!p)
            return amp_fail(AMP_ERR_OOM, "%s: cannot allocate %zu bytes of oneDNN scratch",
                            __func__, want);
        free(t->buf[id]);
        amp_cpu_memory_count(want, t->buf_nbytes[id]); /* workspace in amp/memory.h */
        t->buf[id] = p;
        t->buf_nbytes[id] = want;
    }
    *out = t->buf[id];
    return AMP_OK;
}

static void arenas_release_own(void) {
    thread_state *t = g_key_status == 0 ? pthread_getspecific(g_thread_key) : NULL;
    for (int i = 0; t && i < AMP_DNNL_ARENAS; i++) {
        amp_cpu_memory_count(0, t->buf_nbytes[i]);
        free(t->buf[i]);
        t->buf[i] = NULL;
        t->buf_nbytes[i] = 0;
    }
}

/* The calling thread's, and those of the OpenMP team the kernels run on (batch norm and pooling
 * take arenas inside their parallel regions): the team's threads are the pool's, reused. */
void amp_dnnl_arenas_release(void) {
    pthread_once(&g_once, init_once);
    arenas_release_own();
#pragma omp parallel
    arenas_release_own();
}

amp_status amp_dnnl_scratch(size_t nbytes, void **out) {
    return amp_dnnl_arena(AMP_DNNL_ARENA_SCRATCH, nbytes, out);
}

int amp_dnnl_threads(void) { return omp_get_max_threads(); }

amp_status amp_dnnl_dtype(amp_dtype dt, const char *what, dnnl_data_type_t *out) {
    switch (dt) {
    case AMP_F32: *out = dnnl_f32; return AMP_OK;
    case AMP_F16: *out = dnnl_f16; return AMP_OK;
    case AMP_BF16: *out = dnnl_bf16; return AMP_OK;
    default:
        return amp_fail(AMP_ERR_UNSUPPORTED,
                        "%s has dtype %d: the CPU GEMM/convolution take f32, f16 or bf16", what,
                        (int)dt);
    }
}

/* ---- plan cache ----------------------------------------------------------------------------- */

struct amp_dnnl_cache_ref {
    amp_dnnl_build_fn build;
    amp_dnnl_destroy_fn destroy;
    void *plan;
    int refs;          /* references handed out and not yet put back */
    bool cached;       /* still in the table (else destroyed when refs drops to 0) */
    uint64_t last_use; /* LRU clock */
    size_t key_nbytes;
    unsigned char key[];
};

static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static amp_dnnl_cache_ref *g_cache[AMP_DNNL_CACHE_CAPACITY];
static int g_cache_n;
static uint64_t g_cache_clock;

static void node_free(amp_dnnl_cache_ref *r) {
    r->destroy(r->plan);
    free(r);
}

/* Drops the least recently used plan from the table; one still in use dies at its last put. */
static void cache_evict_lru(void) {
    int lru = 0;
    for (int i = 1; i < g_cache_n; i++)
        if (g_cache[i]->last_use < g_cache[lru]->last_use) lru = i;
    amp_dnnl_cache_ref *r = g_cache[lru];
    g_cache[lru] = g_cache[--g_cache_n];
    r->cached = false;
    if (r->refs == 0) node_free(r);
}

amp_status amp_dnnl_cache_get(const void *key, size_t key_nbytes, amp_dnnl_build_fn build,
                              amp_dnnl_destroy_fn destroy, void **plan, amp_dnnl_cache_ref **ref) {
    pthread_mutex_lock(&g_cache_mu);
    for (int i = 0; i < g_cache_n; i++) {
        amp_dnnl_cache_ref *r = g_cache[i];
        if (r->build == build && r->key_nbytes == key_nbytes && !memcmp(r->key, key, key_nbytes)) {
            r->refs++;
            r->last_use = ++g_cache_clock;
            pthread_mutex_unlock(&g_cache_mu);
            *plan = r->plan;
            *ref = r;
            return AMP_OK;
        }
    }
    /* Built under the lock: two threads missing on the same key build it once. */
    void *p = NULL;
    amp_status s = build(key, &p);
    if (s != AMP_OK) {
        pthread_mutex_unlock(&g_cache_mu);
        return s;
    }
    amp_dnnl_cache_ref *r = malloc(sizeof *r + key_nbytes);
    if (!r) {
        destroy(p);
        pthread_mutex_unlock(&g_cache_mu);
        return amp_fail(AMP_ERR_OOM, "%s: out of host memory", __func__);
    }
    *r = (amp_dnnl_cache_ref){.build = build, .destroy = destroy, .plan = p, .refs = 1,
                              .cached = true, .last_use = ++g_cache_clock,
                              .key_nbytes = key_nbytes};
    memcpy(r->key, key, key_nbytes);
    if (g_cache_n == AMP_DNNL_CACHE_CAPACITY) cache_evict_lru();
    g_cache[g_cache_n++] = r;
    pthread_mutex_unlock(&g_cache_mu);
    *plan = p;
    *ref = r;
    return AMP_OK;
}

void amp_dnnl_cache_put(amp_dnnl_cache_ref *ref) {
    if (!ref) return;
    pthread_mutex_lock(&g_cache_mu);
    assert(ref->refs > 0);
    if (--ref->refs == 0 && !ref->cached) node_free(ref);
    pthread_mutex_unlock(&g_cache_mu);
}

int amp_dnnl_cache_size(void) {
    pthread_mutex_lock(&g_cache_mu);
    int n = g_cache_n;
    pthread_mutex_unlock(&g_cache_mu);
    return n;
}

/* ---- memory objects and execution ----------------------------------------------------------- */

amp_status amp_dnnl_mem(amp_dnnl_mems *mems, const dnnl_memory_desc_t *md, const void *data,
                        dnnl_memory_t *out) {
    dnnl_engine_t engine = NULL;
    AMP_TRY(amp_dnnl_engine(&engine));
    assert(mems->n < AMP_DNNL_MAX_MEMS);
    /* oneDNN takes a non-const handle; inputs are only read. */
    AMP_DNNL_TRY(dnnl_memory_create(&mems->m[mems->n], md, engine, (void *)(uintptr_t)data));
    *out = mems->m[mems->n++];
    return AMP_OK;
}

void amp_dnnl_mems_free(amp_dnnl_mems *mems) {
    for (int i = 0; i < mems->n; i++) dnnl_memory_destroy(mems->m[i]);
    mems->n = 0;
}

amp_status amp_dnnl_execute(dnnl_primitive_t p, int n_args, const dnnl_exec_arg_t *args) {
    dnnl_stream_t stream = NULL;
    AMP_TRY(amp_dnnl_stream(&stream));
    AMP_DNNL_TRY(dnnl_primitive_execute(p, stream, n_args, args));
    return AMP_OK;
}

amp_status amp_dnnl_wait(void) {
    dnnl_stream_t stream = NULL;
    AMP_TRY(amp_dnnl_stream(&stream));
    AMP_DNNL_TRY(dnnl_stream_wait(stream));
    return AMP_OK;
}

amp_status amp_dnnl_attr_create(dnnl_primitive_attr_t *attr) {
    AMP_DNNL_TRY(dnnl_primitive_attr_create(attr));
    dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (s != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        return amp_dnnl_fail(s, "dnnl_primitive_attr_set_scratchpad_mode(attr, user)", __func__);
    }
    return AMP_OK;
}

amp_status amp_dnnl_pd_create(const void *op_desc, const_dnnl_primitive_attr_t attr,
                              const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd) {
    dnnl_engine_t engine = NULL;
    AMP_TRY(amp_dnnl_engine(&engine));
    dnnl_status_t s = dnnl_primitive_desc_create(pd, op_desc, attr, engine, hint);
    if (s == dnnl_unimplemented)
        return amp_fail(AMP_ERR_UNSUPPORTED, "oneDNN has no implementation on this CPU");
    if (s != dnnl_success)
        return amp_dnnl_fail(s, "dnnl_primitive_desc_create(&pd, op_desc, attr, engine, hint)",
                             __func__);
    return AMP_OK;
}

bool amp_dnnl_pd_is_reference(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
           impl && strncmp(impl, "ref", 3) == 0;
}

/* ---- widening ------------------------------------------------------------------------------- */

/* Row by row through amp_cpu_cast, whose vector paths convert 8-16 values an instruction.
 * Dense rows go in one amp_cpu_cast, which splits them between the threads itself: inside this
 * loop's parallel region it runs serially, so a single row (a whole tensor, as the convolutions
 * pass) would take one thread. */
void amp_dnnl_widen(float *dst, int64_t dst_ld, const void *src, amp_dtype dt, int64_t rows,
                    int64_t cols, int64_t ld) {
    size_t esize = amp_dtype_size(dt);
    if (rows == 1 || (ld == cols && dst_ld == cols)) {
        (void)amp_cpu_convert(dst, AMP_F32, src, dt, rows * cols);
        return;
    }
#pragma omp parallel for if (rows * cols >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        (void)amp_cpu_convert(dst + r * dst_ld, AMP_F32,
                              (const char *)src + (size_t)(r * ld) * esize, dt, cols);
}

size_t amp_dnnl_f32_nbytes(int64_t n) {
    return ((size_t)(n > 0 ? n : 1) * sizeof(float) + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN *
           SCRATCH_ALIGN;
}

/* As amp_dnnl_widen, the other way. */
void amp_dnnl_narrow(void *dst, amp_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                     const float *src) {
    size_t esize = amp_dtype_size(dt);
    if (rows == 1 || ld == cols) {
        (void)amp_cpu_convert(dst, dt, src, AMP_F32, rows * cols);
        return;
    }
#pragma omp parallel for if (rows * cols >= AMP_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        (void)amp_cpu_convert((char *)dst + (size_t)(r * ld) * esize, dt, src + r * cols, AMP_F32,
                              cols);
}
