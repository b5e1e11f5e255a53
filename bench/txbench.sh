#!/usr/bin/env bash
# Runs the transaction comparison of docs/performance.md ("Transactions"): pmrt, PMDK's
# libpmemobj, a plain undo log, no crash consistency, and the floor (the work no design of
# pmrt's kind can skip: bench/txbench.cc), side by side, K in {1,4,16} words per transaction,
# uniform and Zipfian 0.99, a 1M-word array, 1 and 2 threads (the undo log and plain stores at 1
# thread only), on /dev/shm with PMEM_IS_PMEM_FORCE=1 (clwb + sfence, the pmem backend), every
# system prewarmed (--prewarm: each word written once by its own transactions), pmrt with its
# default options (the automatic log budget). Each pmrt run reports its reclaimer's and
# advancer's CPU as shares of the workers' and its log against the hot set. Then pmrt's cold
# start at 1 thread (no prewarm, no warmup: how long until the steady rate). The whole matrix
# runs REPEAT times (rounds interleave the systems, so a drift of the machine's speed hits all of
# them); the table gives medians, and each ratio as the median of its per-round ratios (min-max).
# Then a long skewed run for pmrt's steady-state log size against its budget. With PREFETCH=1
# each round also runs K = 1 and 16 with --prefetch (every system prefetches the next
# transaction's words before its commit; pmrt through txn::prefetch), reported in a table of its
# own.
#
#   cmake -S . -B build-txbench -G Ninja -DCMAKE_BUILD_TYPE=Release -DPMRT_BUILD_TESTS=OFF
#   ninja -C build-txbench -j2 pmrt-txbench
#   bench/txbench.sh [build-dir]     # ~6 min per round; JSON lines in /tmp/txbench-<time>.jsonl
#
# Environment: PREFETCH (0), REPEAT (3), SECONDS_PER_RUN (3), WARMUP (2), BUDGET_MB (0: the
# engine's automatic budget), ARRAY (1048576), COLD_SECONDS (5; 0 skips the cold starts),
# STEADY_SECONDS (10; 0 skips the steady-state run; the table counts runs of >= 8 s as the
# steady-state run), OUT (the JSON lines file, appended to; each line gets its "round").
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-txbench}
bin=$build/bench/pmrt-txbench
repeat=${REPEAT:-3}
secs=${SECONDS_PER_RUN:-3}
warm=${WARMUP:-2}
budget=${BUDGET_MB:-0}
array=${ARRAY:-1048576}
steady=${STEADY_SECONDS:-10}
cold=${COLD_SECONDS:-5}
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
      for sys in pmrt pmdk floor; do
        run --system "$sys" --words "$k" --dist "$dist" --threads 2 --prewarm
      done
      # pmrt's cold start: no prewarm and no warmup, so the first write of each word pays a
      # snapshot and the budget starts at its pool-sized start (steady_after_s).
      if [ "$cold" != 0 ]; then
        run --system pmrt --words "$k" --dist "$dist" --threads 1 --seed 2 --seconds "$cold" \
          --warmup 0
      fi
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
python3 bench/perf_tables.py --render txbench "$out"
