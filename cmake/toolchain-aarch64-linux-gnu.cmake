# SPDX-License-Identifier: MIT
# Cross-compile for AArch64 Linux with Debian's gcc-aarch64-linux-gnu;
# tests run under qemu-aarch64 (binfmt or CMAKE_CROSSCOMPILING_EMULATOR).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
# Debian multiarch: arm64 -dev packages live under /usr/{include,lib}/aarch64-linux-gnu.
set(CMAKE_LIBRARY_PATH /usr/lib/aarch64-linux-gnu)
set(CMAKE_INCLUDE_PATH /usr/include/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
find_program(FA_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(FA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FA_QEMU_AARCH64})
endif()
