#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install what building and testing flashattn needs on Debian or Ubuntu: a C
# compiler (gcc brings OpenMP's libgomp), CMake, make, pkg-config and SLEEF
# (vector exp for the SIMD CPU kernels; without it only cpu.scalar.f32 builds).
# Installs only the packages that are missing, through apt-get (with sudo
# when not root). --all installs the whole list regardless, as CI does on a
# fresh machine. Elsewhere it only checks for the tools and says what is
# missing.
set -euo pipefail

packages=(cmake make gcc g++ libc6-dev pkg-config libsleef-dev)

all=0
case "${1:-}" in
  --all) all=1 ;;
  "") ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  missing=()
  for tool in cmake make cc pkg-config; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    echo "install-deps: not a Debian/Ubuntu system; please install: ${missing[*]}" >&2
    exit 1
  fi
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ((all)) || ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
      grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
((${#missing[@]})) || exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=
elif command -v sudo >/dev/null 2>&1; then
  sudo=sudo
else
  echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
