#!/usr/bin/env bash
# The cost of the durable Masstree's value checksums (docs/performance.md, "Value checksums"):
# pmrt-ycsb on the durable tree with checksummed values (layout 2, the default) and
# without (--no-value-checksums, layout 1), interleaved run by run so that both meet the same
# background load; YCSB A and C, uniform and Zipfian 0.99, 1M keys of 8 bytes with 8-byte values
# (the worst case: the 4-byte trailer takes a value object from the 16-byte to the 32-byte
# class), 2 threads, pmem backend on /dev/shm.
#
#   bench/value_checksums_ab.sh [BINARY]
#     BINARY   default build/release/bench/pmrt-ycsb
#   environment: ROUNDS=5 SECONDS_PER_RUN=4 KEYS=1000000 THREADS=2 DISTS="uniform zipf"
#                OUT=FILE (JSON lines, default ${TMPDIR:-/tmp}/value-checksums-YYYYmmdd-HHMMSS.jsonl)
#
# Prints, per workload and distribution, the medians of each side and the median of the per-round
# ratios (on / off), on wall time and on process CPU.
set -u -o pipefail

BIN=${1:-build/release/bench/pmrt-ycsb}
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
KEYS=${KEYS:-1000000}
THREADS=${THREADS:-2}
DISTS=${DISTS:-"uniform zipf"}
OUT=${OUT:-${TMPDIR:-/tmp}/value-checksums-$(date +%Y%m%d-%H%M%S).jsonl}
export PMEM_IS_PMEM_FORCE=1

if [[ ! -x "$BIN" ]]; then
  echo "value_checksums_ab.sh: $BIN not found; build it first (cmake --build build/release --target pmrt-ycsb)" >&2
  exit 2
fi
for ((r = 1; r <= ROUNDS; r++)); do
  for mode in on off; do
    for dist in $DISTS; do
      flag=()
      [[ $mode == off ]] && flag=(--no-value-checksums)
      "$BIN" --workload a,c --dist "$dist" --keys "$KEYS" --seconds "$SECONDS_PER_RUN" \
        --threads "$THREADS" --variant durable "${flag[@]}" --json "$OUT" > /dev/null ||
        { echo "value_checksums_ab.sh: pmrt-ycsb failed" >&2; exit 1; }
    done
  done
done
# Each record names its machine (bench/perf_tables.py shows it beside the table).
"$(dirname "$0")/stamp_cpu.py" "$OUT" > /dev/null
python3 - "$OUT" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("workload dist     metric       on (M ops/s)  off (M ops/s)  on/off (median of rounds)")
for w in "ac":
    for d in ("uniform", "zipf"):
        for key, name in (("ops_per_sec", "wall"), ("ops_per_cpu_sec", "process CPU")):
            on = [r[key] for r in rows if r["workload"] == w and r["dist"] == d and r["value_checksums"]]
            off = [r[key] for r in rows if r["workload"] == w and r["dist"] == d and not r["value_checksums"]]
            if not on or not off:
                continue
            ratio = st.median(a / b for a, b in zip(on, off))
            print(f"{w.upper():8} {d:8} {name:12} {st.median(on)/1e6:12.2f} {st.median(off)/1e6:14.2f}  {ratio:.3f}")
PY
echo "JSON lines: $OUT"
