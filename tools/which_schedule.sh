#!/bin/sh
# The "which schedule should I use" table of docs/pipeline.md, generated from
# the advisor (ringpipe sim --advise) for a few pipelines, cost ratios and
# memory limits. Prints markdown.
# usage: tools/which_schedule.sh [RINGPIPE] ["EXTRA_COSTS"]
#   EXTRA_COSTS: more tF,tB,tW sets, e.g. a real run's measured ratio
set -eu
ringpipe=${1:-build/ringpipe}
costs="20,40,20 20,50,15 ${2:-}"
# sizes per micro-batch and rank share, as a GPT-2-like chunk has them: the W
# stash about 0.6 of the activations (measured ratio in bench/pipeline_bubble.sh)
sizes="--act-mib 10 --wstash-mib 6 --msg-mib 0.25"
echo "| p | tF,tB,tW | memory limit | choice (schedule, v, m) | predicted bubble | runner-up and why it loses |"
echo "|---|---|---|---|---|---|"
for p in 4 8; do
  for c in $costs; do
    for like in "" zb-h1 1f1b; do
      out=$("$ringpipe" sim --advise --pp "$p" --layers 16 --microbatches 16 --max-m 16 \
        --costs "$c" $sizes ${like:+--memory-like "$like"} --top 2)
      first=$(echo "$out" | awk '$1 == "1" { print $2 " v" $3 " m=" $4 "|" $6 }')
      second=$(echo "$out" | awk '$1 == "2" { s = $2 " v" $3 " m=" $4 ": "; for (i = 9; i <= NF; i++) s = s $i " "; print s }')
      limit=none
      [ -z "$like" ] || limit="what $like plans"
      echo "| $p | $c | $limit | ${first%%|*} | ${first#*|} | ${second:--} |"
    done
  done
done
