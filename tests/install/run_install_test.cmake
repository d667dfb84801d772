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
if(NOT AMP_LIBDIR)
  set(AMP_LIBDIR lib)
endif()
set(libdir ${prefix}/${AMP_LIBDIR})
foreach(f include/amp/amp.h bin/amp-train bin/amp-bench share/amp/pytorch_reference.py
    ${AMP_LIBDIR}/pkgconfig/amp.pc ${AMP_LIBDIR}/cmake/amp/ampConfig.cmake
    ${AMP_LIBDIR}/cmake/amp/ampStaticTargets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install_consumer: ${prefix}/${f} was not installed")
  endif()
endforeach()
# The installed amp-bench finds the installed script: its --help names it, and a --compare-torch
# run would use it.
step("amp-bench --help" ${prefix}/bin/amp-bench --help)

# Only the scratch prefix is searched for amp, so a system-wide install cannot satisfy the test.
step("configure consumer" ${CMAKE_COMMAND} -S ${AMP_CONSUMER_SOURCE} -B ${consumer_build}
  -G ${AMP_GENERATOR} -DCMAKE_C_COMPILER=${AMP_C_COMPILER} -DCMAKE_BUILD_TYPE=${AMP_BUILD_TYPE}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build} --config ${AMP_BUILD_TYPE})

function(run_exe path)
  if(NOT EXISTS ${path})
    get_filename_component(dir ${path} DIRECTORY)
    get_filename_component(name ${path} NAME)
    set(path ${dir}/${AMP_BUILD_TYPE}/${name})
  endif()
  execute_process(COMMAND ${path} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${path} exited with ${rc}")
  endif()
endfunction()
run_exe(${consumer_build}/consumer)
run_exe(${consumer_build}/consumer_static)

# A machine without the dependencies' development packages: the shared library alone.
set(shared_build ${AMP_WORK_DIR}/consumer-shared-build)
step("configure consumer without dependencies" ${CMAKE_COMMAND} -S ${AMP_CONSUMER_SOURCE}
  -B ${shared_build} -G ${AMP_GENERATOR} -DCMAKE_C_COMPILER=${AMP_C_COMPILER}
  -DCMAKE_BUILD_TYPE=${AMP_BUILD_TYPE} -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DAMP_CONSUMER_SHARED_ONLY=ON)
step("build consumer without dependencies" ${CMAKE_COMMAND} --build ${shared_build}
  --config ${AMP_BUILD_TYPE})
run_exe(${shared_build}/consumer)
# ... where asking for the static library fails, naming what is missing.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${AMP_CONSUMER_SOURCE} -B ${AMP_WORK_DIR}/ask-static
  -G ${AMP_GENERATOR} -DCMAKE_C_COMPILER=${AMP_C_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DAMP_CONSUMER_SHARED_ONLY=ON -DAMP_CONSUMER_ASK_STATIC=ON
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "amp")
  message(FATAL_ERROR "install_consumer: COMPONENTS static without its dependencies configured "
    "(${rc}):\n${out}\n${err}")
endif()
message(STATUS "install_consumer: COMPONENTS static without dependencies fails: ok")

# pkg-config: the shared library, and the archive with --static's private libraries.
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} ${libdir}/pkgconfig)
  foreach(mode shared static)
    set(args --cflags --libs amp)
    if(mode STREQUAL "static")
      set(args --static ${args})
    endif()
    execute_process(COMMAND ${PKG_CONFIG} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE flags
      ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "install_consumer: pkg-config ${args} failed: ${err}")
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    if(mode STREQUAL "static")
      list(TRANSFORM flags REPLACE "^-lamp$" "${libdir}/libamp.a")
    endif()
    set(exe ${AMP_WORK_DIR}/consumer_pc_${mode})
    # A sanitized build's library needs the sanitizer runtimes in what links it (the package
    # config carries them; a pkg-config file for an installed library should not).
    step("cc with pkg-config ${args}" ${AMP_C_COMPILER} ${AMP_EXTRA_LINK_FLAGS}
      ${AMP_CONSUMER_SOURCE}/main.c ${flags} -Wl,-rpath,${libdir} -o ${exe})
    run_exe(${exe})
  endforeach()
else()
  message(STATUS "install_consumer: no pkg-config here: the pkg-config consumers were not built")
endif()
message(STATUS "install_consumer: passed")
