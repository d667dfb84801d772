# `cmake --install` puts headers, both libraries and a package config, so a user's project can
# find_package(amp) and link amp::amp (shared) or amp::amp_static (tests/install builds such a
# project against a scratch prefix).
include(CMakePackageConfigHelpers)

# The installed shared library must still find the libraries it was linked against when they live
# outside the loader's default path (CUDA, cuDNN, NCCL under /usr/local/cuda).
set_target_properties(amp PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

# nvcc compiles .cu host code as C++: the static archive then needs the C++ runtime, which a C-only
# user project does not link by itself (undefined __gxx_personality_v0). The shared library
# already records it as a dependency.
if(AMP_HAVE_CUDA)
  target_link_libraries(amp_static PRIVATE stdc++)
endif()

install(TARGETS amp amp_static EXPORT ampTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/amp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ampTargets NAMESPACE amp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)

# amp::amp_static's exported INTERFACE_LINK_LIBRARIES name the imported targets of its private
# dependencies ($<LINK_ONLY:DNNL::dnnl>, ...), which exist in a user's project only after the
# matching find_package. Derive the find_dependency calls from AMP_PRIVATE_LIBS so the config
# follows cmake/AmpDependencies.cmake. Plain names (m) and absolute paths (cuDNN, NCCL) need none.
set(AMP_CONFIG_DEPENDENCIES "")
set(amp_dep_seen "")
foreach(lib IN LISTS AMP_PRIVATE_LIBS)
  if(NOT lib MATCHES "^([A-Za-z0-9_]+)::")
    continue()
  endif()
  set(ns ${CMAKE_MATCH_1})
  if(ns IN_LIST amp_dep_seen)
    continue()
  endif()
  list(APPEND amp_dep_seen ${ns})
  if(ns STREQUAL "DNNL")
    set(call "find_dependency(dnnl CONFIG)")
  elseif(ns STREQUAL "ZLIB")
    set(call "find_dependency(ZLIB)")
  elseif(ns STREQUAL "OpenMP")
    set(call "find_dependency(OpenMP COMPONENTS C)")
  elseif(ns STREQUAL "Threads")
    set(call "find_dependency(Threads)")
  elseif(ns STREQUAL "CUDA")
    set(call "find_dependency(CUDAToolkit)")
  elseif(ns STREQUAL "MPI")
    set(call "find_dependency(MPI COMPONENTS C)")
  else()
    message(FATAL_ERROR "cmake/AmpInstall.cmake: no find_dependency known for ${lib}; add one")
  endif()
  string(APPEND AMP_CONFIG_DEPENDENCIES "${call}\n")
endforeach()

configure_package_config_file(cmake/ampConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/ampConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ampConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ampConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/ampConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)
