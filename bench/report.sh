#!/usr/bin/env bash
# The benchmark report: runs the comparison suite of docs/performance.md at a size that takes
# about ten minutes on a 2-CPU machine, writes each suite's JSON lines, draws the PNG charts
# that docs/performance.md embeds ("Charts") and regenerates the page's tables
# (bench/perf_tables.py).
#
#   bench/report.sh [--quick] [--no-charts] [--out DIR] [--img DIR] [--only SUITES]
#     --quick       a smoke run of about 1.5 minutes (small sizes, short runs, no restart runs)
#     --no-charts   JSON and tables only (no gnuplot)
#     --out DIR     results directory (default $OUT, else bench/results)
#     --img DIR     where the PNGs go (default docs/img)
#     --only LIST   comma-separated subset of ycsb,txbench,index-txbench,allocbench,server
#   environment: PMRT_JOBS (build parallelism, default 2)
#
# Suites (each an existing script, with PMEM_IS_PMEM_FORCE=1: pools on /dev/shm model persistent
# memory with clwb + sfence):
#   ycsb        bench/ycsb.sh: durable vs transient Masstree, YCSB A/B/C/E, uniform and Zipfian
#               0.99, 1M keys, 2 threads, 2M operations per workload and tree; recovery at 1M keys
#   txbench     bench/txbench.sh: pmrt vs PMDK vs an undo log vs plain stores vs the floor, K = 1/4/16
#               words, 3 rounds (1 with --quick)
#   index-txbench  bench/index_txbench.sh: index updates in transactions, pmrt::Runtime vs PMDK
#               (a B+-tree and a hash map under libpmemobj transactions), YCSB-A-like, 1M keys,
#               2 threads; the restart after a crash (not with --quick)
#   allocbench  bench/allocbench.sh: pmrt's heap vs PMDK vs glibc, four allocator benchmarks
#   server      bench/server_bench.sh (when present): redis-benchmark against `pmrt serve` and
#               Debian's redis-server (persistence off, appendonly + appendfsync everysec and
#               always), the 3-shard proxy; MULTI/EXEC with bench/server_txbench.cc
#
# Output, in the results directory: SUITE.jsonl (the JSON lines of the suite's latest run),
# SUITE.txt (the script's output and tables), charts/NAME.{dat,gp} (gnuplot data and scripts),
# summary.json (the last run's machine and commit, and per suite when it ran, its machine,
# commit, the load average, run time, mode and status, merged with an earlier summary there, so
# that `--only SUITE` refreshes one suite; and every charted value), history/SUITE.jsonl (every
# full run's records, appended, each stamped with its commit, cpu and date; --quick runs and
# failed suites are not kept: history/README.md), and the PNGs in the image directory:
# ycsb.png, txbench.png, allocbench.png, server.png (each chart's subtitle gives the date,
# machine and load of its own suite's run). When the results directory is bench/results, the
# tables of docs/performance.md are then regenerated from it (bench/perf_tables.py; the tables
# of results files this script does not write stay as they are).
# Builds what it runs (build/release, -j2); installs gnuplot-nox (and redis-tools/redis-server
# for the server suite) with apt-get when missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
charts=1
out=${OUT:-bench/results}
img=docs/img
only=ycsb,txbench,index-txbench,allocbench,server
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --no-charts) charts=0 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --img) img=${2:?--img needs a directory}; shift ;;
    --only) only=${2:?--only needs a list}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "report.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for s in ${only//,/ }; do
  case $s in ycsb | txbench | index-txbench | allocbench | server) ;; *)
    echo "report.sh: unknown suite '$s' in --only (ycsb, txbench, index-txbench, allocbench," \
      "server)" >&2
    exit 2 ;;
  esac
done
want() { [[ ",$only," == *",$1,"* ]]; }
say() { printf '\n=== %s ===\n' "$*"; }
start_all=$(date +%s)

# Installs Debian packages when a command is missing (root only); false when still missing.
ensure() {
  local cmd=$1
  shift
  command -v "$cmd" >/dev/null && return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "report.sh: $cmd not found; installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; } ||
      true
  fi
  command -v "$cmd" >/dev/null
}

command -v python3 >/dev/null || { echo "report.sh: python3 is needed (apt-get install python3)" >&2; exit 2; }
if ((charts)) && ! ensure gnuplot gnuplot-nox; then
  echo "report.sh: gnuplot not found and not installable (apt-get install gnuplot-nox)," \
    "or run with --no-charts" >&2
  exit 2
fi

# ---- build ----------------------------------------------------------------------------------
server_script=bench/server_bench.sh
targets=()
want ycsb && targets+=(pmrt-ycsb)
want txbench && targets+=(pmrt-txbench)
want index-txbench && targets+=(pmrt-index-txbench)
want allocbench && targets+=(pmrt-allocbench)
want server && [[ -x $server_script ]] && targets+=(pmrt-cli pmrt-server-txbench)
if ((${#targets[@]})); then
  say "build: ${targets[*]} (build/release, -j${PMRT_JOBS:-2})"
  [[ -f build/release/build.ninja ]] || cmake --preset release >/dev/null
  cmake --build build/release -j "${PMRT_JOBS:-2}" --target "${targets[@]}"
fi

mkdir -p "$out"
export PMEM_IS_PMEM_FORCE=1
machine="$(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
mode=$( ((quick)) && echo quick || echo full)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
meta=(--meta "machine=$machine" --meta "commit=$commit")

# run_suite NAME COMMAND...: runs one suite with its output in $out/NAME.txt (and on stdout),
# records when it ran, on which machine, the load average before and after, its run time, mode
# and status (the NAME_* keys of summary.json), and appends a full run's records to
# $out/history/NAME.jsonl; a failing suite is reported and the others still run.
failed=()
run_suite() {
  local name=$1 t0 rc=0 load0 date
  shift
  say "$name: $*"
  t0=$(date +%s)
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  date=$(date -u '+%Y-%m-%d %H:%M UTC')
  meta+=(--meta "${name}_date=$date" --meta "${name}_mode=$mode" --meta "${name}_commit=$commit"
    --meta "${name}_machine=$machine")
  "$@" 2>&1 | tee "$out/$name.txt" || rc=$?
  local secs=$(($(date +%s) - t0))
  meta+=(--meta "${name}_load=$load0 before, $(cut -d' ' -f1-3 /proc/loadavg) after"
    --meta "${name}_seconds=$secs" --meta "${name}_status=$( ((rc)) && echo "failed ($rc)" || echo ok)")
  if ((rc)); then
    echo "report.sh: suite $name failed (exit status $rc); see $out/$name.txt" >&2
    failed+=("$name")
  elif ((!quick)); then
    keep_history "$name" "$date"
  fi
  echo "($name: ${secs} s)"
}

# keep_history NAME DATE: appends the records of $out/NAME.jsonl (the run just made) to
# $out/history/NAME.jsonl, each with the run's commit, cpu (the machine) and date unless it has
# them already.
keep_history() {
  [[ -s $out/$1.jsonl ]] || return 0
  mkdir -p "$out/history"
  python3 - "$out/$1.jsonl" "$out/history/$1.jsonl" "$commit" "$machine" "$2" <<'EOF'
import json, sys
src, dst, commit, cpu, date = sys.argv[1:]
with open(src) as f, open(dst, "a") as out:
    for line in f:
        if line.strip().startswith("{"):
            r = json.loads(line)
            for k, v in (("commit", commit), ("cpu", cpu), ("date", date)):
                r.setdefault(k, v)
            out.write(json.dumps(r) + "\n")
EOF
}

# ---- suites ---------------------------------------------------------------------------------
if want ycsb; then
  : >"$out/ycsb.jsonl"
  if ((quick)); then
    run_suite ycsb env KEYS=100000 OPS=200000 REPEAT=1 ROUNDS=2 RECOVERY=0 \
      OUT="$out/ycsb.jsonl" bench/ycsb.sh build/release/bench/pmrt-ycsb
  else
    run_suite ycsb env KEYS=1000000 OPS=2000000 REPEAT=1 ROUNDS=10 RECOVERY=1 \
      RECOVERY_KEYS=1000000 OUT="$out/ycsb.jsonl" bench/ycsb.sh build/release/bench/pmrt-ycsb
  fi
fi
if want txbench; then
  : >"$out/txbench.jsonl"
  if ((quick)); then
    run_suite txbench env SECONDS_PER_RUN=0.3 WARMUP=0.1 STEADY_SECONDS=0 COLD_SECONDS=0.5 ARRAY=131072 REPEAT=1 \
      OUT="$out/txbench.jsonl" bench/txbench.sh build/release
  else
    run_suite txbench env SECONDS_PER_RUN=2 WARMUP=1 STEADY_SECONDS=10 \
      OUT="$out/txbench.jsonl" bench/txbench.sh build/release
  fi
fi
if want index-txbench; then
  : >"$out/index-txbench.jsonl"
  if ((quick)); then
    run_suite index-txbench env KEYS=100000 SECONDS_PER_RUN=0.5 RESTART=0 \
      OUT="$out/index-txbench.jsonl" bench/index_txbench.sh build/release/bench/pmrt-index-txbench
  else
    run_suite index-txbench env OUT="$out/index-txbench.jsonl" \
      bench/index_txbench.sh build/release/bench/pmrt-index-txbench
  fi
fi
if want allocbench; then
  if ((quick)); then
    run_suite allocbench env RUN_SECONDS=0.5 REPEAT=1 RESTART=0 OUT="$out/allocbench.jsonl" \
      bench/allocbench.sh build/release/bench/pmrt-allocbench
  else
    run_suite allocbench env RUN_SECONDS=3 RESTART=1 RESTART_REPEAT=3 \
      OUT="$out/allocbench.jsonl" bench/allocbench.sh build/release/bench/pmrt-allocbench
  fi
fi
if want server; then
  rm -f "$out/server.jsonl"
  if [[ ! -x $server_script ]]; then
    say "server: skipped: $server_script is not in this tree yet (the pmrt serve work adds it)"
    meta+=(--meta "server_status=skipped (no $server_script)")
  elif ! ensure redis-benchmark redis-tools; then
    say "server: skipped: redis-benchmark not found and not installable (apt-get install redis-tools)"
    meta+=(--meta "server_status=skipped (no redis-benchmark)")
  else
    ensure redis-server redis-server ||
      echo "report.sh: redis-server not installable: the server suite measures pmrt alone" >&2
    if ((quick)); then
      run_suite server env N=20000 PIPELINES=16 REPEAT=1 \
        "$server_script" --json "$out/server.jsonl" build/release/tools/pmrt
    else
      run_suite server env N=200000 PIPELINES="1 16" REPEAT=3 \
        "$server_script" --json "$out/server.jsonl" build/release/tools/pmrt
    fi
  fi
fi

# ---- charts and summary ---------------------------------------------------------------------
say "charts and summary"
chart_flags=()
((charts)) || chart_flags+=(--data-only)
python3 bench/report_charts.py "$out" "$img" "${chart_flags[@]}" "${meta[@]}"
echo "summary: $out/summary.json"

# ---- the tables of docs/performance.md -------------------------------------------------------
if [[ $(realpath -m "$out") == $(realpath -m bench/results) ]]; then
  say "tables: docs/performance.md"
  if ! python3 bench/perf_tables.py; then
    echo "report.sh: bench/perf_tables.py failed" >&2
    failed+=(tables)
  fi
else
  echo "report.sh: results in $out, not bench/results: docs/performance.md's tables are left as" \
    "they are (bench/perf_tables.py --results $out --page FILE writes them elsewhere)"
fi
echo "report.sh: done in $(($(date +%s) - start_all)) s$( ((${#failed[@]})) && echo "; FAILED: ${failed[*]}")"
((${#failed[@]} == 0))
