# AMP_CUDACPU=ON: the CUDA backend is built against ../shared/cudacpu (see its README) instead of
# libcudart, cuBLASLt, cuDNN and NCCL, so amp_backend_cuda() answers on a machine without a GPU and
# every test and amp-train can run the CUDA backend on the CPU. nvcc is not needed: each .cu file
# is rewritten by cuda_launch_rewrite.py (`k<<<...>>>(...)` -> cudacpu::launch_n) and compiled as
# C++ by g++ with `-include cudacpu.h`; the .c files of kernels/cuda compile as C against NVIDIA's
# headers; kernels/cuda/cudacpu_impl.cpp is the one translation unit that defines the runtime and
# the library emulations. Included by cmake/AmpDependencies.cmake in place of the CUDA toolkit
# search; sets what that search sets (AMP_HAVE_CUDA, AMP_DEFINITIONS).
set(AMP_CUDACPU_DIR ${PROJECT_SOURCE_DIR}/../shared/cudacpu CACHE PATH
    "cudacpu's folder (cudacpu.h, cuda_launch_rewrite.py) for AMP_CUDACPU=ON")
if(NOT EXISTS ${AMP_CUDACPU_DIR}/cudacpu.h OR
   NOT EXISTS ${AMP_CUDACPU_DIR}/cuda_launch_rewrite.py)
  message(FATAL_ERROR "AMP_CUDACPU=ON but ${AMP_CUDACPU_DIR} holds no cudacpu.h and "
    "cuda_launch_rewrite.py (set AMP_CUDACPU_DIR)")
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter)

# Only NVIDIA's headers are used (cuda_runtime_api.h, cublasLt.h, cudnn.h, and the
# __half/__nv_bfloat16 host code), never its libraries; found without nvcc.
find_path(AMP_CUDACPU_CUDA_INCLUDE cuda_runtime_api.h
  HINTS $ENV{CUDA_HOME}/include $ENV{CUDA_PATH}/include /usr/local/cuda/include)
find_path(AMP_CUDACPU_CUBLASLT_INCLUDE cublasLt.h HINTS ${AMP_CUDACPU_CUDA_INCLUDE})
find_path(AMP_CUDACPU_CUDNN_INCLUDE cudnn.h HINTS ${AMP_CUDACPU_CUDA_INCLUDE})
if(NOT AMP_CUDACPU_CUDA_INCLUDE OR NOT AMP_CUDACPU_CUBLASLT_INCLUDE
   OR NOT AMP_CUDACPU_CUDNN_INCLUDE)
  message(FATAL_ERROR "AMP_CUDACPU=ON needs the CUDA, cuBLASLt and cuDNN headers "
    "(cuda_runtime_api.h, cublasLt.h, cudnn.h; set CUDA_HOME)")
endif()
set(AMP_CUDACPU_INCLUDE_DIRS ${AMP_CUDACPU_CUDA_INCLUDE} ${AMP_CUDACPU_CUBLASLT_INCLUDE}
    ${AMP_CUDACPU_CUDNN_INCLUDE})
list(REMOVE_DUPLICATES AMP_CUDACPU_INCLUDE_DIRS)
# Tests include the backend's internal header (kernels/cuda/cuda_backend.h), which includes
# cuda_runtime_api.h; in the real-CUDA build CUDA::cudart carries this folder, here nothing does.
include_directories(SYSTEM ${AMP_CUDACPU_INCLUDE_DIRS})

# NCCL's emulation runs over MPI: kernels/cuda/cudacpu_impl.cpp includes <mpi.h> (MPI::MPI_C,
# linked by the library, brings the include folder; OMPI_SKIP_MPICXX keeps Open MPI's C++
# bindings out, which would need libmpi_cxx). cudacpu_nccl.h and cudacpu_cudnn.h both bring a
# `t_last_error` into the global scope; cudacpu_impl.cpp renames NCCL's with a macro.
find_path(AMP_CUDACPU_NCCL_INCLUDE nccl.h HINTS ${AMP_CUDACPU_CUDA_INCLUDE})
if(NOT AMP_CUDACPU_NCCL_INCLUDE)
  message(FATAL_ERROR "AMP_CUDACPU=ON needs NCCL's header nccl.h (set CUDA_HOME)")
endif()
list(APPEND AMP_CUDACPU_INCLUDE_DIRS ${AMP_CUDACPU_NCCL_INCLUDE})

set(AMP_HAVE_CUDA ON)
list(APPEND AMP_DEFINITIONS AMP_HAVE_CUDA=1 AMP_CUDACPU=1)
message(STATUS "libamp feature: CUDA backend on the CPU through cudacpu (AMP_CUDACPU=ON, "
  "${AMP_CUDACPU_DIR}; headers ${AMP_CUDACPU_CUDA_INCLUDE})")
message(STATUS "libamp feature: cuBLASLt, cuDNN and NCCL (over MPI) emulated by cudacpu")

# Appends the CUDA backend's sources, as the cudacpu build compiles them, to out_var: the .cu
# files rewritten into the build tree, the .c files as they are, and cudacpu_impl.cpp. The source
# properties set here hold in the calling directory, where the library target must be made.
function(amp_cudacpu_sources out_var)
  file(GLOB cu_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu)
  file(GLOB c_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cuda/*.c)
  set(sources ${c_files} ${PROJECT_SOURCE_DIR}/kernels/cuda/cudacpu_impl.cpp)
  file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/cudacpu_kernels)
  foreach(cu ${cu_files})
    get_filename_component(name ${cu} NAME_WE)
    set(out ${PROJECT_BINARY_DIR}/cudacpu_kernels/${name}.cpu.cpp)
    add_custom_command(OUTPUT ${out}
      COMMAND ${Python3_EXECUTABLE} ${AMP_CUDACPU_DIR}/cuda_launch_rewrite.py ${cu} ${out}
      DEPENDS ${cu} ${AMP_CUDACPU_DIR}/cuda_launch_rewrite.py
      COMMENT "cudacpu: rewriting kernels/cuda/${name}.cu")
    # CUDACPU turns AMP_HD (core/hd.h) into __host__ __device__ for the kernel files only: the C
    # files of the library must not see it.
    set_source_files_properties(${out} PROPERTIES
      COMPILE_DEFINITIONS CUDACPU
      COMPILE_OPTIONS "-include;${AMP_CUDACPU_DIR}/cudacpu.h")
    list(APPEND sources ${out})
  endforeach()
  set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/cuda/cudacpu_impl.cpp PROPERTIES
    COMPILE_DEFINITIONS "CUDACPU_CUBLASLT;CUDACPU_CUDNN;CUDACPU_NCCL;OMPI_SKIP_MPICXX=1;MPICH_SKIP_MPICXX=1")
  set(${out_var} ${${out_var}} ${sources} PARENT_SCOPE)
endfunction()

# The include folders the CUDA backend's files need, on the library's object target. cudacpu's
# own folder is a system one too: its headers are foreign code, kept out of -Werror as NVIDIA's.
function(amp_cudacpu_configure target)
  target_include_directories(${target} SYSTEM PRIVATE ${AMP_CUDACPU_DIR}
    ${AMP_CUDACPU_INCLUDE_DIRS})
endfunction()
