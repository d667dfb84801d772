/* AMP_HD marks per-element math that both the CPU backend (cc) and CUDA kernels (nvcc, or g++
 * under ../shared/cudacpu) compile: __host__ __device__ under CUDA, nothing under plain C. */
#ifndef AMP_CORE_HD_H
#define AMP_CORE_HD_H
#if defined(__CUDACC__) || defined(CUDACPU)
#define AMP_HD __host__ __device__
#else
#define AMP_HD
#endif
#endif
