#!/usr/bin/env bash
# bench/emulated_cpus.sh as a test: a portable build of this source tree in
# BUILD_DIR, run under QEMU's models of an AVX2-only Zen 3, a Haswell and a
# Westmere without AVX (CPU detection against glibc's, the dispatch tests, a
# short training run, an OpenBLAS core above the CPU refused with status 2).
# Skipped (77) without Debian's qemu-user, which .ci/run installs.
# Usage: emulated_cpus.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  echo "skipped: qemu-x86_64 not found (Debian's qemu-user): the emulated-CPU checks did not run"
  exit 77
fi
BUILD=$build exec "$src/bench/emulated_cpus.sh"
