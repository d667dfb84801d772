/* The AMP_CUDACPU build's one translation unit that defines ../shared/cudacpu's runtime (the
 * CUDA runtime API, streams, the launcher and the guard on device memory) and the library
 * emulations the CUDA backend calls in place of NVIDIA's: cuBLASLt (gemm_cublaslt.c) and cuDNN
 * (cmake/AmpCudacpu.cmake defines CUDACPU_CUBLASLT and CUDACPU_CUDNN here, and says why NCCL is
 * not among them yet). cudacpu allows exactly one such unit per program, so no test or program
 * that links libamp in this build may define CUDACPU_IMPLEMENTATION itself. Compiled only when
 * AMP_CUDACPU=ON; the real-CUDA build links libcudart, cuBLASLt, cuDNN and NCCL instead. */
#define CUDACPU_IMPLEMENTATION
#include "cudacpu.h"
#include "cudacpu_libs.h"
