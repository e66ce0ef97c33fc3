#!/bin/sh
# A --precision bf16 run on a CPU without AVX512-BF16 (here: the ISA ceiling
# held to avx2, or scalar where the CPU lacks AVX2) must say that bf16 has no
# speed benefit, and its start-up note must agree with the GEMM rates the same
# banner prints: "expect this run to be slower" exactly when the bf16 GEMM
# measured under 0.9x the fp32 GEMM's rate on the model's shapes; either way
# it quotes that ratio.
# usage: bf16_note.sh RINGPIPE WORKDIR
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
isa=avx2
grep -qw avx2 /proc/cpuinfo 2>/dev/null || isa=scalar
log=$work/train.log
RINGPIPE_ISA=$isa timeout 120 "$ringpipe" train --layers 2 --channels 64 --heads 2 --seq 32 \
  --batch 2 --steps 1 --eval-every 0 --sample-tokens 0 --threads 2 --precision bf16 \
  --out "$work/run" >"$log" 2>&1 || { echo "FAIL: the run failed"; tail -5 "$log"; exit 1; }
note=$(grep "note: bf16 has no speed benefit here: no AVX512-BF16" "$log" || true)
[ -n "$note" ] || { echo "FAIL: no 'bf16 has no speed benefit' note at the $isa ceiling"; cat "$log"; exit 1; }
# The banner's measured rates (printed only when the bf16 GEMM is the slower
# one), to one decimal: the ratio from them may differ from the note's (taken
# from the unrounded rates) by about 0.01, and within that of the 0.9
# threshold either wording is right.
rates=$(sed -n "s/.*measured bf16 GEMM peak on the model's shapes: \([0-9.]*\) GFLOP\/s ([^)]*), below the fp32 GEMM's \([0-9.]*\) GFLOP\/s.*/\1 \2/p" "$log")
ratio=$(echo "${rates:-1 1}" | awk '{printf "%.4f", $1 / $2}')
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(d < 0.012 && d > -0.012) }'; }
# The note quotes the measured ratio either way; it must be the banner's.
quoted=$(echo "$note" | sed -n "s/.*measured \([0-9.]*\)x the fp32 GEMM's rate.*/\1/p")
if [ -n "$rates" ] && { [ -z "$quoted" ] || ! near "$quoted" "$ratio"; }; then
  echo "FAIL: the note's ratio '$quoted' is not the banner's $ratio"; echo "$note"; exit 1
fi
case "$note" in
  *"expect this run to be slower"*)
    [ -n "$quoted" ] || { echo "FAIL: the note says slower without the measured ratio"; echo "$note"; exit 1; }
    awk -v r="$ratio" 'BEGIN { exit !(r < 0.912) }' ||
      { echo "FAIL: the note says slower, the banner's rates give $ratio"; echo "$note"; exit 1; } ;;
  *"expect no gain over --precision fp32"*)
    awk -v r="$ratio" 'BEGIN { exit !(r > 0.888) }' ||
      { echo "FAIL: the bf16 GEMM measured ${ratio}x fp32's, the note does not say slower"; echo "$note"; exit 1; } ;;
  *) echo "FAIL: the note says neither 'no gain' nor 'slower'"; echo "$note"; exit 1 ;;
esac
echo "ok: $isa ceiling: ${note#*note: }"
