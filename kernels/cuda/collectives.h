/* NCCL collectives of the CUDA backend (kernels/cuda/collectives.c): the backend's amp_collectives,
 * whose contract core/backend.h states. */
#ifndef AMP_KERNELS_CUDA_COLLECTIVES_H
#define AMP_KERNELS_CUDA_COLLECTIVES_H

#include <stdbool.h>
#include <stddef.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

amp_status amp_cuda_coll_id(void *id);
amp_status amp_cuda_coll_create(amp_device_ctx *dev, const void *id, int rank, int size,
                                void **comm);
void amp_cuda_coll_free(void *comm, bool abort);
amp_status amp_cuda_coll_allreduce(void *comm, void *buf, amp_dtype dt, int64_t n, amp_coll_op op);
amp_status amp_cuda_coll_broadcast(void *comm, void *buf, size_t nbytes, int root);
amp_status amp_cuda_coll_join(void *comm);
amp_status amp_cuda_coll_poll(void *comm, bool *pending);

#ifdef __cplusplus
}
#endif
#endif
