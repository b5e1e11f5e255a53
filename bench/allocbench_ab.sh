#!/usr/bin/env bash
# Two builds of pmrt-allocbench side by side (before/after a change to the allocator), every
# test (threadtest, shbench, larson at 1 and 2 threads; prodcon at 2) with unshared frees, the
# two binaries alternating within each round so that both see the same machine state. The
# table gives each binary's median throughput and the median of the per-round ratios new/base.
#
#   bench/allocbench_ab.sh BASE_BINARY NEW_BINARY
#   environment:
#     RUN_SECONDS=3, REPEAT=5, POOL_SIZE=1073741824 (bytes)
#     OUT=FILE   JSON lines (default bench/results/allocbench-ab.jsonl), each with "build"
set -u -o pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: bench/allocbench_ab.sh BASE_BINARY NEW_BINARY" >&2
  exit 2
fi
BASE=$1
NEW=$2
RUN_SECONDS=${RUN_SECONDS:-3}
REPEAT=${REPEAT:-5}
POOL_SIZE=${POOL_SIZE:-1073741824}
OUT=${OUT:-bench/results/allocbench-ab.jsonl}
POOL=${TMPDIR:-/dev/shm}/allocbench-ab.pool
export PMEM_IS_PMEM_FORCE=1

source "$(dirname "$0")/common.sh"
require_executables allocbench_ab.sh "$BASE" "$NEW"
: > "$OUT"
machine_line
echo "# ${RUN_SECONDS}s per run, $REPEAT rounds, pool $POOL_SIZE bytes; JSON lines in $OUT"

for ((round = 1; round <= REPEAT; ++round)); do
  for test in threadtest shbench larson prodcon; do
    for threads in 1 2; do
      [[ $test == prodcon && $threads == 1 ]] && continue
      # Alternate which build runs first, round by round.
      if ((round % 2 == 1)); then order="base new"; else order="new base"; fi
      for build in $order; do
        bin=$BASE
        [[ $build == new ]] && bin=$NEW
        rm -f "$POOL"
        line=$("$bin" --json --allocator pmrt --test "$test" --threads "$threads" \
          --seconds "$RUN_SECONDS" --backend pmem --pool "$POOL" --pool-size "$POOL_SIZE" \
          2>&1 | grep '^{')
        if [[ -z $line ]]; then
          echo "allocbench_ab.sh: $build $test $threads produced no result" >&2
          exit 1
        fi
        echo "${line%\}}, \"build\": \"$build\", \"round\": $round}" >> "$OUT"
      done
    done
  done
done
rm -f "$POOL"

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
key = lambda r: (r["test"], r["threads"])
print("| test | threads | base ops/s | new ops/s | new/base (median of rounds) |")
print("|---|---|---|---|---|")
for k in sorted({key(r) for r in rows}, key=lambda k: (["threadtest", "shbench", "larson", "prodcon"].index(k[0]), k[1])):
    base = {r["round"]: r["ops_per_sec"] for r in rows if key(r) == k and r["build"] == "base"}
    new = {r["round"]: r["ops_per_sec"] for r in rows if key(r) == k and r["build"] == "new"}
    ratios = [new[i] / base[i] for i in base if i in new]
    print(f"| {k[0]} | {k[1]} | {statistics.median(base.values()) / 1e6:.1f} M "
          f"| {statistics.median(new.values()) / 1e6:.1f} M | {statistics.median(ratios):.3f} |")
EOF
