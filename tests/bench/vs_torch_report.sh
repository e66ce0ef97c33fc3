#!/bin/bash
# bench/vs_torch.sh's arithmetic, without PyTorch and without the minutes of
# real runs: a stand-in ringpipe and a stand-in PyTorch virtual environment
# print fixed rates in the two sides' own line formats, and the report must
# give, for each PyTorch variant,
#   - the ratio of the mean rates, median and spread over the rounds;
#   - the ratio of the median steps (each side's "  per step: median" line);
#   - the best round of each side;
# a run without per-step lines (one step) must say it has no median step
# rather than invent one, and an unknown PyTorch variant is refused. The
# attention rounds: SDPA's time over flash's, and ATTN_SECONDS handed to both
# sides' repetitions.
# usage: vs_torch_report.sh SOURCE_ROOT WORKDIR
set -u
root=$1 work=$2
# shellcheck source=tests/cli_prelude.sh
. "$(dirname "$0")/../cli_prelude.sh"
# vs_torch.sh refuses a virtual environment inside the repository, where the
# build directory (and so WORKDIR) lies
venv=$(mktemp -d "${TMPDIR:-/tmp}/vs_torch_venv.XXXXXX")
trap 'rm -rf "$venv"' EXIT
mkdir -p "$venv/bin"

# ringpipe: the round number is counted in a file, so rounds differ. Round r
# prints mean 3000 + 100 r and median step 3300 (the rounds' spread)
cat >"$work/ringpipe" <<EOF
#!/bin/bash
case "\$*" in
  *"--no-measure-peak"*"--steps 1 "*|*"--steps 1 "*"--no-measure-peak"*)
    echo "  instruction sets: cpu fake" ;;
  "bench train"*)
    n=\$((\$(cat "$work/rp_count" 2>/dev/null || echo 0) + 1)); echo \$n >"$work/rp_count"
    echo "  tokens/s: \$((3000 + 100 * n))"
    [ "\${NO_STEP_LINES:-}" ] || echo "  per step: median 3300 tokens/s, slowest 2500, fastest 3400" ;;
  "bench attention"*)
    # the row's fields as \`bench attention\` prints them: T, causal, fwd and f+b
    # ms (5th), ..., the FMA fraction (19th); flash f+b 20 ms causal, 40 not
    T="" cz="" ms=""
    while [ \$# -gt 0 ]; do
      case \$1 in --tmin) T=\$2 ;; --causal) cz=\$2 ;; --min-seconds) ms=\$2 ;; esac; shift
    done
    echo "\$ms" >>"$work/rp_min_seconds"
    fb=\$([ "\$cz" = yes ] && echo 20.00 || echo 40.00)
    echo "  \$T \$cz | 1.00 \$fb | 1 1 | 1 1 | 1 1 1 | 0.80 | 0.750 | 1 1" ;;
  *) exit 0 ;;
esac
EOF
# PyTorch: eager mean 1500, median step 2200; compile mean 2000, median 2000
cat >"$venv/bin/python" <<'EOF'
#!/bin/bash
case "$*" in
  "-c import torch") exit 0 ;;
  *__version__*) echo "2.99-fake" ;;
  *get_cpu_capability*) echo "FAKE" ;;
  *" train "*"--impl eager"*)
    echo "tokens/s: 1500.0"
    [ "${NO_STEP_LINES:-}" ] || echo "  per step: median 2200 tokens/s, slowest 900, fastest 2300" ;;
  *" attention "*)
    # SDPA f+b 30 ms causal, 50 not; its --min-seconds noted
    ms=$(printf '%s\n' "$*" | sed -n 's/.*--min-seconds \([^ ]*\).*/\1/p')
    echo "$ms" >>"$(dirname "$0")/../min_seconds"
    case "$*" in *"--causal 1"*) echo "fb_ms: 30.000" ;; *) echo "fb_ms: 50.000" ;; esac ;;
  *" train "*"--impl compile"*)
    echo "tokens/s: 2000.0"
    [ "${NO_STEP_LINES:-}" ] || echo "  per step: median 2000 tokens/s, slowest 1900, fastest 2100" ;;
  *) exit 1 ;;
esac
EOF
chmod +x "$work/ringpipe" "$venv/bin/python"

run() { # OUT_DIR [env...]: the report's text, or FAIL
  local out=$1; shift
  rm -f "$work/rp_count"
  env "$@" RINGPIPE="$work/ringpipe" TORCH_VENV="$venv" MODELS=default GEMMS="" ATTN_T="" \
    ROUNDS=3 STEPS=4 CHECK_SECONDS=0 bash "$root/bench/vs_torch.sh" "$out" >"$out.log" 2>&1 ||
    bad "vs_torch.sh exited $?: $(tail -3 "$out.log")"
  cat "$out/vs_torch.md" 2>/dev/null
}
has() { # REPORT LINE: LINE must be in the report, whole
  printf '%s\n' "$1" | grep -qxF -- "$2" || bad "report lacks '$2'; it has:
$(printf '%s\n' "$1" | grep -A2 '^ringpipe / torch')"
}

rep=$(run "$work/out")
# the rounds: ringpipe 3100, 3200, 3300 against eager 1500: 2.07x, 2.13x, 2.20x
has "$rep" "ringpipe / torch eager, default, fp32: 2.13x (2.07..2.20)"
has "$rep" "  median step against median step: 1.50x (1.50..1.50)"
has "$rep" "ringpipe / torch compile, default, fp32: 1.60x (1.55..1.65)"
has "$rep" "  median step against median step: 1.65x (1.65..1.65)"
has "$rep" "  best round of each side: 2.20x (ringpipe 3300 / torch eager 1500.0 tokens/s)"
# each round's cells: the mean, then the median step
printf '%s\n' "$rep" | grep -q '^| 2 | 3200 / 3300 | - | - | 1500.0 / 2200 | 2000.0 / 2000 |' ||
  bad "round 2's row lacks 'mean / median step' cells: $(printf '%s\n' "$rep" | grep '^| 2 |')"

rep=$(run "$work/out_nosteps" NO_STEP_LINES=1)
has "$rep" "ringpipe / torch eager, default, fp32: 2.13x (2.07..2.20)"
has "$rep" "  median step against median step: n/a (no round gave both rates)"
printf '%s\n' "$rep" | grep -q '^| 1 | 3100 / - | - | - | 1500.0 / - | 2000.0 / - |' ||
  bad "a run without per-step lines: its cells should read '-': $(printf '%s\n' "$rep" | grep '^| 1 |')"
# attention: the ratios, and ATTN_SECONDS handed to both sides
rm -f "$work/rp_min_seconds" "$venv/min_seconds"
out=$(RINGPIPE="$work/ringpipe" TORCH_VENV="$venv" MODELS="" ATTN_T="1024" ROUNDS=2 \
      CHECK_SECONDS=0 ATTN_SECONDS=1.5 bash "$root/bench/vs_torch.sh" "$work/out_attn" 2>&1) ||
  bad "attention run: status $?: $out"
rep=$(cat "$work/out_attn/vs_torch.md" 2>/dev/null)
has "$rep" "flash vs SDPA, T=1024 causal=yes: 1.50x (1.50..1.50)"
has "$rep" "flash vs SDPA, T=1024 causal=no: 1.25x (1.25..1.25)"
# each of the two rounds runs both masks once a side
got_all() { [ "$(sort -u "$1" 2>/dev/null)" = "$2" ] && [ "$(wc -l <"$1")" -eq 4 ]; }
got_all "$work/rp_min_seconds" 1.5 ||
  bad "ringpipe's attention runs should each get --min-seconds 1.5: $(cat "$work/rp_min_seconds" 2>&1)"
got_all "$venv/min_seconds" 1.5 ||
  bad "SDPA's runs should each get --min-seconds 1.5: $(cat "$venv/min_seconds" 2>&1)"
out=$(ATTN_SECONDS=soon RINGPIPE="$work/ringpipe" TORCH_VENV="$venv" \
      bash "$root/bench/vs_torch.sh" "$work/out_bad" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -q "ATTN_SECONDS=soon: use seconds in 0.01..60" || rc=99
[ "$rc" -eq 2 ] ||
  bad "ATTN_SECONDS=soon: status $rc, want 2 and the range: $out"

# a PyTorch variant it does not know: status 2 and the choices, before any run
out=$(IMPLS="eager compiled" RINGPIPE="$work/ringpipe" TORCH_VENV="$venv" \
      bash "$root/bench/vs_torch.sh" "$work/out_bad" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || bad "IMPLS with 'compiled': status $rc, want 2"
printf '%s\n' "$out" | grep -q "IMPLS has 'compiled': use eager, compile and/or compile-max" ||
  bad "IMPLS with 'compiled': no message naming it and the choices: $out"
finish vs_torch_report
