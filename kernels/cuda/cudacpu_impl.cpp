/* The AMP_CUDACPU build's one translation unit that defines ../shared/cudacpu's runtime (the
 * CUDA runtime API, streams, the launcher and the guard on device memory) and the library
 * emulations the CUDA backend calls in place of NVIDIA's: cuBLASLt (gemm.c), cuDNN
 * (conv.c) and NCCL over MPI (collectives.c); cmake/AmpCudacpu.cmake defines
 * CUDACPU_CUBLASLT, CUDACPU_CUDNN and CUDACPU_NCCL here. cudacpu allows exactly one such unit per program, so no test or program
 * that links libamp in this build may define CUDACPU_IMPLEMENTATION itself. Compiled only when
 * AMP_CUDACPU=ON; the real-CUDA build links libcudart, cuBLASLt, cuDNN and NCCL instead. */
#define CUDACPU_IMPLEMENTATION
#include "cudacpu.h"
#include "cudacpu_cublaslt.h"
#include "cudacpu_cudnn.h"
/* cudacpu_nccl.h and cudacpu_cudnn.h each declare a `t_last_error` and bring it into the global
 * scope, which makes cudacpu_nccl.h's own use of it ambiguous: NCCL's is renamed here. */
#define t_last_error amp_cudacpu_nccl_last_error
#include "cudacpu_nccl.h"
#undef t_last_error
