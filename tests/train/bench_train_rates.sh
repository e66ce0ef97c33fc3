#!/bin/sh
# `bench train`'s rates are one rank's: its tokens/s counts every data-parallel
# replica's tokens, while the MFU's GEMM peak and the FMA probe are one rank's,
# so the model FLOP/s it prints per token halves from one rank to two, and the
# FMA line is that rate over the probe it names (one rank alone also prints it
# over the probe run on all its threads at once). Where /proc/stat has the
# hypervisor's steal count, the run says how much of it fell in the measured
# steps: no more than the machine's CPUs had, and the percentage it names.
# usage: bench_train_rates.sh RINGPIPE WORKDIR MPIRUN [MPIRUN ARGS...]
set -u
ringpipe=$1 work=$2
shift 2
mpirun="$*"
# shellcheck source=tests/cli_prelude.sh
. "$(dirname "$0")/../cli_prelude.sh"
small="--layers 1 --channels 128 --heads 2 --seq 64 --batch 4 --steps 4 --threads 1 --measure-peak=0"
# shellcheck disable=SC2086 # $small and $mpirun are word lists
"$ringpipe" bench train $small --out "$work/one" >"$work/one.txt" 2>&1 || bad "one rank: $(tail -2 "$work/one.txt")"
# shellcheck disable=SC2086
timeout 120 $mpirun -n 2 "$ringpipe" bench train $small --out "$work/two" >"$work/two.txt" 2>&1 ||
  bad "two ranks: $(tail -2 "$work/two.txt")"

# FLOPs per token counted in each run's model FLOP/s: its rate over its tokens/s
per_token() {
  awk '/^  tokens\/s: / { tok = $2 }
       /^  model FLOP\/s/ { for (i = 1; i <= NF; i++) if ($i == "GFLOP/s") r = $(i - 1) }
       END { if (tok > 0 && r > 0) printf "%.6g", r * 1e9 / tok }' "$1"
}
one=$(per_token "$work/one.txt")
two=$(per_token "$work/two.txt")
if [ -z "$one" ] || [ -z "$two" ]; then
  bad "no tokens/s or model FLOP/s line (one rank: '$one', two: '$two')"
else
  # printed to 4 significant digits: 1 % apart at most
  awk -v a="$one" -v b="$two" 'BEGIN { q = a / (2 * b); exit !(q > 0.99 && q < 1.01) }' ||
    bad "FLOPs per token: one rank $one, two ranks $two; expected half as many per rank"
fi
grep -q "model FLOP/s (per rank)" "$work/two.txt" || bad "two ranks: no '(per rank)' on the model FLOP/s line"
grep -q "model FLOP/s (per rank)" "$work/one.txt" && bad "one rank: '(per rank)' on the model FLOP/s line"

# the FMA line: the model FLOP/s over the probe it prints (where a probe runs)
for run in one two; do
  awk '/^  model FLOP\/s[^o]*: / { for (i = 1; i <= NF; i++) if ($i == "GFLOP/s") { r = $(i - 1); break } }
       /^  model FLOP\/s over the FMA probe/ {
         match($0, /[0-9.]+ GFLOP\/s\)/); p = substr($0, RSTART, RLENGTH) + 0
         match($0, /: [0-9.]+ \(mean rate\)/); f = substr($0, RSTART + 2, RLENGTH - 2) + 0; seen = 1 }
       END { if (!seen) { print "none"; exit 0 }
             if (p <= 0 || f <= 0) { print "unparsed"; exit 1 }
             q = r / p / f; if (q < 0.97 || q > 1.03) { printf "%g / %g != %g\n", r, p, f; exit 1 }
             print "ok" }' "$work/$run.txt" >"$work/$run.fma" || bad "$run: FMA line: $(cat "$work/$run.fma")"
done
# the line over the probe on all threads at once: one rank alone runs it after
# its steps, beside the FMA line, and it is the model FLOP/s over the rate it
# names; with several ranks none
awk '/^  model FLOP\/s[^o]*: / { for (i = 1; i <= NF; i++) if ($i == "GFLOP/s") { r = $(i - 1); break } }
     /^  model FLOP\/s over the FMA probe/ { fma = 1 }
     /^  model FLOP\/s over the probe on all threads at once/ {
       match($0, /medians, [0-9.]+ GFLOP/); p = substr($0, RSTART + 9, RLENGTH - 14) + 0
       match($0, /: [0-9.]+ \(mean rate\)/); f = substr($0, RSTART + 2, RLENGTH - 2) + 0; seen = 1 }
     END { if (!fma) { print (seen ? "a line without the FMA line" : "none"); exit seen }
           if (!seen) { print "missing"; exit 1 }
           if (p <= 0 || f <= 0) { print "unparsed"; exit 1 }
           q = r / p / f; if (q < 0.97 || q > 1.03) { printf "%g / %g != %g\n", r, p, f; exit 1 }
           print "ok" }' "$work/one.txt" >"$work/one.all" || bad "one rank: all-threads line: $(cat "$work/one.all")"
grep -q "model FLOP/s over the probe on all threads at once" "$work/two.txt" &&
  bad "two ranks: an all-threads probe line (only one rank alone runs it)"
# the steal line: "S s of this machine's N CPUs x W s (P %; ...)"
steal="no /proc/stat"
if [ -r /proc/stat ]; then
  steal=$(awk '/^  hypervisor steal over the measured steps: / {
                 s = $7; n = $12; w = $15; p = $17; sub(/^\(/, "", p); seen = 1 }
               END { if (!seen) { print "missing"; exit 1 }
                     if (n < 1 || w <= 0 || s < 0) { print "unparsed or negative"; exit 1 }
                     if (s > n * w + 0.05) { printf "%g s stolen, more than %d CPUs x %g s\n", s, n, w; exit 1 }
                     q = 100 * s / (n * w); if (q - p > 0.06 || p - q > 0.06) { printf "%g %% printed, %g %% from its figures\n", p, q; exit 1 }
                     printf "%g s of %d x %g s", s, n, w }' "$work/one.txt") || bad "one rank: steal line: $steal"
elif grep -q "hypervisor steal" "$work/one.txt"; then
  bad "a steal line without /proc/stat"
fi
echo "FLOPs per token a rank: $one (one rank), $two (two); FMA lines: $(cat "$work/one.fma") / $(cat "$work/two.fma"); all-threads line: $(cat "$work/one.all"); steal: $steal"
finish "bench train rates"
