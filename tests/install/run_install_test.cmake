# Run by ctest (cmake -P): install -> configure the consumer against the prefix -> build -> run.
# Each step must succeed; the first failure stops the test with the step's output.
foreach(var AMP_BUILD_DIR AMP_CONSUMER_SOURCE AMP_WORK_DIR AMP_GENERATOR AMP_C_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT AMP_BUILD_TYPE)
  set(AMP_BUILD_TYPE Release)
endif()

set(prefix ${AMP_WORK_DIR}/prefix)
set(consumer_build ${AMP_WORK_DIR}/consumer-build)
# A fresh prefix each run, so a file the install rules stopped installing cannot hide a failure.
file(REMOVE_RECURSE ${AMP_WORK_DIR})
file(MAKE_DIRECTORY ${AMP_WORK_DIR})

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (${rc})\n${out}\n${err}")
  endif()
  message(STATUS "install_consumer: ${name}: ok")
endfunction()

step("cmake --install" ${CMAKE_COMMAND} --install ${AMP_BUILD_DIR} --prefix ${prefix}
  --config ${AMP_BUILD_TYPE})
foreach(f include/amp/amp.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install_consumer: ${prefix}/${f} was not installed")
  endif()
endforeach()

# Only the scratch prefix is searched for amp, so a system-wide install cannot satisfy the test.
step("configure consumer" ${CMAKE_COMMAND} -S ${AMP_CONSUMER_SOURCE} -B ${consumer_build}
  -G ${AMP_GENERATOR} -DCMAKE_C_COMPILER=${AMP_C_COMPILER} -DCMAKE_BUILD_TYPE=${AMP_BUILD_TYPE}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build} --config ${AMP_BUILD_TYPE})

foreach(exe consumer consumer_static)
  set(path ${consumer_build}/${exe})
  if(NOT EXISTS ${path})
    set(path ${consumer_build}/${AMP_BUILD_TYPE}/${exe})
  endif()
  execute_process(COMMAND ${path} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${exe} exited with ${rc}")
  endif()
endforeach()
message(STATUS "install_consumer: passed")
