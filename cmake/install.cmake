# Installation (cmake --install build --prefix P): the public headers, libhetcomm.so (SONAME libhetcomm.so.0), the
# tools, the CMake package (find_package(hetcomm CONFIG) -> hetcomm::hetcomm), hetcomm.pc for pkg-config, and the
# Python package where the PyTorch backend was built. Executables find libhetcomm through $ORIGIN/../lib.
# `cpack` in the build folder makes a .deb of the same tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS hetcomm EXPORT hetcommTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hetcomm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(HETCOMM_INSTALLED_TOOLS hetcomm-run hetcomm-topo hetcomm-train hetcomm-plan ${HETCOMM_PERF_TOOLS} p2p_bw p2p_latency)
install(TARGETS ${HETCOMM_INSTALLED_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The cluster emulator and the cluster files hetcomm-run --cluster and the perf tools take.
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/emulate-cluster.sh DESTINATION ${CMAKE_INSTALL_DATADIR}/hetcomm/scripts)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/clusters DESTINATION ${CMAKE_INSTALL_DATADIR}/hetcomm)

set(HETCOMM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hetcomm)
install(EXPORT hetcommTargets NAMESPACE hetcomm:: DESTINATION ${HETCOMM_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hetcommConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/hetcommConfig.cmake INSTALL_DESTINATION ${HETCOMM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hetcommConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hetcommConfig.cmake ${PROJECT_BINARY_DIR}/hetcommConfigVersion.cmake
        DESTINATION ${HETCOMM_CMAKE_DIR})
# hetcomm.pc is written at install time, so it names the prefix given to cmake --install.
install(CODE "
  set(CMAKE_INSTALL_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(CMAKE_INSTALL_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(CMAKE_INSTALL_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/hetcomm.pc.in\"
                 \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/hetcomm.pc\" @ONLY)
")

if(HETCOMM_TORCH_BUILT)
  set(HETCOMM_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING "Where the hetcomm Python package installs")
  install(DIRECTORY ${CMAKE_BINARY_DIR}/python/hetcomm DESTINATION ${HETCOMM_PYTHON_INSTALL_DIR}
          PATTERN "*.so" EXCLUDE PATTERN "__pycache__" EXCLUDE)
  install(TARGETS hetcomm_torch_backend LIBRARY DESTINATION ${HETCOMM_PYTHON_INSTALL_DIR}/hetcomm)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hetcomm)
set(CPACK_PACKAGE_CONTACT "hetcomm developers <hetcomm@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Collective communication for clusters that mix GPU types and network fabrics")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
include(CPack)
