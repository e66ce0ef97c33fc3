#!/bin/sh
# `ringpipe bench gemm` on a tiny model: the mode lines bench/vs_torch.sh reads,
# and the per-shape table: a forward and a backward row for each matmul of a
# layer and the LM head, every mode's rate a number, the path auto takes named;
# at the scalar ceiling (no own kernel) the own column is "-" and auto never
# runs own.
# usage: bench_gemm_cli.sh RINGPIPE WORKDIR
set -eu
ringpipe=$1 work=$2
# shellcheck source=tests/cli_prelude.sh
. "$(dirname "$0")/../cli_prelude.sh"
positive() { awk -v v="$1" 'BEGIN { exit !(v + 0 == v && v > 0) }'; }
model="--layers 1 --channels 64 --heads 2 --seq 32 --batch 2 --threads 2"

# check_table FILE OWN_WANTED: the ten rows, their numbers and auto's path
check_table() {
  file=$1 own_wanted=$2
  for name in qkv "attn proj" fc "fc proj" "lm head"; do
    for pass in forward backward; do
      row=$(grep -E "^  $name +[0-9]+ x [0-9]+ +$pass " "$file" || true)
      [ -n "$row" ] || { bad "$file: no $pass row for $name"; continue; }
      # after the pass: blas split own auto, auto's path, auto/best, auto/fma
      rest=$(echo "$row" | sed "s/^  $name *[0-9]* x [0-9]* *$pass//")
      read -r blas split own_rate auto path best fma extra <<EOT
$rest
EOT
      if [ -z "$fma" ] || [ -n "$extra" ]; then
        bad "$file: $name $pass: want 7 fields after the pass: $row"
        continue
      fi
      for v in "$blas" "$split" "$auto" "$best"; do
        positive "$v" || bad "$file: $name $pass: '$v' is not a positive number: $row"
      done
      # no FMA probe without SIMD: "-" there
      [ "$fma" = - ] && [ "$own_wanted" = no ] || positive "$fma" ||
        bad "$file: $name $pass: FMA fraction '$fma': $row"
      case $path in own | split | blas) ;; *) bad "$file: $name $pass: auto's path '$path'" ;; esac
      if [ "$own_wanted" = yes ]; then
        positive "$own_rate" || bad "$file: $name $pass: own rate '$own_rate'"
      else
        [ "$own_rate" = - ] || bad "$file: $name $pass: own rate '$own_rate' at a ceiling without its kernel"
        [ "$path" != own ] || bad "$file: $name $pass: auto runs own without its kernel"
      fi
    done
  done
  grep -q '^  noise: auto over the mode whose path it runs' "$file" || bad "$file: no noise line"
}

# at the machine's own ceiling, as bench/vs_torch.sh runs it (the scalar run
# below has no FMA probe, so no fraction on its mode lines)
# shellcheck disable=SC2086
env -u RINGPIPE_ISA "$ringpipe" bench gemm $model >"$work/out" 2>"$work/err" || bad "bench gemm: status $? ($(cat "$work/err"))"
cat "$work/out"
# the line format bench/vs_torch.sh's gemm_line parses
for mode in blas split; do
  grep -Eq "^  $mode .* [0-9.]+ GFLOP/s  \([0-9.]+ of the FMA peak\)$" "$work/out" || bad "no parsable '$mode' line"
done
own=no
grep -Eq '^  own .* [0-9.]+ GFLOP/s  \([0-9.]+ of the FMA peak\)$' "$work/out" && own=yes
check_table "$work/out" "$own"

# shellcheck disable=SC2086
RINGPIPE_ISA=scalar "$ringpipe" bench gemm $model >"$work/scalar" 2>"$work/err" ||
  bad "bench gemm under RINGPIPE_ISA=scalar: status $? ($(cat "$work/err"))"
check_table "$work/scalar" no

finish bench_gemm_cli
