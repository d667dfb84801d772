# AMP_SANITIZE=ON builds everything this project compiles with g++/gcc (library, tests, cudacpu
# tests, examples, benchmarks) under AddressSanitizer + UndefinedBehaviorSanitizer; any UB report
# is fatal (-fno-sanitize-recover), so it fails the test that hit it. scripts/test_sanitizers.sh
# is the driver. Included before any target, so the directory-scope options reach every target.
#
# The flags are limited to C and C++ by generator expressions: nvcc does not take -fsanitize, so
# the .cu files of the CUDA backend are compiled as usual (their host code is not instrumented,
# the rest of the library is). Every host link gets the flags: a target whose linker language is
# CUDA (libamp and everything linking amp_static, in a CUDA build) is still linked by the host
# g++ (CMAKE_CUDA_HOST_LINK_LAUNCHER); $<HOST_LINK:> keeps them away from an nvcc device-link step.
option(AMP_SANITIZE "Build with -fsanitize=address,undefined (scripts/test_sanitizers.sh)" OFF)

set(AMP_SANITIZE_FLAGS -fsanitize=address -fsanitize=undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)

if(AMP_SANITIZE)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "GNU|Clang" OR NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "AMP_SANITIZE=ON needs gcc/g++ or clang (found ${CMAKE_C_COMPILER_ID})")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${AMP_SANITIZE_FLAGS}>")
  add_link_options("$<HOST_LINK:${AMP_SANITIZE_FLAGS}>")
  message(STATUS "libamp feature: AddressSanitizer + UndefinedBehaviorSanitizer (AMP_SANITIZE=ON)")
endif()

# An installed sanitized libamp needs the sanitizer runtimes in whatever links it (the static
# archive references __asan_*/__ubsan_*; the shared one needs libasan loaded first): the exported
# targets carry the link flags, so find_package(amp) users (tests/install) get them.
function(amp_sanitize_interface target)
  if(AMP_SANITIZE)
    target_link_options(${target} INTERFACE
      "$<INSTALL_INTERFACE:$<HOST_LINK:${AMP_SANITIZE_FLAGS}>>")
  endif()
endfunction()
