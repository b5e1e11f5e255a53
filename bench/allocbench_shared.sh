#!/usr/bin/env bash
# Shared frees (Heap::Free: every block waits for its grace period) against unshared ones
# (Heap::FreeUnshared: a block of the running epoch is reused at once) in a 256 MiB pool, on
# every allocbench test: throughput, process CPU and the heap's footprint at the end, in one run
# (docs/performance.md, "Shared frees"). Each round runs both modes back to back; the table
# gives the medians and the median of the per-round ratios.
#
#   bench/allocbench_shared.sh [BINARY]
#     BINARY   default build/release/bench/pmrt-allocbench
#   environment:
#     RUN_SECONDS=3, REPEAT=3, POOL_SIZE=268435456 (bytes)
#     OUT=FILE   JSON lines (default bench/results/allocbench-shared.jsonl)
set -u -o pipefail

BIN=${1:-build/release/bench/pmrt-allocbench}
RUN_SECONDS=${RUN_SECONDS:-3}
REPEAT=${REPEAT:-3}
POOL_SIZE=${POOL_SIZE:-268435456}
OUT=${OUT:-bench/results/allocbench-shared.jsonl}
POOL=${TMPDIR:-/dev/shm}/allocbench-shared.pool
export PMEM_IS_PMEM_FORCE=1

if [[ ! -x "$BIN" ]]; then
  echo "allocbench_shared.sh: $BIN not found; build it first (cmake --preset release)" >&2
  exit 2
fi
: > "$OUT"
echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# ${RUN_SECONDS}s per run, $REPEAT rounds, pool $POOL_SIZE bytes; JSON lines in $OUT"

for ((round = 1; round <= REPEAT; ++round)); do
  for test in threadtest shbench larson prodcon; do
    for threads in 1 2; do
      [[ $test == prodcon && $threads == 1 ]] && continue
      for mode in unshared shared; do
        rm -f "$POOL"
        line=$("$BIN" --json --allocator pmrt --test "$test" --threads "$threads" \
          --seconds "$RUN_SECONDS" --backend pmem --pool "$POOL" --pool-size "$POOL_SIZE" \
          --pmrt-free "$mode" 2>&1 | grep '^{')
        if [[ -z "$line" ]]; then
          echo "  no result: $test $threads $mode" >&2
          continue
        fi
        echo "$line" | python3 -c "
import json, sys
r = json.loads(sys.stdin.read()); r['pmrt_free'] = '$mode'; print(json.dumps(r))" >> "$OUT"
      done
    done
  done
done
rm -f "$POOL"

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
runs = {}
for r in rows:
    runs.setdefault((r["test"], r["threads"], r["pmrt_free"]), []).append(r)
print("\n| test | T | unshared Mops/s | shared Mops/s | shared/unshared (min-max) | "
      "footprint unshared / shared | advances unshared / shared |")
print("|---|---|---|---|---|---|---|")
for t, n in [("threadtest", 1), ("threadtest", 2), ("shbench", 1), ("shbench", 2),
             ("larson", 1), ("larson", 2), ("prodcon", 2)]:
    u, s = runs.get((t, n, "unshared"), []), runs.get((t, n, "shared"), [])
    if not u or not s:
        print(f"| {t} | {n} | missing | | | | |")
        continue
    # Process CPU for all but prodcon (its consumer spins on an empty queue): wall.
    k = "ops_per_sec" if t == "prodcon" else "ops_per_cpu_sec"
    ratios = [b[k] / a[k] for a, b in zip(u, s)]
    med = lambda xs: statistics.median(xs)
    print(f"| {t}{' (wall)' if t == 'prodcon' else ''} | {n} | {med([x[k] for x in u]) / 1e6:.1f} | "
          f"{med([x[k] for x in s]) / 1e6:.1f} | {med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
          f"{med([x['heap_footprint_mib'] for x in u]):.0f} / {med([x['heap_footprint_mib'] for x in s]):.0f} MiB | "
          f"{med([x['epoch_advances'] for x in u]):.0f} / {med([x['epoch_advances'] for x in s]):.0f} |")
EOF
