# SPDX-License-Identifier: MIT
# Driver of the package.consumer test (cmake -P). Steps:
#   1. bring the library targets of the build tree up to date;
#   2. install the build tree into a scratch prefix under FA_WORK_DIR;
#   3. check that the only headers installed are the public ones;
#   4. configure, build and run project/ with find_package(flashattn);
#   5. compile and run project/main.c with `pkg-config --cflags --libs`
#      (skipped, with a message, when pkg-config is absent).
# Inputs (-D): FA_BUILD_DIR FA_CONFIG FA_LIB_TARGETS (comma-separated)
#   FA_RING (ON when the ring layer is built and installed)
#   FA_WORK_DIR FA_PROJECT_DIR FA_INSTALL_LIBDIR FA_GENERATOR FA_C_COMPILER
#   FA_SANITIZE (comma-separated, may be empty)
cmake_minimum_required(VERSION 3.20)

foreach(_v FA_BUILD_DIR FA_WORK_DIR FA_PROJECT_DIR FA_INSTALL_LIBDIR
        FA_GENERATOR FA_C_COMPILER)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${_v}=... is required")
  endif()
endforeach()

# Run a command; stop the test with its output if it fails. The merged
# stdout/stderr is left in FA_OUT.
function(fa_run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "${what} failed (${rc}):\n  ${cmd}\n${out}")
  endif()
  set(FA_OUT "${out}" PARENT_SCOPE)
endfunction()

set(_config_args)
set(_build_type Release)
if(FA_CONFIG)
  set(_config_args --config ${FA_CONFIG})
  set(_build_type ${FA_CONFIG})
endif()
set(_cflags "")
if(FA_SANITIZE)
  # A sanitized library needs its runtime in the program that loads it.
  set(_cflags "-fsanitize=${FA_SANITIZE} -fno-omit-frame-pointer")
endif()
set(_prefix ${FA_WORK_DIR}/prefix)
set(_cbuild ${FA_WORK_DIR}/build)
file(REMOVE_RECURSE ${FA_WORK_DIR})
file(MAKE_DIRECTORY ${FA_WORK_DIR})

# 1. The test runs after the build: make sure of it.
string(REPLACE "," ";" _targets "${FA_LIB_TARGETS}")
if(NOT _targets)
  message(FATAL_ERROR "no library target was built (FA_BUILD_SHARED and "
                      "FA_BUILD_STATIC are both OFF)")
endif()
message(STATUS "building ${_targets}")
fa_run("building the library" ${CMAKE_COMMAND} --build ${FA_BUILD_DIR}
       --target ${_targets} ${_config_args})

# 2. Install.
message(STATUS "installing into ${_prefix}")
fa_run("cmake --install" ${CMAKE_COMMAND} --install ${FA_BUILD_DIR}
       --prefix ${_prefix} ${_config_args})

# 3. The public headers and nothing else.
file(GLOB_RECURSE _headers RELATIVE ${_prefix} ${_prefix}/*.h)
list(SORT _headers)
set(_want "include/flashattn.h;include/flashattn_version.h")
if(FA_RING)
  set(_want "include/flashattn.h;include/flashattn_ring.h;include/flashattn_version.h")
endif()
if(NOT _headers STREQUAL _want)
  message(FATAL_ERROR "installed headers should be exactly ${_want}, found: "
                      "${_headers}")
endif()

# 4. find_package(flashattn) from a separate project.
message(STATUS "configuring the consumer project (find_package)")
fa_run("configuring the consumer" ${CMAKE_COMMAND}
       -S ${FA_PROJECT_DIR} -B ${_cbuild} -G ${FA_GENERATOR}
       -DCMAKE_C_COMPILER=${FA_C_COMPILER}
       -DCMAKE_BUILD_TYPE=${_build_type}
       -DCMAKE_PREFIX_PATH=${_prefix}
       "-DCMAKE_C_FLAGS=${_cflags}")
file(STRINGS ${_cbuild}/CMakeCache.txt _dir REGEX "^flashattn_DIR:")
string(REGEX REPLACE "^[^=]*=" "" _dir "${_dir}")
file(REAL_PATH "${_dir}" _dir)
file(REAL_PATH "${_prefix}" _real_prefix)
string(FIND "${_dir}/" "${_real_prefix}/" _at)
if(NOT _at EQUAL 0)
  message(FATAL_ERROR "find_package(flashattn) found ${_dir}, not the "
                      "package just installed in ${_prefix}")
endif()
message(STATUS "found flashattn in ${_dir}")
fa_run("building the consumer" ${CMAKE_COMMAND} --build ${_cbuild}
       ${_config_args})

# The project lists the programs it built, one path a line.
file(STRINGS ${_cbuild}/programs-${_build_type}.txt _programs)
foreach(_p IN LISTS _programs)
  get_filename_component(_name ${_p} NAME)
  fa_run("running ${_name}" ${_p})
  string(STRIP "${FA_OUT}" FA_OUT)
  message(STATUS "${_name}: ${FA_OUT}")
endforeach()

# 5. pkg-config.
find_program(_pkg_config NAMES pkg-config pkgconf)
if(NOT _pkg_config)
  message(STATUS "pkg-config not found: skipping the pkg-config half")
  return()
endif()
set(_pc_dir ${_prefix}/${FA_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${FA_INSTALL_LIBDIR}")
  set(_pc_dir ${FA_INSTALL_LIBDIR}/pkgconfig)
endif()
if(DEFINED ENV{PKG_CONFIG_PATH} AND NOT "$ENV{PKG_CONFIG_PATH}" STREQUAL "")
  set(ENV{PKG_CONFIG_PATH} "${_pc_dir}:$ENV{PKG_CONFIG_PATH}")
else()
  set(ENV{PKG_CONFIG_PATH} "${_pc_dir}")
endif()
fa_run("pkg-config --modversion" ${_pkg_config} --modversion flashattn)
string(STRIP "${FA_OUT}" _version)
fa_run("pkg-config --variable=libdir" ${_pkg_config} --variable=libdir
       flashattn)
string(STRIP "${FA_OUT}" _libdir)
fa_run("pkg-config --cflags --libs" ${_pkg_config} --cflags --libs flashattn)
string(STRIP "${FA_OUT}" _pc_flags)
message(STATUS "pkg-config: flashattn ${_version}: ${_pc_flags}")
separate_arguments(_pc_flags UNIX_COMMAND "${_pc_flags}")
separate_arguments(_san_flags UNIX_COMMAND "${_cflags}")
set(_exe ${FA_WORK_DIR}/consumer_pkgconfig)
fa_run("compiling with pkg-config flags" ${FA_C_COMPILER} -std=c11
       ${_san_flags} ${FA_PROJECT_DIR}/main.c ${_pc_flags} -lm
       -Wl,-rpath,${_libdir} -o ${_exe})
fa_run("running consumer_pkgconfig" ${_exe})
string(STRIP "${FA_OUT}" FA_OUT)
message(STATUS "consumer_pkgconfig: ${FA_OUT}")
