#!/usr/bin/env bash
# Runs the transaction comparison of docs/performance.md ("Transactions"): pmrt, PMDK's
# libpmemobj, a plain undo log, no crash consistency, and the floor (the work no design of
# pmrt's kind can skip: bench/txbench.cc), side by side, K in {1,4,16} words per transaction,
# uniform and Zipfian 0.99, a 1M-word array, 1 thread (and 2 threads at K=4), on /dev/shm with
# PMEM_IS_PMEM_FORCE=1 (clwb + sfence, the pmem backend), every system prewarmed (--prewarm: each
# word written once by its own transactions). The whole matrix runs REPEAT times
# (rounds interleave the systems, so a drift of the machine's speed hits all of them); the
# table gives medians, and each ratio as the median of its per-round ratios (min-max). Then a
# long skewed run for pmrt's steady-state log size against its budget. With PREFETCH=1 each round
# also runs K = 1 and 16 with --prefetch (every system prefetches the next transaction's words
# before its commit; pmrt through txn::prefetch), reported in a table of its own.
#
#   cmake -S . -B build-txbench -G Ninja -DCMAKE_BUILD_TYPE=Release -DPMRT_BUILD_TESTS=OFF
#   ninja -C build-txbench -j2 pmrt-txbench
#   bench/txbench.sh [build-dir]     # ~4 min per round; JSON lines in /tmp/txbench-<time>.jsonl
#
# Environment: PREFETCH (0), REPEAT (3), SECONDS_PER_RUN (3), WARMUP (2), BUDGET_MB (64), ARRAY (1048576),
# STEADY_SECONDS (10; 0 skips the steady-state run; the table counts runs of >= 8 s as the
# steady-state run), OUT (the JSON lines file, appended to; each line gets its "round").
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-txbench}
bin=$build/bench/pmrt-txbench
repeat=${REPEAT:-3}
secs=${SECONDS_PER_RUN:-3}
warm=${WARMUP:-2}
budget=${BUDGET_MB:-64}
array=${ARRAY:-1048576}
steady=${STEADY_SECONDS:-10}
out=${OUT:-/tmp/txbench-$(date +%Y%m%d-%H%M%S).jsonl}
export PMEM_IS_PMEM_FORCE=1
echo "# $(date -Is) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); results in $out" >&2
round=0
run() {
  "$bin" --json --array "$array" --seconds "$secs" --warmup "$warm" --budget-mb "$budget" "$@" |
    tail -1 | sed "s/}\$/, \"round\": $round}/" >> "$out"
}
for round in $(seq 1 "$repeat"); do
  for dist in uniform zipf; do
    for k in 1 4 16; do
      for sys in pmrt pmdk undo plain floor; do
        run --system "$sys" --words "$k" --dist "$dist" --threads 1 --prewarm
      done
      # pmrt's cold start: no prewarm, so the first write of each word pays a snapshot.
      [ "$k" = 4 ] && run --system pmrt --words 4 --dist "$dist" --threads 1 --seed 2
    done
    for sys in pmrt pmdk; do
      run --system "$sys" --words 4 --dist "$dist" --threads 2 --prewarm
    done
    if [ "${PREFETCH:-0}" = 1 ]; then
      for k in 1 16; do
        for sys in pmrt pmdk floor; do
          run --system "$sys" --words "$k" --dist "$dist" --threads 1 --prefetch --prewarm
        done
      done
    fi
  done
  echo "# round $round done $(date -Is), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
# Steady state of a skewed workload's log (longer run, sampled every 10 ms).
if [ "$steady" != 0 ]; then
  run --seconds "$steady" --system pmrt --words 4 --dist zipf --threads 1 --prewarm
fi
python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def runs(sys_, k, d, t, prewarm=True, prefetch=False):
    return {r.get("round", 0): r for r in rows
            if r["system"] == sys_ and r["words"] == k and r["dist"] == d and r["threads"] == t
            and r["seconds"] < 8 and r["prewarm"] == prewarm
            and r.get("prefetch", False) == prefetch}
def med(rs, key="ops_per_sec"):
    return statistics.median(r[key] for r in rs.values()) if rs else None
def ratio(a, b, key):
    rs = [a[i][key] / b[i][key] for i in a if i in b]
    if not rs:
        return "-"
    return f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f})"
kt = lambda v: f"{v/1e3:,.0f} k" if v is not None else "-"
# Every system prewarmed (--prewarm). Process CPU counts every thread (pmrt's reclaimer and
# advancer included); worker CPU only the threads that run the transactions.
print("| dist | K | T | pmrt tx/s | PMDK tx/s | undo tx/s | plain tx/s | floor tx/s | pmrt/PMDK wall | pmrt/PMDK process CPU | pmrt/PMDK worker CPU | floor/PMDK wall | pmrt/floor wall | pmrt/floor process CPU | pmrt fences/commit |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for d in ("uniform", "zipf"):
    for k, t in ((1, 1), (4, 1), (16, 1), (4, 2)):
        p, m, u, pl, fl = (runs(s, k, d, t) for s in ("pmrt", "pmdk", "undo", "plain", "floor"))
        fpc = f"{med(p, 'fences_per_commit'):.3f}" if p else "-"
        print(f"| {d} | {k} | {t} | {kt(med(p))} | {kt(med(m))} | {kt(med(u))} | {kt(med(pl))} | "
              f"{kt(med(fl))} | {ratio(p, m, 'ops_per_sec')} | {ratio(p, m, 'ops_per_cpu_sec')} | "
              f"{ratio(p, m, 'ops_per_worker_cpu_sec')} | "
              f"{ratio(fl, m, 'ops_per_sec')} | {ratio(p, fl, 'ops_per_sec')} | "
              f"{ratio(p, fl, 'ops_per_cpu_sec')} | {fpc} |")
if any(r.get("prefetch") for r in rows):
    print("\nwith --prefetch (each system prefetches the next transaction's words before its commit):\n")
    print("| dist | K | pmrt tx/s | PMDK tx/s | floor tx/s | pmrt/PMDK wall | pmrt/PMDK worker CPU | pmrt/floor wall |")
    print("|---|---|---|---|---|---|---|---|")
    for d in ("uniform", "zipf"):
        for k in (1, 16):
            p, m, fl = (runs(s, k, d, 1, prefetch=True) for s in ("pmrt", "pmdk", "floor"))
            if p and m:
                print(f"| {d} | {k} | {kt(med(p))} | {kt(med(m))} | {kt(med(fl))} | "
                      f"{ratio(p, m, 'ops_per_sec')} | {ratio(p, m, 'ops_per_worker_cpu_sec')} | "
                      f"{ratio(p, fl, 'ops_per_sec')} |")
for d in ("uniform", "zipf"):
    c, m = runs("pmrt", 4, d, 1, False), runs("pmdk", 4, d, 1)  # (PMDK prewarmed)
    if c and m:
        print(f"\ncold start (no prewarm), pmrt K=4 {d}: {kt(med(c))} tx/s "
              f"({ratio(c, m, 'ops_per_sec')} PMDK wall, {ratio(c, m, 'ops_per_worker_cpu_sec')} worker CPU), "
              f"{med(c, 'fences_per_commit'):.3f} fences/commit, {med(c, 'snapshots_per_commit'):.3f} snapshots/commit")
for r in rows:
    if r["system"] == "pmrt" and r["seconds"] >= 8:
        print(f"\nsteady state, pmrt K={r['words']} {r['dist']}: log avg {r['log_bytes_avg']/2**20:.1f} MiB, "
              f"max {r['log_bytes_max']/2**20:.1f} MiB, budget {r['log_budget']/2**20:.0f} MiB, "
              f"compacted log {r['compact_bytes']/2**20:.1f} MiB, {r['reclaim_cycles']} cycles, "
              f"{r['snapshots_per_commit']:.3f} snapshots/commit, {r['ops_per_sec']/1e3:,.0f} k tx/s")
EOF
