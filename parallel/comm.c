/* The communicator: the world from MPI when a launcher started the processes, a world of one
 * without MPI otherwise. Every wait polls with a deadline, so a rank that died or hangs turns
 * into an error on the others instead of a silent hang (PyTorch's NCCL watchdog does the same
 * with its collective timeout). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"
#include "parallel/comm_internal.h"

/* The default deadline of a collective: a peer that has not joined in this long is reported
 * (AMP_COMM_TIMEOUT in seconds overrides it). Generous against a slow step, short enough that a
 * hung job does not sit on its GPUs for long. */
#define AMP_COMM_TIMEOUT_DEFAULT_S 60.0
/* After a timeout, how long a rank listens for the others' roll call. */
#define AMP_COMM_ROLL_CALL_S 5.0
#define AMP_COMM_ROLL_CALL_TAG 7301
/* Broadcasts move at most this many bytes per MPI call (MPI counts are ints). */
#define AMP_COMM_CHUNK_BYTES ((size_t)1 << 30)

amp_status amp_mpi_fail(int rc, const char *call) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    return amp_fail(AMP_ERR_BACKEND, "%s failed: %s", call, msg);
}

double amp_comm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A launcher left its marks in the environment: Open MPI's mpirun, a PMI/PMIx launcher (MPICH's
 * hydra, srun with --mpi=pmix) or srun itself. */
bool amp_comm_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                 "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

static int amp_env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > INT_MAX ? fallback : (int)x;
}

/* The processes that share this machine's memory: their number, and this one's rank among
 * them (the launcher's own numbering when it gives one, which is what GPU binding scripts use). */
static amp_status amp_comm_find_local_rank(amp_comm *c) {
    MPI_Comm node;
    AMP_MPI_TRY(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    int lr = -1, rc = MPI_Comm_rank(node, &lr);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &c->local_size);
    MPI_Comm_free(&node);
    if (rc != MPI_SUCCESS) return amp_mpi_fail(rc, "MPI_Comm_rank/size(node)");
    int env = amp_env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    if (env < 0) env = amp_env_int("MPI_LOCALRANKID", -1);
    if (env < 0) env = amp_env_int("SLURM_LOCALID", -1);
    c->local_rank = env >= 0 ? env : lr;
    return AMP_OK;
}

static amp_status amp_comm_init_mpi(amp_comm *c) {
    int inited = 0;
    AMP_MPI_TRY(MPI_Initialized(&inited));
    if (!inited) {
        int provided;
        /* Only the thread that owns the context calls MPI (the loader's prefetch thread and the
         * OpenMP workers never do). */
        AMP_MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
        c->finalize = true;
    }
    c->mpi = true;
    AMP_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &c->world));
    AMP_MPI_TRY(MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN));
    AMP_MPI_TRY(MPI_Comm_dup(c->world, &c->roll_call));
    AMP_MPI_TRY(MPI_Comm_rank(c->world, &c->rank));
    AMP_MPI_TRY(MPI_Comm_size(c->world, &c->size));
    return amp_comm_find_local_rank(c);
}

amp_status amp_comm_create(amp_comm **out) {
    AMP_CHECK_ARG(out);
    *out = NULL;
    amp_comm *c = calloc(1, sizeof *c);
    if (!c) return amp_fail(AMP_ERR_OOM, "amp_comm_create: out of memory");
    c->size = c->local_size = 1;
    c->world = c->roll_call = MPI_COMM_NULL;
    c->timeout_s = AMP_COMM_TIMEOUT_DEFAULT_S;
    const char *t = getenv("AMP_COMM_TIMEOUT");
    if (t && *t) {
        char *end;
        double v = strtod(t, &end);
        if (*end || !(v > 0)) {
            free(c);
            return amp_fail(AMP_ERR_INVALID_ARG, "amp_comm_create: AMP_COMM_TIMEOUT='%s': want "
                            "a number of seconds > 0", t);
        }
        c->timeout_s = v;
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited || amp_comm_launched()) {
        amp_status s = amp_comm_init_mpi(c);
        if (s != AMP_OK) {
            amp_comm_free(c);
            return amp_fail_context(s, "amp_comm_create");
        }
    }
    *out = c;
    return AMP_OK;
}

void amp_comm_free(amp_comm *c) {
    if (!c) return;
    if (c->coll) c->coll_be->coll->free(c->coll, c->broken);
    if (c->broken) { /* freeing communicators and MPI_Finalize synchronise with the lost peers */
        free(c);
        return;
    }
    if (c->roll_call != MPI_COMM_NULL) MPI_Comm_free(&c->roll_call);
    if (c->world != MPI_COMM_NULL) MPI_Comm_free(&c->world);
    if (c->finalize) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    free(c);
}

int amp_comm_rank(const amp_comm *c) { return c ? c->rank : 0; }
int amp_comm_size(const amp_comm *c) { return c ? c->size : 1; }
int amp_comm_local_rank(const amp_comm *c) { return c ? c->local_rank : 0; }
int amp_comm_local_size(const amp_comm *c) { return c ? c->local_size : 1; }
bool amp_comm_is_distributed(const amp_comm *c) { return c && c->size > 1; }

amp_status amp_comm_test(amp_comm *c, int n, MPI_Request *reqs, bool *done) {
    int flag = 1;
    if (n > 0) AMP_MPI_TRY(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
    *done = flag != 0;
    (void)c;
    return AMP_OK;
}

/* A roll call after a timeout: every rank that timed out tells every other one so, then listens
 * for a while; a rank that never answers is not inside MPI (it hangs, or it computes far longer
 * than the others) and is named. Ranks that died are reported by the launcher itself (mpirun
 * and srun end the job when a process dies). Writes the silent ranks into `out`. */
static void amp_comm_roll_call(amp_comm *c, char *out, size_t n) {
    int me = c->rank;
    for (int r = 0; r < c->size; r++) {
        if (r == me) continue;
        MPI_Request req;
        if (MPI_Isend(&me, 1, MPI_INT, r, AMP_COMM_ROLL_CALL_TAG, c->roll_call, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
    char *heard = calloc((size_t)c->size, 1);
    if (!heard) {
        snprintf(out, n, "unknown");
        return;
    }
    heard[me] = 1;
    double until = amp_comm_now() + AMP_COMM_ROLL_CALL_S;
    while (amp_comm_now() < until) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, AMP_COMM_ROLL_CALL_TAG, c->roll_call, &flag, &st) !=
            MPI_SUCCESS)
            break;
        if (!flag) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        int who;
        MPI_Recv(&who, 1, MPI_INT, st.MPI_SOURCE, AMP_COMM_ROLL_CALL_TAG, c->roll_call,
                 MPI_STATUS_IGNORE);
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < c->size) heard[st.MPI_SOURCE] = 1;
    }
    size_t k = 0;
    out[0] = 0;
    for (int r = 0; r < c->size && k + 12 < n; r++)
        if (!heard[r]) k += (size_t)snprintf(out + k, n - k, k ? ", %d" : "%d", r);
    if (!k) snprintf(out, n, "none (all answered: the collective itself is stuck)");
    free(heard);
}

amp_status amp_comm_wait(amp_comm *c, int n, MPI_Request *reqs, const char *what) {
    double deadline = amp_comm_now() + c->timeout_s;
    for (unsigned spin = 0;; spin++) {
        bool done;
        AMP_TRY(amp_comm_test(c, n, reqs, &done));
        if (done) return AMP_OK;
        if (amp_comm_now() > deadline) {
            char silent[256];
            amp_comm_roll_call(c, silent, sizeof silent);
            c->broken = true;
            return amp_fail(AMP_ERR_BACKEND, "rank %d of %d: %s did not complete within %.0f s; "
                            "ranks not answering: %s (they hang or died; AMP_COMM_TIMEOUT sets "
                            "the limit)", c->rank, c->size, what, c->timeout_s, silent);
        }
        if (spin > 1000) { /* past the first millisecond or so, yield the core to the peers */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

amp_status amp_comm_backend_coll(amp_comm *c, const amp_backend *be, void **out) {
    if (!be->coll)
        return amp_fail(AMP_ERR_UNSUPPORTED, "the %s backend has no collectives of its own (its "
                        "memory is host memory: MPI reads it)", be->name);
    if (c->coll && c->coll_be != be)
        return amp_fail(AMP_ERR_STATE, "the communicator already serves the %s backend; one "
                        "communicator per backend", c->coll_be->name);
    if (!c->coll) {
        unsigned char id[AMP_COLL_ID_BYTES] = {0};
        amp_status s = c->rank == 0 ? be->coll->id(id) : AMP_OK;
        bool any;
        AMP_TRY(amp_comm_agree_failure(c, s != AMP_OK, &any));
        if (s != AMP_OK) return s;
        if (any) return amp_fail(AMP_ERR_BACKEND, "rank 0 could not make a %s communicator id "
                                 "(its error says why)", be->name);
        AMP_TRY(amp_comm_bcast_bytes(c, id, sizeof id, "the backend communicator's id"));
        void *coll = NULL;
        s = be->coll->create(be->dev, id, c->rank, c->size, &coll);
        AMP_TRY(amp_comm_agree_failure(c, s != AMP_OK, &any));
        if (s != AMP_OK) return s;
        if (any) {
            be->coll->free(coll, true);
            return amp_fail(AMP_ERR_BACKEND, "another rank could not join the %s communicator "
                            "(its error says why)", be->name);
        }
        c->coll = coll;
        c->coll_be = be;
    }
    *out = c->coll;
    return AMP_OK;
}

amp_status amp_comm_select_device(const amp_comm *c) {
    AMP_CHECK_ARG(c);
    return amp_backend_select_device(c->local_rank);
}

void amp_comm_abort(amp_comm *c, int code) {
    if (c && c->mpi) MPI_Abort(c->world, code);
    exit(code);
}

amp_status amp_comm_barrier(amp_comm *c) {
    AMP_CHECK_ARG(c);
    if (c->size == 1) return AMP_OK;
    MPI_Request r;
    AMP_MPI_TRY(MPI_Ibarrier(c->world, &r));
    return amp_comm_wait(c, 1, &r, "amp_comm_barrier");
}

static amp_status amp_comm_allreduce_f64(amp_comm *c, double *v, int n, MPI_Op op,
                                         const char *who) {
    if (!c) return amp_fail(AMP_ERR_INVALID_ARG, "%s: argument 'comm' is NULL", who);
    if (n < 0 || (n > 0 && !v))
        return amp_fail(AMP_ERR_INVALID_ARG, "%s: %d values at %p", who, n, (void *)v);
    if (c->size == 1 || n == 0) return AMP_OK;
    MPI_Request r;
    AMP_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, op, c->world, &r));
    return amp_comm_wait(c, 1, &r, who);
}

amp_status amp_comm_allreduce_sum_f64(amp_comm *c, double *v, int n) {
    return amp_comm_allreduce_f64(c, v, n, MPI_SUM, __func__);
}

amp_status amp_comm_allreduce_max_f64(amp_comm *c, double *v, int n) {
    return amp_comm_allreduce_f64(c, v, n, MPI_MAX, __func__);
}

amp_status amp_comm_bcast_bytes(amp_comm *c, void *buf, size_t nbytes, const char *what) {
    if (c->size == 1) return AMP_OK;
    for (size_t off = 0; off < nbytes; off += AMP_COMM_CHUNK_BYTES) {
        size_t n = nbytes - off < AMP_COMM_CHUNK_BYTES ? nbytes - off : AMP_COMM_CHUNK_BYTES;
        MPI_Request r;
        AMP_MPI_TRY(MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, 0, c->world, &r));
        AMP_TRY(amp_comm_wait(c, 1, &r, what));
    }
    return AMP_OK;
}

amp_status amp_comm_agree_failure(amp_comm *c, bool local_failed, bool *any_failed) {
    double f = local_failed ? 1.0 : 0.0;
    AMP_TRY(amp_comm_allreduce_f64(c, &f, 1, MPI_MAX, "agreeing on a failure"));
    *any_failed = f != 0.0;
    return AMP_OK;
}
