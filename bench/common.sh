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
