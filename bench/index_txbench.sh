#!/usr/bin/env bash
# Index updates in transactions (docs/performance.md, "Index operations in transactions"):
# pmrt::Runtime (put in a transaction with a counter word; the put on the epoch scope; the
# one-word transaction alone) against PMDK's libpmemobj (transactions on a persistent B+-tree
# and on a hash map), YCSB-A-like 50/50, Zipfian 0.99 and uniform, then the restart after a
# crash with 1M keys.
# Pools on /dev/shm with PMEM_IS_PMEM_FORCE=1 (clwb + sfence for pmrt and PMDK alike).
#
#   bench/index_txbench.sh [BINARY]      default build/release/bench/pmrt-index-txbench
#   environment: KEYS=1000000 SECONDS_PER_RUN=3 THREADS=2 RESTART=1 (0: no restart run)
#                RESTART_BUDGETS="0 4194304 1048576" (the crashed child's log budgets, bytes)
#                OUT=FILE (JSON lines, each stamped with this machine's processor)
set -u -o pipefail
BIN=${1:-build/release/bench/pmrt-index-txbench}
KEYS=${KEYS:-1000000}
SECS=${SECONDS_PER_RUN:-3}
THREADS=${THREADS:-2}
OUT=${OUT:-${TMPDIR:-/tmp}/index-txbench-$(date +%Y%m%d-%H%M%S).jsonl}
export PMEM_IS_PMEM_FORCE=1
[[ -x $BIN ]] || { echo "index_txbench.sh: $BIN not found; build it first" >&2; exit 2; }
: >"$OUT"
echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); JSON in $OUT"
for dist in zipf uniform; do
  for sys in pmrt-tx pmdk-btree pmdk pmrt-epoch pmrt-word; do
    "$BIN" --system "$sys" --dist "$dist" --keys "$KEYS" --seconds "$SECS" \
      --threads "$THREADS" --json "$OUT" || echo "index_txbench.sh: $sys $dist failed" >&2
  done
done
# The restart replays the transaction log since the reclaimer's horizon: its time follows the log
# budget (0: the engine's default, sized to the pool).
if [[ ${RESTART:-1} != 0 ]]; then
  for budget in ${RESTART_BUDGETS:-0 4194304 1048576}; do
    "$BIN" --restart --keys "$KEYS" --log-budget "$budget" --json "$OUT" ||
      echo "index_txbench.sh: restart (log budget $budget) failed" >&2
  done
fi
"$(dirname "$0")/stamp_cpu.py" "$OUT" >/dev/null
