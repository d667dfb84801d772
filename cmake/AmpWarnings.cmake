# -Wall -Wextra -Werror on our own C code (not on foreign headers or CUDA device code).
# AMP_WERROR=OFF keeps the warnings but not -Werror: for a compiler the project was not tried with
# (scripts/gpu.sh on a lent machine, whose GCC may warn of things this one does not), where a new
# warning should be read in the log rather than stop the build.
option(AMP_WERROR "Treat warnings in libamp's own code as errors" ON)
function(amp_set_warnings target)
  set(flags -Wall -Wextra -Wno-unused-parameter)
  if(AMP_WERROR)
    list(APPEND flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:${flags}>
    $<$<COMPILE_LANGUAGE:CXX>:${flags}>)
endfunction()
