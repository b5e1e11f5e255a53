#!/usr/bin/env bash
# The Masstree comparison of docs/performance.md ("Masstree"): the durable tree against the same
# tree with durability compiled out, YCSB A/B/C/E, uniform and Zipfian 0.99, 2 threads, on the
# pmem backend (/dev/shm with PMEM_IS_PMEM_FORCE=1), then the recovery time after a worst-case
# crash. Each repetition is one process per distribution (pmrt-ycsb --variant both) that loads
# both trees and runs A, B, C, E in turn, each split into ROUNDS chunks alternating between the
# two trees, so that both meet the same background load; the table gives, per workload, the
# medians over the repetitions of each variant's figures and of the per-process ratios.
#
#   bench/ycsb.sh [BINARY]
#     BINARY   default build-dm-rel/bench/pmrt-ycsb
#   environment:
#     KEYS=1000000 OPS=4000000 THREADS=2 REPEAT=3 ROUNDS=10 BACKEND=pmem
#     OUT=FILE     JSON lines (default ${TMPDIR:-/tmp}/ycsb-YYYYmmdd-HHMMSS.jsonl)
#     RECOVERY=1   also the recovery runs (RECOVERY_KEYS, default "100000 1000000"), each in a
#                  pool of RECOVERY_POOL bytes (default 2 GiB: the same for every key count)
#
# Build first:
#   cmake -S . -B build-dm-rel -G Ninja -DCMAKE_BUILD_TYPE=Release
#   ninja -C build-dm-rel -j2 pmrt-ycsb
#
# Figures: wall = ops per wall second; cpu = ops per process-CPU-second times threads (what the
# run does with one core per thread; the durable tree's advancer thread is in it). On a small
# machine shared with other work, cpu is the steadier of the two.
set -u -o pipefail

BIN=${1:-build-dm-rel/bench/pmrt-ycsb}
KEYS=${KEYS:-1000000}
OPS=${OPS:-4000000}
THREADS=${THREADS:-2}
REPEAT=${REPEAT:-3}
ROUNDS=${ROUNDS:-10}
BACKEND=${BACKEND:-pmem}
RECOVERY=${RECOVERY:-1}
RECOVERY_KEYS=${RECOVERY_KEYS:-"100000 1000000"}
RECOVERY_POOL=${RECOVERY_POOL:-2147483648}
OUT=${OUT:-${TMPDIR:-/tmp}/ycsb-$(date +%Y%m%d-%H%M%S).jsonl}
export PMEM_IS_PMEM_FORCE=1

if [[ ! -x "$BIN" ]]; then
  echo "ycsb.sh: $BIN not found; build it first (see the top of this script)" >&2
  exit 2
fi
: > "$OUT"
echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $BIN: keys=$KEYS ops=$OPS threads=$THREADS backend=$BACKEND repeat=$REPEAT; JSON in $OUT"

for rep in $(seq 1 "$REPEAT"); do
  for dist in uniform zipf; do
    "$BIN" --workload a,b,c,e --dist "$dist" --keys "$KEYS" --ops "$OPS" --threads "$THREADS" \
      --variant both --rounds "$ROUNDS" --backend "$BACKEND" --seed "$rep" --json "$OUT" ||
      echo "ycsb.sh: run failed: $dist" >&2
  done
done

if [[ "$RECOVERY" == 1 ]]; then
  for k in $RECOVERY_KEYS; do
    "$BIN" --recovery --keys "$k" --threads "$THREADS" --backend "$BACKEND" --repeat 3 \
      --pool-size "$RECOVERY_POOL" --json "$OUT" || echo "ycsb.sh: recovery run failed: $k keys" >&2
  done
fi

python3 - "$OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tp = [r for r in runs if r.get("mode") != "recovery"]
print()
print("| workload | dist | transient Mops/s wall / cpu | durable Mops/s wall / cpu | ratio wall (min-max) | ratio cpu (min-max) | durable p50 / p99 ns | transient p50 / p99 ns | per epoch: lines written back, boundary ms, log entries; fences/op |")
print("|---|---|---|---|---|---|---|---|---|")
for w in "abce":
    for d in ("uniform", "zipf"):
        sel = lambda v: [r for r in tp if r["workload"] == w and r["dist"] == d and r["variant"] == v]
        t, u = sel("transient"), sel("durable")
        if not t or not u:
            continue
        med = lambda rs, k: statistics.median(r[k] for r in rs)
        tw, tc, dw, dc = (med(t, "ops_per_sec"), med(t, "ops_per_cpu_sec"),
                          med(u, "ops_per_sec"), med(u, "ops_per_cpu_sec"))
        by_run = {r["run"]: r for r in t}
        pairs = [(r, by_run[r["run"]]) for r in u if r["run"] in by_run]
        rw = [a["ops_per_sec"] / b["ops_per_sec"] for a, b in pairs]
        rc = [a["ops_per_cpu_sec"] / b["ops_per_cpu_sec"] for a, b in pairs]
        print(f"| {w.upper()} | {d} | {tw/1e6:.3f} / {tc/1e6:.3f} | {dw/1e6:.3f} / {dc/1e6:.3f} | "
              f"{statistics.median(rw):.3f} ({min(rw):.2f}-{max(rw):.2f}) | "
              f"{statistics.median(rc):.3f} ({min(rc):.2f}-{max(rc):.2f}) | "
              f"{med(u,'p50_ns'):.0f} / {med(u,'p99_ns'):.0f} | "
              f"{med(t,'p50_ns'):.0f} / {med(t,'p99_ns'):.0f} | "
              f"{med(u,'lines_flushed_per_epoch'):.0f}, {med(u,'boundary_ms_per_epoch'):.2f}, "
              f"{med(u,'log_entries_per_epoch'):.0f}; {med(u,'fences_per_op'):.4f} |")
rec = [r for r in runs if r.get("mode") == "recovery"]
if rec:
    print()
    print("| keys | pool MiB | Pool::Open ms | Manager::Open ms (entries replayed) | Heap::Open ms | tree Open ms | first get ms | to first answer ms | full scan ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in sorted({r["keys"] for r in rec}):
        rs = [r for r in rec if r["keys"] == k]
        med = lambda key: statistics.median(r[key] for r in rs)
        print(f"| {k} | {rs[0].get('pool_mib', '?')} | {med('pool_open_ms'):.2f} | {med('manager_open_ms'):.2f} ({med('log_entries_replayed'):.0f}) | "
              f"{med('heap_open_ms'):.2f} | {med('tree_open_ms'):.3f} | {med('first_get_ms'):.3f} | "
              f"{med('to_first_get_ms'):.2f} (max {max(r['to_first_get_ms'] for r in rs):.2f}) | {med('full_scan_ms'):.0f} |")
PY
