# `cmake --install` puts headers, both libraries, amp-train and amp-bench, a package config and a
# pkg-config file, so a user's project can find_package(amp) and link amp::amp (shared) or
# amp::amp_static, or take `pkg-config --cflags --libs amp` (tests/install builds such projects
# against a scratch prefix).
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

# Two export sets: the shared library's needs nothing from a consumer (its dependencies are its
# DT_NEEDED entries and its run path), the static library's names its dependencies as imported
# targets, which only exist after their find_package: the package config loads it only when
# those are found (ampConfig.cmake.in).
install(TARGETS amp EXPORT ampTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS amp_static EXPORT ampStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/amp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# models/'s public headers, spelled amp/models/<name>.h in and out of the tree (CMakeLists.txt).
install(DIRECTORY models/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/amp/models
  FILES_MATCHING PATTERN "*.h")
install(EXPORT ampTargets NAMESPACE amp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)
install(EXPORT ampStaticTargets NAMESPACE amp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)

# amp::amp_static's exported INTERFACE_LINK_LIBRARIES name the imported targets of its private
# dependencies ($<LINK_ONLY:DNNL::dnnl>, ...). Derive the find_package arguments from
# AMP_PRIVATE_LIBS so the config follows cmake/AmpDependencies.cmake. Plain names (m) and
# absolute paths (jansson, cuDNN, NCCL) need none.
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
    set(call "_amp_static_dependency(dnnl dnnl CONFIG)")
  elseif(ns STREQUAL "ZLIB")
    set(call "_amp_static_dependency(ZLIB ZLIB)")
  elseif(ns STREQUAL "OpenMP")
    set(call "_amp_static_dependency(OpenMP OpenMP COMPONENTS C)")
  elseif(ns STREQUAL "Threads")
    set(call "_amp_static_dependency(Threads Threads)")
  elseif(ns STREQUAL "CUDA")
    set(call "_amp_static_dependency(CUDAToolkit CUDAToolkit)")
  elseif(ns STREQUAL "MPI")
    set(call "_amp_static_dependency(MPI MPI COMPONENTS C)")
  else()
    message(FATAL_ERROR "cmake/AmpInstall.cmake: no find_package known for ${lib}; add one")
  endif()
  string(APPEND AMP_CONFIG_DEPENDENCIES "${call}\n")
endforeach()

configure_package_config_file(cmake/ampConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/ampConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ampConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ampConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/ampConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)

# pkg-config: `pkg-config --cflags --libs amp` links the shared library; --static adds what the
# archive needs, as the libraries this build found (Libs.private). The prefix is found from the
# file's own place, so the installed tree can move.
set(AMP_PC_PRIVATE "")
foreach(lib IN LISTS AMP_PRIVATE_LIBS)
  set(flags "")
  if(lib STREQUAL "OpenMP::OpenMP_C")
    set(flags ${OpenMP_C_FLAGS})
  elseif(lib STREQUAL "Threads::Threads")
    set(flags -pthread)
  elseif(lib STREQUAL "MPI::MPI_C")
    set(flags ${MPI_C_LIBRARIES})
  elseif(lib STREQUAL "ZLIB::ZLIB")
    set(flags ${ZLIB_LIBRARIES})
  elseif(TARGET ${lib})
    get_target_property(loc ${lib} IMPORTED_LOCATION_RELWITHDEBINFO)
    foreach(cfg RELEASE NOCONFIG "")
      if(NOT loc)
        if(cfg)
          get_target_property(loc ${lib} IMPORTED_LOCATION_${cfg})
        else()
          get_target_property(loc ${lib} IMPORTED_LOCATION)
        endif()
      endif()
    endforeach()
    if(NOT loc)
      message(FATAL_ERROR "cmake/AmpInstall.cmake: no library file for ${lib} (pkg-config)")
    endif()
    set(flags ${loc})
  elseif(IS_ABSOLUTE "${lib}")
    set(flags ${lib})
  else()
    set(flags -l${lib})
  endif()
  list(APPEND AMP_PC_PRIVATE ${flags})
endforeach()
if(AMP_HAVE_CUDA)
  list(APPEND AMP_PC_PRIVATE -lstdc++)
endif()
list(JOIN AMP_PC_PRIVATE " " AMP_PC_PRIVATE)
file(RELATIVE_PATH AMP_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" AMP_PC_TO_PREFIX "${AMP_PC_TO_PREFIX}")
configure_file(cmake/amp.pc.in ${CMAKE_CURRENT_BINARY_DIR}/amp.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/amp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
