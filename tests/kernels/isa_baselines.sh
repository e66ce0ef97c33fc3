#!/bin/sh
# Every kernel source compiles for the CPUs the build machine is not: as
# -march=native does on an AVX2-only CPU (AMD Zen 3: x86-64-v3) and on a
# baseline x86-64 one. The SIMD paths carry their own target attributes, and a
# helper that is always_inline with a wider target than its caller only fails
# where the build's own -march lacks that target: an AVX-512 build machine
# compiles it, a Zen 3 one stops (this happened once, to a bf16 packer). Object
# code goes to /dev/null; only the compiler's verdict counts. Skips (status 77)
# where the compiler cannot target x86-64.
#
# The plain C kernels follow the -march too: kern_util.h's 16-lane partial sums
# are one zmm, two ymm or four xmm vectors by target. tests/kernels/lanes_march.c
# is built for each -march (and the build machine's own) and run where this CPU
# can run it: each build must match the lane definition bit for bit, and all of
# them print the same checksum of their results' bits.
# usage: isa_baselines.sh CC SRCDIR
set -eu
cc=$1 src=$2
case "$(uname -m)" in x86_64) ;; *) echo "isa_baselines: not an x86-64 machine, skipped"; exit 77 ;; esac
fails=0
err=$(mktemp) # one per run: two build trees may test at once
lanes=$(mktemp)
trap 'rm -f "$err" "$lanes"' EXIT
sums=""
# lanes_march built for -march=$1 and run: its checksum joins $sums
lanes_check() {
  if ! "$cc" -std=c11 -O2 -D_GNU_SOURCE -march="$1" -I"$src/include" -I"$src/src" \
       -I"$src/src/kernels" "$src/tests/kernels/lanes_march.c" -o "$lanes" -lm 2>"$err"; then
    echo "FAIL: lanes_march.c does not compile for -march=$1:"
    head -5 "$err"
    fails=$((fails + 1))
    return
  fi
  out=$("$lanes" 2>"$err") && rc=0 || rc=$?
  case $rc in
    0) echo "isa_baselines: -march=$1: $out"; sums="$sums ${out##* }" ;;
    132) echo "isa_baselines: -march=$1: this CPU cannot run it (SIGILL), not run" ;;
    *) echo "FAIL: lanes_march for -march=$1 (status $rc): $out $(cat "$err")"; fails=$((fails + 1)) ;;
  esac
}
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
  lanes_check "$march"
done
lanes_check native
if [ "$(echo "$sums" | tr ' ' '\n' | grep . | sort -u | wc -l)" -gt 1 ]; then
  echo "FAIL: the 16-lane reductions give different bits by -march:$sums"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ]
