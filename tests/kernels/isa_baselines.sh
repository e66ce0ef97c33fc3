#!/bin/sh
# Every kernel source compiles for the CPUs the build machine is not: as
# -march=native does on an AVX2-only CPU (AMD Zen 3: x86-64-v3) and on a
# baseline x86-64 one. The SIMD paths carry their own target attributes, and a
# helper that is always_inline with a wider target than its caller only fails
# where the build's own -march lacks that target: an AVX-512 build machine
# compiles it, a Zen 3 one stops (this happened once, to a bf16 packer). Object
# code goes to /dev/null; only the compiler's verdict counts. Skips (status 77)
# where the compiler cannot target x86-64.
# usage: isa_baselines.sh CC SRCDIR
set -eu
cc=$1 src=$2
case "$(uname -m)" in x86_64) ;; *) echo "isa_baselines: not an x86-64 machine, skipped"; exit 77 ;; esac
fails=0
err=$(mktemp) # one per run: two build trees may test at once
trap 'rm -f "$err"' EXIT
for march in x86-64-v3 x86-64; do
  if ! echo 'int x;' | "$cc" -march=$march -x c -c -o /dev/null - 2>/dev/null; then
    echo "isa_baselines: $cc cannot target -march=$march, skipped"
    exit 77
  fi
  n=0
  for f in "$src"/src/kernels/*.c; do
    flags=""
    # the one file meson builds with the AMX flags (src/kernels/meson.build)
    case "$f" in */gemm_bf16_amx.c) flags="-mamx-tile -mamx-bf16 -mavx512f -mavx512bw -mavx512vl -DRP_BUILD_AMX=1" ;; esac
    if ! "$cc" -std=c11 -O2 -D_GNU_SOURCE -march=$march $flags -I"$src/include" -I"$src/src" \
         -I"$src/src/kernels" -c "$f" -o /dev/null 2>"$err"; then
      echo "FAIL: $(basename "$f") does not compile for -march=$march:"
      head -5 "$err"
      fails=$((fails + 1))
    fi
    n=$((n + 1))
  done
  echo "isa_baselines: -march=$march: $n kernel sources compiled"
done
[ "$fails" -eq 0 ]
