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

# cuDNN and NCCL: the CUDA toolkit's folders, as a Debian or NVIDIA installation puts them, or
# NVIDIA's pip wheels (nvidia/cudnn, nvidia/nccl under a Python's site-packages: include/ and lib/
# with versioned names only, libcudnn.so.9, libnccl.so.2), which is where a machine whose cuDNN and
# NCCL came with PyTorch has them. AMP_CUDA_PYTHON_WHEELS=ON looks in python3's wheels first
# (scripts/gpu.sh sets it); the configure line says which was used.
option(AMP_CUDA_PYTHON_WHEELS "Take cuDNN and NCCL from python3's nvidia pip wheels first" OFF)
set(AMP_WHEEL_SITE_DIRS "")
if(AMP_CUDA_PYTHON_WHEELS AND NOT AMP_CUDACPU)
  find_program(AMP_WHEEL_PYTHON NAMES python3 python)
  if(AMP_WHEEL_PYTHON)
    execute_process(COMMAND ${AMP_WHEEL_PYTHON} -c
      "import sys; print(';'.join(p for p in sys.path if p))"
      OUTPUT_VARIABLE AMP_WHEEL_SITE_DIRS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(NOT AMP_WHEEL_SITE_DIRS)
    message(STATUS "libamp: AMP_CUDA_PYTHON_WHEELS: no python3 site-packages found; the toolkit's "
      "cuDNN and NCCL are looked for")
  endif()
endif()

# amp_find_cuda_library(NAME lib header soversion): sets AMP_<NAME>_LIB, AMP_<NAME>_INCLUDE_DIR and
# AMP_<NAME>_FROM (where they came from).
function(amp_find_cuda_library name lib header soversion)
  set(wheel_roots "")
  foreach(dir IN LISTS AMP_WHEEL_SITE_DIRS)
    if(EXISTS "${dir}/nvidia/${lib}/include/${header}")
      list(APPEND wheel_roots "${dir}/nvidia/${lib}")
    endif()
  endforeach()
  set(hints_inc "")
  set(hints_lib "")
  foreach(root IN LISTS wheel_roots)
    list(APPEND hints_inc "${root}/include")
    list(APPEND hints_lib "${root}/lib")
  endforeach()
  find_path(AMP_${name}_INCLUDE_DIR ${header} HINTS ${hints_inc} ${CUDAToolkit_INCLUDE_DIRS})
  find_library(AMP_${name}_LIB NAMES ${lib} lib${lib}.so.${soversion} NAMES_PER_DIR
    HINTS ${hints_lib} ${CUDAToolkit_LIBRARY_DIR})
  set(from "CUDA toolkit or system")
  foreach(root IN LISTS wheel_roots)
    string(FIND "${AMP_${name}_LIB}" "${root}/" at)
    if(at EQUAL 0)
      set(from "pip wheel: ${root}")
    endif()
  endforeach()
  set(AMP_${name}_FROM "${from}" PARENT_SCOPE)
endfunction()

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
    amp_find_cuda_library(CUDNN cudnn cudnn.h 9)
    amp_find_cuda_library(NCCL nccl nccl.h 2)
    if(AMP_CUDNN_LIB AND AMP_CUDNN_INCLUDE_DIR AND AMP_NCCL_LIB AND AMP_NCCL_INCLUDE_DIR)
      set(AMP_HAVE_CUDA ON)
      include_directories(${AMP_CUDNN_INCLUDE_DIR} ${AMP_NCCL_INCLUDE_DIR})
      list(APPEND AMP_PRIVATE_LIBS CUDA::cudart CUDA::cublasLt ${AMP_CUDNN_LIB} ${AMP_NCCL_LIB})
      # The toolkit's folder is one of nvcc's implicit link folders, which CMake leaves out of a
      # CUDA-linked target's run path: without this the programs find libcudart only where the
      # loader's configuration names the toolkit (not so on every machine with a GPU).
      list(APPEND CMAKE_BUILD_RPATH ${CUDAToolkit_LIBRARY_DIR})
      list(APPEND AMP_DEFINITIONS AMP_HAVE_CUDA=1)
      message(STATUS "libamp feature: CUDA ${CUDAToolkit_VERSION} (archs ${CMAKE_CUDA_ARCHITECTURES})")
      message(STATUS "libamp feature: cuBLASLt, cuDNN ${AMP_CUDNN_LIB} (${AMP_CUDNN_FROM}), "
        "NCCL ${AMP_NCCL_LIB} (${AMP_NCCL_FROM})")
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
