# SPDX-License-Identifier: MIT
# Installation: the libraries in FA_LIBRARY_TARGETS, the one public header,
# a CMake package (flashattnConfig.cmake + version file + exported targets,
# namespace flashattn::) and a pkg-config file. Included from the top-level
# CMakeLists.txt after the library targets exist.
#
# Consumers see:
#   flashattn::flashattn         the shared library if installed, else static
#   flashattn::flashattn_static  the static library, when it was built
# The static library's private dependencies (backend libraries such as
# SLEEF, libm, libdl, OpenMP) travel in its exported link interface, so
# linking it needs nothing more.

include(CMakePackageConfigHelpers)

set(FA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/flashattn"
    CACHE STRING "Where flashattnConfig.cmake is installed (relative to the prefix)")
mark_as_advanced(FA_INSTALL_CMAKEDIR)

install(TARGETS ${FA_LIBRARY_TARGETS}
  EXPORT flashattnTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# Only the public header: core/*.h are internal and never installed.
install(FILES ${PROJECT_SOURCE_DIR}/include/flashattn.h
  ${PROJECT_BINARY_DIR}/include/flashattn_version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT flashattnTargets
  NAMESPACE flashattn::
  FILE flashattnTargets.cmake
  DESTINATION ${FA_INSTALL_CMAKEDIR})

# ---- flashattnConfig.cmake ------------------------------------------------
# OpenMP::OpenMP_C sits in the static library's link interface, so the
# package must define it; the shared library carries its own dependency on
# the runtime.
set(FA_CONFIG_NEEDS_OPENMP 0)
if(TARGET flashattn_static AND FA_OPENMP_FOUND)
  set(FA_CONFIG_NEEDS_OPENMP 1)
endif()

# ---- the ring layer and its transports -----------------------------------
# libflashattn-ring (and -mpi / -nccl where built) with flashattn_ring.h, as
# flashattn::ring, flashattn::mpi, flashattn::nccl in their own export file,
# which flashattnConfig.cmake includes when it was installed (with the
# dependencies the transports' link interfaces name: MPI::MPI_C,
# CUDA::cudart).
set(FA_CONFIG_HAS_RING 0)
set(FA_CONFIG_HAS_MPI 0)
set(FA_CONFIG_HAS_NCCL 0)
if(TARGET flashattn_ring)
  set(FA_CONFIG_HAS_RING 1)
  set(_fa_ring_targets flashattn_ring)
  set_target_properties(flashattn_ring PROPERTIES EXPORT_NAME ring)
  target_include_directories(flashattn_ring PUBLIC
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  if(TARGET flashattn_mpi)
    set(FA_CONFIG_HAS_MPI 1)
    list(APPEND _fa_ring_targets flashattn_mpi)
    set_target_properties(flashattn_mpi PROPERTIES EXPORT_NAME mpi)
  endif()
  if(TARGET flashattn_nccl)
    set(FA_CONFIG_HAS_NCCL 1)
    list(APPEND _fa_ring_targets flashattn_nccl)
    set_target_properties(flashattn_nccl PROPERTIES EXPORT_NAME nccl)
  endif()
  install(TARGETS ${_fa_ring_targets}
    EXPORT flashattnRingTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/include/flashattn_ring.h
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT flashattnRingTargets
    NAMESPACE flashattn::
    FILE flashattnRingTargets.cmake
    DESTINATION ${FA_INSTALL_CMAKEDIR})
endif()

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/flashattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/flashattnConfig.cmake
  INSTALL_DESTINATION ${FA_INSTALL_CMAKEDIR}
  NO_CHECK_REQUIRED_COMPONENTS_MACRO)
# 0.x: every minor may break, so find_package(flashattn 0.2) accepts 0.2.*
# only; from 1.0 on, the same major.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_fa_compat SameMinorVersion)
else()
  set(_fa_compat SameMajorVersion)
endif()
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY ${_fa_compat})
install(FILES
  ${PROJECT_BINARY_DIR}/flashattnConfig.cmake
  ${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
  DESTINATION ${FA_INSTALL_CMAKEDIR})

# ---- flashattn.pc -----------------------------------------------------------
# The file finds its prefix from its own location (${pcfiledir}), so the tree
# can be installed with `cmake --install build --prefix DIR` anywhere.
function(_fa_pc_dir out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

set(_fa_pc_install_dir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  # Path from <prefix>/<libdir>/pkgconfig back up to <prefix>.
  file(RELATIVE_PATH _fa_pc_up "/fa_root/${_fa_pc_install_dir}" "/fa_root")
  string(REGEX REPLACE "/$" "" _fa_pc_up "${_fa_pc_up}")
  set(FA_PC_PREFIX "\${pcfiledir}/${_fa_pc_up}")
endif()
_fa_pc_dir(FA_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
_fa_pc_dir(FA_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")

# The link line of the libraries' private dependencies: backend libraries
# (FA_CPU_LIBS: names or full paths, e.g. SLEEF), libm, libdl, OpenMP.
set(_fa_pc_deps)
foreach(_lib IN LISTS FA_CPU_LIBS)
  if(_lib MATCHES "::")
    message(WARNING "flashattn.pc: cannot express target ${_lib}; add it by hand")
  elseif(IS_ABSOLUTE "${_lib}")
    get_filename_component(_dir "${_lib}" DIRECTORY)
    get_filename_component(_name "${_lib}" NAME_WE)
    string(REGEX REPLACE "^lib" "" _name "${_name}")
    list(APPEND _fa_pc_deps -L${_dir} -l${_name})
  else()
    list(APPEND _fa_pc_deps -l${_lib})
  endif()
endforeach()
list(APPEND _fa_pc_deps -lm)
if(CMAKE_DL_LIBS)
  list(APPEND _fa_pc_deps -l${CMAKE_DL_LIBS})
endif()
if(FA_OPENMP_FOUND)
  # The compiler flag (-fopenmp) names the matching runtime for the compiler
  # that links, which a bare -lgomp / -lomp would not.
  list(APPEND _fa_pc_deps ${OpenMP_C_FLAGS})
endif()
list(JOIN _fa_pc_deps " " _fa_pc_deps)
if(TARGET flashattn)
  set(FA_PC_LIBS_PRIVATE "${_fa_pc_deps}")
  set(FA_PC_LIBS_EXTRA "")
else()
  # Only the archive is installed: `pkg-config --libs` must name its deps.
  set(FA_PC_LIBS_PRIVATE "")
  set(FA_PC_LIBS_EXTRA " ${_fa_pc_deps}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/flashattn.pc.in
               ${PROJECT_BINARY_DIR}/flashattn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flashattn.pc
  DESTINATION ${_fa_pc_install_dir})

