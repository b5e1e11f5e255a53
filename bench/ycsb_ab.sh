#!/usr/bin/env bash
# A/B of the Masstree core (docs/performance.md, "Masstree: this tree against its previous
# commit"): two builds of pmrt-ycsb, each running YCSB A, B, C and E on both trees (durable and
# transient, --variant both), uniform and Zipfian 0.99, for every key count and thread count, on
# the pmem backend. The two builds alternate per configuration (base first on odd repetitions,
# new first on even ones), so both meet the same background load; each process also reports its
# load phase.
#
#   bench/ycsb_ab.sh BASE_BIN NEW_BIN
#   bench/ycsb_ab.sh --build-base COMMIT [NEW_BIN]   builds COMMIT's pmrt-ycsb first (a git
#                                                    worktree under $TMPDIR), NEW_BIN defaults to
#                                                    build/release/bench/pmrt-ycsb
#   environment:
#     KEYS="1000000 10000000" THREADS="1 2" DISTS="uniform zipf" OPS=2000000 ROUNDS=4 REPEAT=1
#     OUT=FILE   JSON lines, each record tagged "build":"base"|"new" (default
#                ${TMPDIR:-/tmp}/ycsb-ab-YYYYmmdd-HHMMSS.jsonl)
#
# The table: per workload, distribution, keys and threads, the median over repetitions of new ÷
# base throughput (wall) for each tree, and of the new durable ÷ new transient tree.
set -u -o pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--build-base" ]]; then
  commit=${2:?"--build-base needs a commit"}
  wt="${TMPDIR:-/tmp}/pmrt-ab-$(git rev-parse --short "$commit")"
  if [[ ! -x "$wt/build/bench/pmrt-ycsb" ]]; then
    [[ -d "$wt" ]] || git worktree add --detach "$wt" "$commit" >/dev/null || exit 2
    cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPMRT_BUILD_TESTS=OFF \
      >/dev/null || exit 2
    cmake --build "$wt/build" --target pmrt-ycsb -j "$(nproc)" >/dev/null || exit 2
  fi
  BASE="$wt/build/bench/pmrt-ycsb"
  NEW=${3:-build/release/bench/pmrt-ycsb}
else
  BASE=${1:?"usage: bench/ycsb_ab.sh BASE_BIN NEW_BIN | --build-base COMMIT [NEW_BIN]"}
  NEW=${2:?"usage: bench/ycsb_ab.sh BASE_BIN NEW_BIN | --build-base COMMIT [NEW_BIN]"}
fi
KEYS=${KEYS:-"1000000 10000000"}
THREADS=${THREADS:-"1 2"}
DISTS=${DISTS:-"uniform zipf"}
OPS=${OPS:-2000000}
ROUNDS=${ROUNDS:-4}
REPEAT=${REPEAT:-1}
OUT=${OUT:-${TMPDIR:-/tmp}/ycsb-ab-$(date +%Y%m%d-%H%M%S).jsonl}
export PMEM_IS_PMEM_FORCE=1

source bench/common.sh  # (the working directory is the repository root)
require_executables ycsb_ab.sh "$BASE" "$NEW"
: > "$OUT"
machine_line
echo "# base $BASE, new $NEW: keys=[$KEYS] threads=[$THREADS] ops=$OPS rounds=$ROUNDS" \
  "repeat=$REPEAT; JSON in $OUT"

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
run() {  # build-name binary dist keys threads seed
  : > "$tmp"
  # The scratch pool goes with its process; a 10M-key pool needs ~2.2 GiB of /dev/shm.
  if ! "$2" --workload a,b,c,e --dist "$3" --keys "$4" --threads "$5" --ops "$OPS" \
      --variant both --rounds "$ROUNDS" --backend pmem --seed "$6" --json "$tmp" > /dev/null; then
    echo "ycsb_ab.sh: $1 failed: dist=$3 keys=$4 threads=$5" >&2
    return
  fi
  sed "s/^{/{\"build\":\"$1\",\"rep\":$6,/" "$tmp" >> "$OUT"
}

for rep in $(seq 1 "$REPEAT"); do
  for keys in $KEYS; do
    for threads in $THREADS; do
      for dist in $DISTS; do
        if (( rep % 2 == 1 )); then
          run base "$BASE" "$dist" "$keys" "$threads" "$rep"
          run new "$NEW" "$dist" "$keys" "$threads" "$rep"
        else
          run new "$NEW" "$dist" "$keys" "$threads" "$rep"
          run base "$BASE" "$dist" "$keys" "$threads" "$rep"
        fi
        echo "# done: rep $rep keys $keys threads $threads $dist"
      done
    done
  done
done

python3 bench/stamp_cpu.py "$OUT"
python3 bench/perf_tables.py --render masstree-ab "$OUT"
