/* The communicator's internals, shared by the files of parallel/. */
#ifndef AMP_PARALLEL_COMM_INTERNAL_H
#define AMP_PARALLEL_COMM_INTERNAL_H

#include <mpi.h>

#include "amp/parallel.h"
#include "core/backend.h"

struct amp_comm {
    int rank, size, local_rank, local_size;
    bool mpi;           /* MPI is in use (a launcher started us, or the program initialised it) */
    bool finalize;      /* we initialised MPI, so amp_comm_free finalises it */
    MPI_Comm world;     /* a duplicate of MPI_COMM_WORLD: our traffic never meets the user's */
    MPI_Comm roll_call; /* another duplicate: after a timeout, who is still answering */
    bool broken;        /* a collective timed out: peers are gone, MPI_Finalize would wait on them */
    /* The backend's communicator over the same ranks (NCCL on CUDA), made by the first user
     * (DDP, SyncBatchNorm) and shared by all, as PyTorch's process group is: one communicator
     * keeps every rank's collectives in one order on one stream. */
    void *coll;
    const struct amp_backend *coll_be;
    double timeout_s;   /* longest wait for a collective before it is reported as stuck */
};

/* The backend's communicator over c's ranks, made at the first call (collective then: every
 * rank must call it, rank 0's id is broadcast over MPI). One backend per communicator. */
amp_status amp_comm_backend_coll(amp_comm *c, const struct amp_backend *be, void **out);

/* A monotonic clock in seconds. */
double amp_comm_now(void);

/* Turns an MPI return code into AMP_ERR_BACKEND naming the call (STYLE rule 7). */
amp_status amp_mpi_fail(int rc, const char *call);
#define AMP_MPI_TRY(call)                                                                          \
    do {                                                                                           \
        int amp_mpi_rc_ = (call);                                                                  \
        if (amp_mpi_rc_ != MPI_SUCCESS) return amp_mpi_fail(amp_mpi_rc_, #call);                   \
    } while (0)

/* Waits for n requests, polling (MPI makes progress inside MPI_Testall), for at most the
 * communicator's timeout: a peer that died or hangs becomes an error naming `what` instead of a
 * silent hang. */
amp_status amp_comm_wait(amp_comm *comm, int n, MPI_Request *reqs, const char *what);
/* Non-blocking progress: *done when all n requests completed. */
amp_status amp_comm_test(amp_comm *comm, int n, MPI_Request *reqs, bool *done);
/* Broadcast of nbytes of host memory from rank 0, with the timeout. */
amp_status amp_comm_bcast_bytes(amp_comm *comm, void *buf, size_t nbytes, const char *what);
/* Every rank learns whether any rank failed (a MAX of the flags), so that all of them return an
 * error together instead of some waiting forever in the next collective. */
amp_status amp_comm_agree_failure(amp_comm *comm, bool local_failed, bool *any_failed);

#endif
