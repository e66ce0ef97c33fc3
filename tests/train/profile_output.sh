#!/bin/sh
# `--profile` prints the step profile at the end of `train` and of `bench train`
# (which once accepted the option and printed nothing): every part's row, the
# step's wall row, and ms/step figures that add up to the wall within 5 % (and
# the rounding of each row's two decimals) and the optimizer's fraction of the
# stream rate over its own footprint; where /proc/stat has the
# hypervisor's steal count, a line with what it took over the profiled steps,
# whose seconds are the steps' wall time; and the figure OUT/step_profile.svg,
# whole, with a bar per part and the step's and one per GEMM product, shown in
# the run's report.html.
# With the GEMMs measured (no --measure-peak=0) and a SIMD FMA probe, the
# bound line names their rates at start-up and after the steps and uses the
# better of the two. The GEMM products apart: a row per product and pass,
# their times adding up to the matmul kernels' rows, and where the GEMMs were
# measured, each forward's and backward's rate alone.
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
small="--layers 2 --channels 64 --heads 2 --seq 64 --batch 2 --steps 4 --measure-peak=0"
check() { # $1 = label, $2 = output file
  for part in "GEMM" "attention" "layernorm" "optimizer" "idle / untimed" "step (wall)"; do
    grep -q "^  $part" "$2" || { echo "$1 --profile: no '$part' row"; cat "$2"; exit 1; }
  done
  grep -q '^  by kernel:' "$2" && grep -q '^    fwd matmul' "$2" ||
    { echo "$1 --profile: no per-kernel rows"; cat "$2"; exit 1; }
  grep -q '^step profile (this rank, mean of [1-9][0-9]* steps)' "$2" ||
    { echo "$1 --profile: no profile header"; cat "$2"; exit 1; }
  # the optimizer held to the stream rate over its own footprint
  awk -v label="$1" "/^  the optimizer's stream: / { rate = \$4 }
       /^  optimizer / { got = \$(NF - 3); frac = \$(NF - 1) }
       END { if (rate <= 0 || got <= 0) { printf \"%s --profile: no optimizer stream rate\\n\", label; exit 1 }
             want = got / rate
             if ((frac - want) ^ 2 > (0.01 * want + 0.002) ^ 2) {
               printf \"%s --profile: optimizer at %s of the stream, %s / %s GB/s is %.3f\\n\",
                 label, frac, got, rate, want; exit 1 }
             printf \"%s --profile: optimizer %s GB/s, %s of its own stream %s\\n\", label, got, frac, rate }" "$2"
  awk -v label="$1" '/^  part /{t=1; next} t && /^  step \(wall\)/{wall=$3; t=0; next}
       t && NF > 1 { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { sum += $i; rows++; break } }
       END { slack = 0.05 * wall + 0.005 * rows
             if (wall <= 0 || sum < wall - slack || sum > wall + slack) {
               printf "%s --profile: parts add to %.3f ms against a wall of %.3f\n", label, sum, wall; exit 1 }
             printf "%s --profile: parts %.3f ms of a %.3f ms step\n", label, sum, wall }' "$2"
  if [ -r /proc/stat ]; then
    awk -v label="$1" '/^step profile \(this rank, mean of/ { n = $7 }
         /^  step \(wall\)/ { wall = $3 }
         /^  hypervisor steal over the [0-9]+ steps: / { sn = $5; s = $7; w = $15; seen = 1 }
         END { if (!seen) { printf "%s --profile: no hypervisor steal line\n", label; exit 1 }
               if (sn != n || s < 0 || w < 0 || (w - n * wall / 1000) ^ 2 > (0.01 * w + 0.002) ^ 2) {
                 printf "%s --profile: steal line over %s steps and %s s, the profile %s steps of %s ms\n",
                   label, sn, w, n, wall; exit 1 }
               printf "%s --profile: %s s stolen over %s s of steps\n", label, s, w }' "$2"
  elif grep -q '^  hypervisor steal' "$2"; then
    echo "$1 --profile: a steal line without /proc/stat"; exit 1
  fi
}
# $1 = label, $2 = output file, $3 = 1 when every forward and backward row
# must give its rate alone
products() {
  awk -v label="$1" -v alone="$3" '
    /^    fwd matmul|^    bwd matmul/ { kernels += $(NF - 2) }
    /^  by GEMM product \(/ { t = 1; next }
    t && /^    product / { next }
    t && /^    all products / { all = $3; t = 0; next }
    t && /^    / { rows++
      pass = $(NF - 7); a = $NF
      if (pass != "forward" && pass != "backward" && pass != "dinp" && pass != "dweight") {
        printf "%s --profile: product row with pass %s\n", label, pass; bad = 1 }
      if (alone && (pass == "forward" || pass == "backward") && a !~ /^[0-9.]+$/) {
        printf "%s --profile: %s row without its rate alone: %s\n", label, pass, $0; bad = 1 }
      sum += $(NF - 5) }
    END { if (bad) exit 1
          if (rows < 2 || all == "") { printf "%s --profile: no GEMM product rows\n", label; exit 1 }
          slack = 0.005 * (rows + 2)
          if ((sum - all) ^ 2 > slack ^ 2 || (all - kernels) ^ 2 > (0.02 + 0.001 * all) ^ 2) {
            printf "%s --profile: products %.2f, their total %s, the matmul kernels %.2f ms\n",
              label, sum, all, kernels; exit 1 }
          printf "%s --profile: %d GEMM product rows, %s ms a step as the matmul kernels\n",
            label, rows, all }' "$2"
}
figure() { # $1 = label, $2 = run directory, $3 = output file
  svg="$2/step_profile.svg"
  grep -q "^step profile figure: $svg\$" "$3" || { echo "$1: no figure line for $svg"; exit 1; }
  head -c 5 "$svg" | grep -q '^<svg ' && tail -n 1 "$svg" | grep -q '^</svg>$' ||
    { echo "$1: $svg is not a whole svg"; exit 1; }
  for part in "GEMM" "attention" "layernorm" "optimizer" "idle / untimed" "step (wall)"; do
    grep -q ">$part" "$svg" || { echo "$1: no '$part' bar in $svg"; exit 1; }
  done
  grep -q '>GEMM products (' "$svg" && grep -q '>qkv 64-&gt;192 forward<' "$svg" ||
    { echo "$1: no GEMM product bars in $svg"; exit 1; }
  [ ! -e "$svg.tmp" ] || { echo "$1: $svg.tmp left behind"; exit 1; }
  echo "$1 --profile: figure $svg"
}
# shellcheck disable=SC2086
"$ringpipe" bench train $small --profile --out "$work/bench" > "$work/bench.txt"
check "bench train" "$work/bench.txt"
products "bench train" "$work/bench.txt" 0
figure "bench train" "$work/bench" "$work/bench.txt"
# shellcheck disable=SC2086
"$ringpipe" train $small --eval-every 0 --sample-tokens 0 --quiet --profile --out "$work/run" \
  > "$work/train.txt"
check "train" "$work/train.txt"
products "train" "$work/train.txt" 0
figure "train" "$work/run" "$work/train.txt"
# the run's report shows the figure
grep -q '<h2>Step profile</h2>' "$work/run/report.html" &&
  grep -q '<figure class="profile"><svg ' "$work/run/report.html" ||
  { echo "train --profile: report.html has no step profile figure"; exit 1; }
echo "train --profile: report.html shows the figure"

# the bound line: the GEMMs measured at start-up and again after the steps
"$ringpipe" bench train --layers 2 --channels 64 --heads 2 --seq 64 --batch 2 --steps 4 \
  --profile --out "$work/peak" > "$work/peak.txt"
if grep -q 'no SIMD probe' "$work/peak.txt"; then
  ! grep -q '^  bound:' "$work/peak.txt" ||
    { echo "bench train --profile: a bound line without an FMA probe"; exit 1; }
  echo "bench train --profile: no SIMD probe, no bound line"
else
  rates=$(sed -n 's/^  bound: the GEMMs at the rate they reach alone on hot operands (\([0-9.]*\) GFLOP\/s, [0-9.]* of the FMA peak: the better of \([0-9.]*\) at start-up and \([0-9.]*\) after the steps) and every other part at its quiet time: .*/\1 \2 \3/p' "$work/peak.txt")
  [ -n "$rates" ] || { echo "bench train --profile: no bound line naming both GEMM rates"; cat "$work/peak.txt"; exit 1; }
  echo "$rates" | awk '{ best = $2 > $3 ? $2 : $3
    if ($1 != best || $2 <= 0 || $3 <= 0) { printf "bound uses %s GFLOP/s, the rates were %s and %s\n", $1, $2, $3; exit 1 }
    printf "bench train --profile: bound at %s GFLOP/s, the better of %s and %s\n", $1, $2, $3 }'
  products "bench train (GEMMs measured)" "$work/peak.txt" 1
fi
