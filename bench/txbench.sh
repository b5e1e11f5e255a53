#!/usr/bin/env bash
# Runs the transaction comparison of docs/performance.md ("Transactions"): pmrt, PMDK's
# libpmemobj, a plain undo log and no crash consistency, side by side in one run, K in {1,4,16}
# words per transaction, uniform and Zipfian 0.99, a 1M-word array, 1 thread (and 2 threads at
# K=4), on /dev/shm with PMEM_IS_PMEM_FORCE=1 (clwb + sfence, the pmem backend). Then a long
# skewed run for pmrt's steady-state log size against its budget.
#
#   cmake -S . -B build-txbench -G Ninja -DCMAKE_BUILD_TYPE=Release -DPMRT_BUILD_TESTS=OFF
#   ninja -C build-txbench -j2 pmrt-txbench
#   bench/txbench.sh [build-dir]          # ~3 min; JSON lines in /tmp/txbench-<time>.jsonl
#
# Environment: SECONDS_PER_RUN (3), WARMUP (2), BUDGET_MB (64), ARRAY (1048576),
# STEADY_SECONDS (10; 0 skips the steady-state run; the table counts runs of >= 8 s as the
# steady-state run), OUT (the JSON lines file, appended to).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-txbench}
bin=$build/bench/pmrt-txbench
secs=${SECONDS_PER_RUN:-3}
warm=${WARMUP:-2}
budget=${BUDGET_MB:-64}
array=${ARRAY:-1048576}
steady=${STEADY_SECONDS:-10}
out=${OUT:-/tmp/txbench-$(date +%Y%m%d-%H%M%S).jsonl}
export PMEM_IS_PMEM_FORCE=1
echo "# $(date -Is) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); results in $out" >&2
run() { "$bin" --json --array "$array" --seconds "$secs" --warmup "$warm" --budget-mb "$budget" "$@" | tail -1 >> "$out"; }
for dist in uniform zipf; do
  for k in 1 4 16; do
    for sys in pmrt pmdk undo plain; do
      run --system "$sys" --words "$k" --dist "$dist" --threads 1 $([ "$sys" = pmrt ] && echo --prewarm)
    done
    # pmrt's cold start: no prewarm, so the first write of each word pays a snapshot.
    [ "$k" = 4 ] && run --system pmrt --words 4 --dist "$dist" --threads 1 --seed 2
  done
  for sys in pmrt pmdk; do
    run --system "$sys" --words 4 --dist "$dist" --threads 2 $([ "$sys" = pmrt ] && echo --prewarm)
  done
done
# Steady state of a skewed workload's log (longer run, sampled every 10 ms).
if [ "$steady" != 0 ]; then
  run --seconds "$steady" --system pmrt --words 4 --dist zipf --threads 1 --prewarm
fi
python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def get(sys_, k, d, t, prewarm=True):
    for r in rows:
        if (r["system"] == sys_ and r["words"] == k and r["dist"] == d and r["threads"] == t
                and r["seconds"] < 8 and (sys_ != "pmrt" or r["prewarm"] == prewarm)):
            return r
print("| dist | K | T | pmrt tx/s | PMDK tx/s | undo tx/s | plain tx/s | pmrt/PMDK wall | pmrt/PMDK worker-cpu | pmrt fences/commit |")
print("|---|---|---|---|---|---|---|---|---|---|")
for d in ("uniform", "zipf"):
    for k, t in ((1, 1), (4, 1), (16, 1), (4, 2)):
        p, m, u, pl = (get(s, k, d, t) for s in ("pmrt", "pmdk", "undo", "plain"))
        f = lambda r, key="ops_per_sec": f"{r[key]/1e3:,.0f} k" if r else "-"
        ratio = lambda a, b, key: f"{a[key]/b[key]:.2f}x" if a and b else "-"
        print(f"| {d} | {k} | {t} | {f(p)} | {f(m)} | {f(u)} | {f(pl)} | {ratio(p, m, 'ops_per_sec')} | "
              f"{ratio(p, m, 'ops_per_worker_cpu_sec')} | {p['fences_per_commit'] if p else '-':.3f} |")
for d in ("uniform", "zipf"):
    c, m = get("pmrt", 4, d, 1, False), get("pmdk", 4, d, 1)
    if c and m:
        print(f"\ncold start (no prewarm), pmrt K=4 {d}: {c['ops_per_sec']/1e3:,.0f} k tx/s "
              f"({c['ops_per_sec']/m['ops_per_sec']:.2f}x PMDK wall, "
              f"{c['ops_per_worker_cpu_sec']/m['ops_per_worker_cpu_sec']:.2f}x worker-cpu), "
              f"{c['fences_per_commit']:.3f} fences/commit, {c['snapshots_per_commit']:.3f} snapshots/commit")
for r in rows:
    if r["system"] == "pmrt" and r["seconds"] >= 8:
        print(f"\nsteady state, pmrt K={r['words']} {r['dist']}: log avg {r['log_bytes_avg']/2**20:.1f} MiB, "
              f"max {r['log_bytes_max']/2**20:.1f} MiB, budget {r['log_budget']/2**20:.0f} MiB, "
              f"compacted log {r['compact_bytes']/2**20:.1f} MiB, {r['reclaim_cycles']} cycles, "
              f"{r['snapshots_per_commit']:.3f} snapshots/commit, {r['ops_per_sec']/1e3:,.0f} k tx/s")
EOF
