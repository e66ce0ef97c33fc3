# Sourced by the bench scripts: OUT (the first argument, default bench/results)
# and RINGPIPE (default build/ringpipe) as absolute paths, resolved against the
# caller's directory; then the working directory becomes the project root.
# usage: . "$(dirname "$0")/common.sh" "$@"
bench_caller=$(pwd)
# --help prints the calling script's header comment (its usage and knobs); any
# other dash argument is a mistake, not an output directory.
case ${1-} in
  -h|--help)
    sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
  -*)
    echo "$(basename "$0"): unknown option $1; the only argument is the output directory (--help for usage)" >&2
    exit 2 ;;
esac
bench_abs() { case $1 in /*) echo "$1" ;; *) echo "$bench_caller/$1" ;; esac; }
OUT=${1:+$(bench_abs "$1")}
RINGPIPE=${RINGPIPE:+$(bench_abs "$RINGPIPE")}
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench/results}
RINGPIPE=${RINGPIPE:-$PWD/build/ringpipe}

# The checks and set-up the MPI bench scripts share. OPENBLAS_CORETYPE is left
# as the environment has it: forcing a core type the CPU lacks (SkylakeX on an
# AVX2 machine) would end OpenBLAS with an illegal instruction, and ringpipe
# refuses such a setting at start-up with the fix.
bench_need_ringpipe() { # exits 2 with the fix when RINGPIPE is not built
  if [ ! -x "$RINGPIPE" ]; then
    echo "$(basename "$0"): no ringpipe binary at '$RINGPIPE'; build it (meson setup build &&" \
         "ninja -C build) or set RINGPIPE=path/to/ringpipe" >&2
    exit 2
  fi
}
bench_mpi_as_root() { # mpirun refuses root unless told
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
}
# OUT made, and any subfolders of it named as arguments; what it holds is
# machine-specific output, never committed.
# shellcheck disable=SC2120 # the subfolders are optional
bench_out_dir() {
  local d
  mkdir -p "$OUT"
  for d in "$@"; do mkdir -p "$OUT/$d"; done
  [ -f "$OUT/.gitignore" ] || printf '*\n' >"$OUT/.gitignore"
}
