# `cmake --install` puts headers, both libraries and a package config, so a user's project can
# find_package(amp) and link amp::amp (tests/install builds such a project).
include(CMakePackageConfigHelpers)
install(TARGETS amp amp_static EXPORT ampTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/amp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT ampTargets NAMESPACE amp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)
configure_package_config_file(cmake/ampConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/ampConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ampConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ampConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/ampConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/amp)
