# Finds what libamp links against and prints one line per feature (STYLE.md rule 5).
# Sets AMP_PRIVATE_LIBS, AMP_DEFINITIONS and AMP_HAVE_CUDA (AMP_CUDACPU=ON: cmake/AmpCudacpu.cmake).
set(AMP_PRIVATE_LIBS "")
set(AMP_DEFINITIONS "")

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS C)
find_package(ZLIB REQUIRED)
find_package(dnnl REQUIRED CONFIG)
list(APPEND AMP_PRIVATE_LIBS DNNL::dnnl ZLIB::ZLIB OpenMP::OpenMP_C Threads::Threads m)
message(STATUS "libamp feature: oneDNN ${dnnl_VERSION} (CPU GEMM and convolution)")
message(STATUS "libamp feature: OpenMP ${OpenMP_C_VERSION}, zlib ${ZLIB_VERSION_STRING}")

# jansson (safetensors headers, checkpoint/). Linked by its absolute path, like cuDNN and NCCL, so
# the static library's package config needs no find_dependency for it (cmake/AmpInstall.cmake).
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_JANSSON QUIET jansson)
endif()
find_path(AMP_JANSSON_INCLUDE_DIR jansson.h HINTS ${PC_JANSSON_INCLUDE_DIRS})
find_library(AMP_JANSSON_LIB NAMES jansson HINTS ${PC_JANSSON_LIBRARY_DIRS})
if(NOT AMP_JANSSON_INCLUDE_DIR OR NOT AMP_JANSSON_LIB)
  message(FATAL_ERROR "jansson not found (checkpoints need it): install libjansson-dev "
    "(scripts/setup.sh does)")
endif()
include_directories(${AMP_JANSSON_INCLUDE_DIR})
list(APPEND AMP_PRIVATE_LIBS ${AMP_JANSSON_LIB})
if(NOT PC_JANSSON_VERSION)
  set(PC_JANSSON_VERSION "(version unknown)")
endif()
message(STATUS "libamp feature: jansson ${PC_JANSSON_VERSION} (safetensors checkpoints)")

set(AMP_HAVE_CUDA OFF)
if(AMP_CUDACPU)
  include(cmake/AmpCudacpu.cmake) # the CUDA backend against ../shared/cudacpu, no toolkit search
elseif(NOT AMP_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90) # A100, H100/H200
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared) # one cudart: the shared one CUDA::cudart links
    enable_language(CUDA)
    find_library(AMP_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_library(AMP_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(AMP_CUDNN_LIB AND AMP_NCCL_LIB)
      set(AMP_HAVE_CUDA ON)
      list(APPEND AMP_PRIVATE_LIBS CUDA::cudart CUDA::cublasLt ${AMP_CUDNN_LIB} ${AMP_NCCL_LIB})
      list(APPEND AMP_DEFINITIONS AMP_HAVE_CUDA=1)
      message(STATUS "libamp feature: CUDA ${CUDAToolkit_VERSION} (archs ${CMAKE_CUDA_ARCHITECTURES})")
      message(STATUS "libamp feature: cuBLASLt, cuDNN ${AMP_CUDNN_LIB}, NCCL ${AMP_NCCL_LIB}")
    endif()
  endif()
  if(NOT AMP_HAVE_CUDA)
    if(AMP_CUDA STREQUAL "ON")
      message(FATAL_ERROR "AMP_CUDA=ON but the CUDA toolkit, cuDNN or NCCL was not found")
    endif()
    message(STATUS "libamp feature: CUDA not found, CPU backend only")
  endif()
else()
  message(STATUS "libamp feature: CUDA disabled (AMP_CUDA=OFF)")
endif()

# Open MPI (Debian's libopenmpi-dev): DDP's processes, host collectives and NCCL's bootstrap.
find_package(MPI REQUIRED COMPONENTS C)
list(APPEND AMP_PRIVATE_LIBS MPI::MPI_C)
message(STATUS "libamp feature: MPI ${MPI_C_VERSION} (DDP: host collectives, NCCL bootstrap)")
