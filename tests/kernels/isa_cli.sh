#!/bin/sh
# The instruction-set ceiling from the command line: RINGPIPE_ISA and --isa at
# every level this machine allows show up in `ringpipe train`'s start-up line;
# an unknown name, a missing value and a level above the CPU exit with status 2
# and one message naming the value and the valid ones, on one rank and on two
# (no rank hangs).
# usage: isa_cli.sh RINGPIPE WORKDIR
set -eu
ringpipe=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
tiny="--layers 1 --channels 32 --heads 2 --seq 16 --steps 0 --eval-every 0 --sample-tokens 0
      --measure-peak=0 --threads 1"
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# prints the instruction-set line of a zero-step run (env: RINGPIPE_ISA as given)
isa_line() { "$ringpipe" train $tiny --out "$work/run" "$@" | grep 'instruction sets:'; }

# expect_error WHAT NEEDLE CMD...: status 2, NEEDLE and the valid names on stderr
expect_error() {
  what=$1 needle=$2
  shift 2
  set +e
  "$@" >"$work/out" 2>"$work/err"
  rc=$?
  set -e
  if [ "$rc" -ne 2 ]; then bad "$what: status $rc, want 2"; fi
  grep -q -- "$needle" "$work/err" || bad "$what: no '$needle' in: $(cat "$work/err")"
  n=$(grep -c 'error:' "$work/err" || true)
  [ "$n" -eq 1 ] || bad "$what: $n error lines, want 1"
  echo "$what -> status $rc: $(grep 'error:' "$work/err" | head -1)"
}

line=$(RINGPIPE_ISA= isa_line)
echo "default: $line"
cpu=$(echo "$line" | sed 's/.*cpu \([a-z0-9]*\),.*/\1/')
echo "$line" | grep -q "ceiling $cpu (cpu)" || bad "default ceiling is not the CPU's"
# a ceiling given to the whole suite (RINGPIPE_ISA=avx2 meson test) caps the
# levels this script runs too
outer=${RINGPIPE_ISA:-}
above=""
for level in scalar avx2 avx512 avx512bf16 amx; do
  if [ "$above" = outer ]; then
    echo "skipped: RINGPIPE_ISA=$level (above the suite's RINGPIPE_ISA=$outer)"
    continue
  fi
  if [ -n "$above" ]; then
    expect_error "RINGPIPE_ISA=$level above the CPU" "does not have" \
      env RINGPIPE_ISA=$level "$ringpipe" train $tiny --out "$work/run"
    continue
  fi
  l=$(RINGPIPE_ISA=$level isa_line)
  echo "RINGPIPE_ISA=$level: $l"
  echo "$l" | grep -q "ceiling $level (RINGPIPE_ISA)" || bad "RINGPIPE_ISA=$level not in force"
  # flash attention's bf16 products need avx512bf16 (rp_flash_bf16_active)
  case $level in
    avx512bf16 | amx) echo "$l" | grep -q 'vdpbf16ps products' ||
                        bad "RINGPIPE_ISA=$level: flash bf16 products not named" ;;
    *) if echo "$l" | grep -q 'vdpbf16ps products'; then
         bad "RINGPIPE_ISA=$level: flash bf16 products named below avx512bf16"
       fi ;;
  esac
  # GELU and the cross-entropy rows name the table they run at that level
  case $level in scalar) rows=c ;; avx2) rows=avx2 ;; *) rows=avx512 ;; esac
  echo "$l" | grep -q "GELU $rows, cross-entropy rows $rows;" ||
    bad "RINGPIPE_ISA=$level: GELU and cross-entropy rows not named $rows"
  l=$(RINGPIPE_ISA= isa_line --isa "$level")
  echo "$l" | grep -q "ceiling $level (--isa)" || bad "--isa $level not in force"
  [ "$level" = "$cpu" ] && above=yes
  [ "$level" = "$outer" ] && above=outer
done
[ -n "$above" ] || bad "the CPU's level '$cpu' is not a known level"
if [ "$cpu" = amx ]; then echo "skipped: a level above the CPU (this CPU runs every level)"; fi

expect_error "RINGPIPE_ISA=avx9" "'avx9'.*scalar|avx2|avx512|avx512bf16|amx" \
  env RINGPIPE_ISA=avx9 "$ringpipe" train $tiny --out "$work/run"
expect_error "--isa AVX2" "'AVX2'.*scalar|avx2|avx512|avx512bf16|amx" \
  env RINGPIPE_ISA= "$ringpipe" train $tiny --out "$work/run" --isa AVX2
expect_error "--isa without a value" "needs a value" \
  env RINGPIPE_ISA= "$ringpipe" train $tiny --out "$work/run" --isa
expect_error "two ranks, RINGPIPE_ISA=bogus" "'bogus'" \
  timeout 60 mpirun -n 2 --oversubscribe --bind-to none -x RINGPIPE_ISA=bogus \
  "$ringpipe" train $tiny --out "$work/run2"
[ "$fails" -eq 0 ]
