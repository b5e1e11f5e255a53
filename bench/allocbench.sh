#!/usr/bin/env bash
# The allocator comparison of docs/performance.md ("Allocator"), in one run:
# pmrt vs PMDK's libpmemobj vs glibc malloc on threadtest, shbench and larson at 1 and 2
# threads and prodcon at 2, all on the pmem backend (/dev/shm with PMEM_IS_PMEM_FORCE=1), then
# pmrt's and PMDK's restart times. About 8 minutes with the defaults (3 rounds).
#
# Durability: pmrt's calls are epoch-scoped (durable at the next boundary, at most two 64 ms
# epochs later), PMDK's durable when they return, malloc's never. The equal-durability rows
# run pmrt with shared frees and a Sync every N calls of each thread (--pmrt-sync-every N;
# N = 1: every call durable when it returns, as PMDK's; N = 64).
#
#   bench/allocbench.sh [BINARY]
#     BINARY   default build-allocbench/bench/pmrt-allocbench
#   environment:
#     RUN_SECONDS=3       length of each throughput run
#     REPEAT=3            rounds: each round runs pmrt, pmdk and malloc back to back on every
#                         test; the tables give each allocator's median and the median (and
#                         range) of the per-round ratios, which cancels slow drifts of the host
#     OUT=FILE            JSON lines (default ${TMPDIR:-/tmp}/allocbench-YYYYmmdd-HHMMSS.jsonl)
#     RESTART_OBJECTS=4000000, RESTART_REPEAT=3, RESTART=0 to skip the restart part
#
# Build first:
#   cmake -S . -B build-allocbench -G Ninja -DCMAKE_BUILD_TYPE=Release
#   ninja -C build-allocbench -j2 pmrt-allocbench
#
# Tables: Mops/s (1 op = one allocator call, an allocation or a free) and the ratios
# pmrt/pmdk and pmrt/malloc, against the targets >= 30x PMDK and >= 0.7x glibc.
#   wall  ops per wall second: what a user sees, but it moves with other tenants' load.
#   cpu   ops per process-CPU-second times threads (what the run would do with a core per
#         thread; pmrt's advancer thread is in the process CPU). The primary figure for
#         threadtest/shbench/larson, as in reference/allocator-notes.md; prodcon uses wall
#         (its consumer spins when the queue is empty, which CPU time would count as work).
set -u -o pipefail

BIN=${1:-build-allocbench/bench/pmrt-allocbench}
RUN_SECONDS=${RUN_SECONDS:-3}
REPEAT=${REPEAT:-3}
OUT=${OUT:-${TMPDIR:-/tmp}/allocbench-$(date +%Y%m%d-%H%M%S).jsonl}
RESTART=${RESTART:-1}
RESTART_OBJECTS=${RESTART_OBJECTS:-4000000}
RESTART_REPEAT=${RESTART_REPEAT:-3}
export PMEM_IS_PMEM_FORCE=1

if [[ ! -x "$BIN" ]]; then
  echo "allocbench.sh: $BIN not found; build it first (see the top of this script)" >&2
  exit 2
fi
: > "$OUT"

echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# binary: $BIN; ${RUN_SECONDS}s per run, $REPEAT rounds; backend pmem; JSON lines in $OUT"

# One run; a run whose JSON line is missing is retried once. A nonzero exit after the JSON line
# (seen with pmemobj_close, see docs/performance.md) is reported but the figures are kept.
run() {
  local tries out rc
  for tries in 1 2; do
    out=$("$BIN" --json "$@" 2> >(sed 's/^/  stderr: /' >&2))
    rc=$?
    echo "$out" | grep -v '^{' | sed 's/^/  /'
    if echo "$out" | grep -q '^{'; then
      echo "$out" | grep '^{' >> "$OUT"
      [[ $rc -ne 0 ]] && echo "  warning: exit status $rc after the results: $*" >&2
      return 0
    fi
    echo "  warning: no result (exit status $rc), attempt $tries: $*" >&2
  done
  return 1
}

for ((round = 1; round <= REPEAT; ++round)); do
  for test in threadtest shbench larson prodcon; do
    for threads in 1 2; do
      [[ $test == prodcon && $threads == 1 ]] && continue
      for alloc in pmrt pmdk malloc; do
        run --allocator "$alloc" --test "$test" --threads "$threads" --seconds "$RUN_SECONDS" \
          --backend pmem
      done
      for n in 1 64; do
        run --allocator pmrt --pmrt-sync-every "$n" --test "$test" --threads "$threads" \
          --seconds "$RUN_SECONDS" --backend pmem
      done
    done
  done
done

if [[ $RESTART == 1 ]]; then
  for alloc in pmrt pmdk; do
    run --allocator "$alloc" --test restart --objects "$RESTART_OBJECTS" \
      --repeat "$RESTART_REPEAT" --backend pmem
  done
fi

python3 - "$OUT" <<'EOF'
import json, sys
import statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
# Every run of (test, threads, allocator), in order: run i of each allocator is round i.
# pmrt's equal-durability runs are their own column: "pmrt/sync1", "pmrt/sync64".
def name(r):
    d = r.get("durability", "")
    return r["allocator"] + ("/sync" + d.split()[2] if d.startswith("Sync every") else "")
rounds = {}
for r in rows:
    if r["test"] != "restart":
        rounds.setdefault((r["test"], r["threads"], name(r)), []).append(r)
# The run whose wall figure is the median, for the per-run detail tables below.
runs = {k: sorted(v, key=lambda r: r["ops_per_sec"])[len(v) // 2] for k, v in rounds.items()}
tests = [("threadtest", 1), ("threadtest", 2), ("shbench", 1), ("shbench", 2),
         ("larson", 1), ("larson", 2), ("prodcon", 2)]

def table(key, title):
    print(f"\n{title}")
    print(f"| test | T | pmrt | pmdk | malloc | pmrt/pmdk | pmrt/malloc | targets (>=30x, >=0.7x) |")
    print("|---|---|---|---|---|---|---|---|")
    for t, n in tests:
        r = {a: rounds.get((t, n, a)) for a in ("pmrt", "pmdk", "malloc")}
        if any(v is None for v in r.values()):
            print(f"| {t} | {n} | missing | | | | | |")
            continue
        k = key if t != "prodcon" else "ops_per_sec"
        v = {a: [x[k] / 1e6 for x in r[a]] for a in r}
        m = min(len(x) for x in v.values())
        rps = [v["pmrt"][i] / v["pmdk"][i] for i in range(m)]
        rms = [v["pmrt"][i] / v["malloc"][i] for i in range(m)]
        rp, rm = statistics.median(rps), statistics.median(rms)
        span = lambda xs, f: "" if len(xs) < 2 else f" ({min(xs):{f}}-{max(xs):{f}})"
        ok = ("met" if rp >= 30 else "MISS") + " / " + ("met" if rm >= 0.7 else "MISS")
        note = " (wall)" if t == "prodcon" and key != "ops_per_sec" else ""
        med = {a: statistics.median(v[a]) for a in v}
        print(f"| {t}{note} | {n} | {med['pmrt']:.2f} | {med['pmdk']:.2f} | {med['malloc']:.2f} | "
              f"{rp:.1f}x{span(rps, '.1f')} | {rm:.2f}x{span(rms, '.2f')} | {ok} |")

table("ops_per_cpu_sec", "CPU-normalized Mops/s (primary; prodcon: wall); medians over the rounds, ratios: "
      "median of the per-round ratios (min-max). Durability: pmrt epoch-scoped, PMDK every call")
table("ops_per_sec", "Wall-clock Mops/s, the same way")

def equal_table(key, title):
    print(f"\n{title}")
    print("| test | T | pmdk | pmrt sync/1 | pmrt sync/64 | sync/1 / pmdk | sync/64 / pmdk |")
    print("|---|---|---|---|---|---|---|")
    for t, n in tests:
        r = {a: rounds.get((t, n, a)) for a in ("pmdk", "pmrt/sync1", "pmrt/sync64")}
        if any(v is None for v in r.values()):
            continue
        k = key if t != "prodcon" else "ops_per_sec"
        v = {a: [x[k] / 1e6 for x in r[a]] for a in r}
        m = min(len(x) for x in v.values())
        r1 = statistics.median([v["pmrt/sync1"][i] / v["pmdk"][i] for i in range(m)])
        r64 = statistics.median([v["pmrt/sync64"][i] / v["pmdk"][i] for i in range(m)])
        med = {a: statistics.median(v[a]) for a in v}
        print(f"| {t} | {n} | {med['pmdk']:.3f} | {med['pmrt/sync1']:.3f} | "
              f"{med['pmrt/sync64']:.3f} | {r1:.3f}x | {r64:.2f}x |")

equal_table("ops_per_cpu_sec", "Equal durability, CPU-normalized Mops/s (prodcon: wall): pmrt with "
            "shared frees and a Sync every call (sync/1: every call durable when it returns, as "
            "PMDK's) or every 64 calls of a thread, medians over the rounds")

print("\npmrt: fences and lines written back per op; epoch advances and their real period "
      "(64 ms nominal); boundary (closed-epoch) time share; heap footprint at the end")
print("| test | T | fences/op | lines/op | advances | epoch period ms | boundary % of run "
      "| footprint MiB |")
print("|---|---|---|---|---|---|---|---|")
for t, n in tests:
    r = runs.get((t, n, "pmrt"))
    if r:
        period = 1e3 * r["seconds"] / max(r["epoch_advances"], 1)
        print(f"| {t} | {n} | {r['fences_per_op']:.6f} | {r['lines_flushed_per_op']:.3f} | "
              f"{r['epoch_advances']} | {period:.0f} | "
              f"{100 * r['boundary_ms'] / 1e3 / r['seconds']:.1f}% | "
              f"{r.get('heap_footprint_mib', 0)} |")

tt = [r for r in rows if r["test"] == "threadtest"]
if tt:
    print("\nthreadtest CPU per call (ns): the workers' allocation and free phases, and the "
          "process's other threads (pmrt's advancer) per alloc+free pair")
    print("| allocator | T | alloc ns | free ns | background ns/pair |")
    print("|---|---|---|---|---|")
    for r in sorted(tt, key=lambda r: (r["allocator"] != "pmrt", r["allocator"], r["threads"])):
        print(f"| {r['allocator']} | {r['threads']} | {r['alloc_cpu_ns']:.1f} | "
              f"{r['free_cpu_ns']:.1f} | {r['background_cpu_ns_per_pair']:.1f} |")

rs = [r for r in rows if r["test"] == "restart"]
if rs:
    print("\nRestart: open (pmrt: Pool::Open + Manager::Open + Heap::Open; pmdk: pmemobj_open), "
          "median ms; first allocation after it")
    print("| allocator | case | objects | open ms (min-max) | first alloc ms | open + first "
          "alloc ms | live blocks after |")
    print("|---|---|---|---|---|---|---|")
    for r in rs:
        print(f"| {r['allocator']} | {r['case']} | {r['objects']} | {r['open_ms']:.2f} "
              f"({r['open_ms_min']:.2f}-{r['open_ms_max']:.2f}) | {r['first_alloc_ms']:.2f} | "
              f"{r['open_plus_first_alloc_ms']:.2f} | {r['live_blocks']} |")
EOF
