#!/usr/bin/env python3
"""Writes the tables of docs/performance.md from the results in bench/results/.

    bench/perf_tables.py [--check] [--results DIR] [--page FILE]

Each table of the page sits between two marker comments,

    <!-- table:NAME -->
    ...generated...
    <!-- /table:NAME -->

and is generated from one results file (TABLES below: the file, how its records become a table,
the command that reproduces the file). Under each table one line gives the run's notes, the
results file, the machine and that command. Without flags the page is rewritten in place; with
--check nothing is written and the exit status is 1 when a table on the page differs from what
the results give (the page has drifted: run bench/perf_tables.py, or bench/report.sh, which calls
it) or when docs/performance.md grows past MAX_PAGE_LINES, 2 on an error (a marker without its end, an unknown table name).

A results file holds the latest run of its suite (bench/report.sh and the bench/*.sh scripts
truncate it first; bench/results/history/ keeps every run). Where its records carry a run's
identity (commit, timestamp, date or run_id), only the last run's records are used; the "run"
field of pmrt-ycsb's records is one process's id, not a run's. A missing file gives "no results
yet" and the command to run. *.json files are Google Benchmark's output (--benchmark_out). The
machine comes from, in this order: the records' own "cpu" or "machine" field (Google Benchmark:
its context); summary.json's SUITE_machine (bench/report.sh records it per suite); the
"# machine:" line of SUITE.txt; summary.json's machine where that suite was the last one
bench/report.sh ran; FILE_NOTES, which names the machine of a file whose records do not, and
notes what a table cannot tell about its run, valid only while the file's SHA-256 is unchanged
(a new run drops the note).

Python 3 standard library only.
"""

import argparse
import hashlib
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_KEYS = ("commit", "timestamp", "date", "run_id")

# --------------------------------------------------------------------------------------------
# Reading


def read_jsonl(path):
    """The JSON objects of a JSON-lines file, None when it does not exist."""
    if not os.path.exists(path):
        return None
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def latest_run(rows):
    """The records of the last run: the last group of consecutive records with the same run
    identity (the RUN_KEYS present); every record when none carries one."""
    if not rows or not any(k in r for r in rows for k in RUN_KEYS):
        return rows
    ident = [tuple(r.get(k) for k in RUN_KEYS) for r in rows]
    start = len(rows) - 1
    while start > 0 and ident[start - 1] == ident[-1]:
        start -= 1
    return rows[start:]


def read_gbench(path):
    """Google Benchmark's JSON output (--benchmark_out_format=json) as a list of rows (the
    medians where the run has repetitions), each with its context; None when missing."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    bms = doc.get("benchmarks", [])
    if any(b.get("aggregate_name") == "median" for b in bms):
        bms = [b for b in bms if b.get("aggregate_name") == "median"]
    else:
        bms = [b for b in bms if b.get("run_type", "iteration") == "iteration"]
    ctx = doc.get("context", {})
    return [dict(b, _context=ctx) for b in bms]


# --------------------------------------------------------------------------------------------
# Formatting


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def num(v, digits=0):
    """A number with thousands separators; "–" for None."""
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def ratio(xs, digits=2, times=True, spread=True):
    """The median of per-round ratios, with their range when there are several."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    mark = "×" if times else ""
    text = f"{statistics.median(xs):.{digits}f}{mark}"
    if spread and len(xs) > 1:
        text += f" ({min(xs):.{digits}f}–{max(xs):.{digits}f})"
    return text


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def paired(a, b, key):
    """Ratios a[i][key] / b[i][key] over the rounds (dict keys) both have."""
    return [a[i][key] / b[i][key] for i in a if i in b and a[i].get(key) and b[i].get(key)]


MIB = 2.0 ** 20


class Note(str):
    """A sentence under a table: render_block joins a block's notes into the line under it."""

# --------------------------------------------------------------------------------------------
# YCSB (bench/ycsb.sh): durable vs transient Masstree, and recovery

WORKLOADS = {"a": "A (50% update)", "b": "B (5% update)", "c": "C (read only)",
             "e": "E (95% scan)"}


def render_masstree_ab(rows):
    """bench/ycsb_ab.sh: each tree of the new build against the same tree of the base build, per
    workload (rows) and key and thread count (columns), and the new durable tree against the new
    transient one; then the loads."""
    tp = [r for r in rows if r.get("mode") != "load" and "variant" in r and "build" in r]
    loads = [r for r in rows if r.get("mode") == "load" and "build" in r]
    if not tp:
        return ["No A/B records in this file."]
    configs = sorted({(r["keys"], r["threads"]) for r in tp})

    def sel(rs, **kw):
        return [r for r in rs if all(r.get(k) == v for k, v in kw.items())]

    def by_rep(rs):
        return {r.get("rep", 1): r for r in rs}

    def label(keys, threads):
        return f"{keys / 1e6:g}M keys, {threads} thr."

    body = []
    for w in "abce":
        for d in ("uniform", "zipf"):
            row, own = [WORKLOADS[w] if d == "uniform" else w.upper(), d], []
            for keys, threads in configs:
                cell = []
                for variant in ("transient", "durable"):
                    kw = dict(workload=w, dist=d, keys=keys, threads=threads, variant=variant)
                    new, base = by_rep(sel(tp, build="new", **kw)), by_rep(sel(tp, build="base", **kw))
                    xs = paired(new, base, "ops_per_sec")
                    cell.append(f"{med(xs):.2f}" if xs else "–")
                nd = by_rep(sel(tp, build="new", variant="durable", workload=w, dist=d, keys=keys,
                                threads=threads))
                nt = by_rep(sel(tp, build="new", variant="transient", workload=w, dist=d,
                                keys=keys, threads=threads))
                own += paired(nd, nt, "ops_per_sec")
                row.append(" / ".join(cell))
            row.append(ratio(own, times=False))
            body.append(row)
    lines = table(["workload", "dist"] + [label(k, t) + ": transient / durable, new ÷ base"
                                          for k, t in configs]
                  + ["durable ÷ transient (new), median (min–max) over the columns"], body)
    load_parts = []
    for keys, threads in sorted({(r["keys"], r["threads"]) for r in loads}):
        part = []
        for variant in ("transient", "durable"):
            n = med(r["ops_per_sec"] for r in sel(loads, build="new", keys=keys, threads=threads,
                                                  variant=variant))
            b = med(r["ops_per_sec"] for r in sel(loads, build="base", keys=keys, threads=threads,
                                                  variant=variant))
            part.append("–" if n is None else f"{n / 1e6:.2f}" +
                        (f" ({n / b:.2f}× base)" if b else ""))
        load_parts.append(f"{label(keys, threads)} {' / '.join(part)}")
    counts = sorted({len({r.get("rep") for r in sel(tp, keys=k, threads=t)}) for k, t in configs})
    reps = (f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}–{counts[-1]}")
    lines.append(Note("Wall-clock throughput ratios; each process runs both trees in "
                      "interleaved chunks, the two builds alternate per configuration" +
                      (f"; medians over {reps} repetitions." if counts[-1] > 1 else ".")))
    if load_parts:
        lines.append(Note("The load phase, M inserts/s, transient / durable (new build): " +
                          "; ".join(load_parts) + "."))
    return lines


def render_ycsb_recovery(rows):
    rec = [r for r in rows if r.get("mode") == "recovery"]
    if not rec:
        return ["No recovery runs in this file (bench/ycsb.sh with RECOVERY=1)."]
    body = []
    for k in sorted({r["keys"] for r in rec}):
        rs = [r for r in rec if r["keys"] == k]
        m = lambda key: med(r.get(key) for r in rs)
        first = [r["to_first_get_ms"] for r in rs]
        body.append([
            num(k), f"{num(rs[0].get('pool_mib'))} MiB", f"{m('pool_open_ms'):.2f}",
            f"{m('manager_open_ms'):.2f} ({num(m('log_entries_replayed'))})",
            f"{m('heap_open_ms'):.2f}", f"{m('tree_open_ms'):.3f}", f"{m('first_get_ms'):.3f}",
            f"**{statistics.median(first):.2f}** ({min(first):.2f}–{max(first):.2f})",
            num(m("full_scan_ms"))])
    return table(["keys", "pool", "Pool::Open ms", "Manager::Open ms (log entries replayed)",
                  "Heap::Open ms", "tree Open ms", "first get ms",
                  "to the first answer, ms (min–max)", "full scan ms"], body)


# --------------------------------------------------------------------------------------------
# Transactions (bench/txbench.sh)


def tx_runs(rows, system, k, d, t, prefetch=False):
    """{round: record} of the short runs of one configuration. Prewarmed runs where there are
    any; a system other than pmrt without prewarmed runs gives its plain ones (an older
    bench/txbench.sh prewarmed pmrt only); pmrt's unprewarmed runs are its cold start."""
    cand = [r for r in rows if r["system"] == system and r["words"] == k and r["dist"] == d
            and r["threads"] == t and r["seconds"] < 8 and r.get("prefetch", False) == prefetch]
    warm = [r for r in cand if r.get("prewarm")]
    if warm or system == "pmrt":
        cand = warm
    return {r.get("round", 0): r for r in cand}


def render_txbench(rows):
    systems = ("pmrt", "pmdk", "undo", "plain", "floor")
    body = []
    cold_systems = set()
    configs = ((1, 1), (4, 1), (16, 1), (1, 2), (4, 2), (16, 2))
    for d in ("uniform", "zipf"):
        for k, t in configs:
            runs = {s: tx_runs(rows, s, k, d, t) for s in systems}
            if not runs["pmrt"] and not runs["pmdk"]:
                continue
            for s in systems[1:]:
                if any(not r.get("prewarm") for r in runs[s].values()):
                    cold_systems.add(s)
            kt = lambda s: (f"{num(med(r['ops_per_sec'] for r in runs[s].values()) / 1e3)} k"
                            if runs[s] else "–")
            p, m, fl = runs["pmrt"], runs["pmdk"], runs["floor"]
            fpc = med(r.get("fences_per_commit") for r in p.values())

            def pct(key):
                v = med(r.get(key) for r in p.values())
                return "–" if v is None else f"{100 * v:.0f}%"

            def times(key):
                v = med(r.get(key) for r in p.values())
                return "–" if v is None else f"{v:.1f}×"

            body.append([
                d, k, t, kt("pmrt"), kt("pmdk"), kt("undo"), kt("plain"), kt("floor"),
                ratio(paired(p, m, "ops_per_sec")), ratio(paired(p, m, "ops_per_cpu_sec")),
                ratio(paired(p, fl, "ops_per_sec")), ratio(paired(p, fl, "ops_per_cpu_sec")),
                pct("reclaimer_cpu_share"), pct("advancer_cpu_share"), times("log_over_hot_avg"),
                "–" if fpc is None else f"{fpc:.3f}"])
    if not body:
        return ["No transaction runs in this file."]
    lines = table(["dist", "K", "T", "pmrt tx/s", "PMDK tx/s", "undo tx/s", "plain tx/s",
                   "floor tx/s", "pmrt / PMDK wall", "pmrt / PMDK process CPU",
                   "pmrt / floor wall", "pmrt / floor process CPU", "reclaimer CPU",
                   "advancer CPU", "log ÷ hot", "pmrt fences / commit"], body)
    rounds = len({r.get("round", 0) for r in rows})
    notes = [(f"Medians of {rounds} rounds; each ratio the median of the per-round ratios "
              f"(min–max)." if rounds > 1 else "One round.") +
             " Reclaimer and advancer CPU: shares of the workers' CPU; log ÷ hot: the log's "
             "bytes over those of the words written in the last 256 ms (averaged over the run)."]
    if cold_systems:
        notes.append("In this run only pmrt was prewarmed (" + ", ".join(
            s if s != "pmdk" else "PMDK" for s in systems if s in cold_systems) +
            " started cold).")
    lines += [Note(n) for n in notes]
    pre = []
    for d in ("uniform", "zipf"):
        for k in (1, 16):
            p, m = (tx_runs(rows, s, k, d, 1, prefetch=True) for s in ("pmrt", "pmdk"))
            if p and m:
                pre.append([d, k, ratio(paired(p, m, "ops_per_sec")),
                            ratio(paired(p, m, "ops_per_worker_cpu_sec"))])
    if pre:
        lines += ["", "With `--prefetch` (every system prefetches the next transaction's words):",
                  ""] + table(["dist", "K", "pmrt / PMDK wall", "pmrt / PMDK worker CPU"], pre)
    cold = []
    for d in ("uniform", "zipf"):
        for k in (1, 4, 16):
            c = {r.get("round", 0): r for r in rows if r["system"] == "pmrt"
                 and r["words"] == k and r["dist"] == d and r["threads"] == 1
                 and r["seconds"] < 8 and not r.get("prewarm") and not r.get("prefetch")}
            if not c:
                continue
            steady = med(r.get("steady_after_s") for r in c.values())
            cold.append(f"{d} K = {k}: {num(med(r['ops_per_sec'] for r in c.values()) / 1e3)} k "
                        f"tx/s" + ("" if steady is None else f", steady after {steady:.1f} s"))
    if cold:
        lines.append(Note("Cold start (pmrt neither prewarmed nor warmed up, default options, "
                          "1 thread; the rate over the whole run): " + "; ".join(cold) + "."))
    for r in rows:
        if r["system"] == "pmrt" and r["seconds"] >= 8 and "log_bytes_avg" in r:
            lines.append(Note(f"Steady state of the log, pmrt K = {r['words']} {r['dist']}, "
                      f"{r['seconds']:.0f} s: average {r['log_bytes_avg'] / MIB:.1f} MiB, "
                      f"maximum {r['log_bytes_max'] / MIB:.1f} MiB against a "
                      f"{r['log_budget'] / MIB:.0f} MiB budget; compacted log "
                      f"{r['compact_bytes'] / MIB:.1f} MiB; {r['reclaim_cycles']} reclamation "
                      f"cycles; {r['snapshots_per_commit']:.3f} snapshots per commit."))
    return lines


def render_txn_reopen(rows):
    body = [[f"{r['pool_bytes'] / MIB:,.0f} MiB", f"{r['log_budget'] / MIB:.1f} MiB",
             f"{r['log_owned_end_of_run'] / MIB:.1f} MiB", f"{r['log_owned_bytes'] / MIB:.2f} MiB",
             f"{r['reopen_ms_median']:.2f} ({r['reopen_ms_max']:.2f})"]
            for r in sorted(rows, key=lambda r: r["pool_bytes"]) if r.get("bench") == "txn-reopen"]
    if not body:
        return ["No txn-reopen records in this file."]
    n = rows[0].get("txns", 0)
    return table(["pool", "log budget", "log owned at the end of the run", "after 3 s idle",
                  "clean reopen ms, median (max)"], body) + [Note(
        f"{num(n)} transactions of {rows[0].get('words', '?')} words each before the idle "
        "wait; the reopen is `Runtime::Open` (pool, epochs, heap, engine recovery, catalog), "
        "5 times.")]


INDEX_SYSTEMS = [
    ("pmrt-tx", "pmrt: a transaction that puts into a Masstree and increments a counter word"),
    ("pmdk-btree", "PMDK: libpmemobj transaction on a B+-tree (ordered)"),
    ("pmdk", "PMDK: libpmemobj transaction on a hash map (unordered)"),
    ("pmrt-epoch", "pmrt: the Masstree put on the epoch scope (not durable at return)"),
    ("pmrt-word", "pmrt: the one-word transaction alone (no index update)"),
]


def render_index_txbench(rows):
    tp = [r for r in rows if r.get("bench") == "index-txbench"]
    body = []
    for sys_, what in INDEX_SYSTEMS:
        cells = [what]
        fences = []
        for d in ("zipf", "uniform"):
            r = next((x for x in tp if x["system"] == sys_ and x["dist"] == d), None)
            if r is None:
                cells += ["–", "–", "–"]
                continue
            cells.append(f"{num(r['ops_per_sec'])} ({num(r['ops_per_cpu_sec'])})")
            for base_sys in ("pmdk-btree", "pmdk"):
                base = next((x for x in tp if x["system"] == base_sys and x["dist"] == d), None)
                cells.append(f"{r['ops_per_sec'] / base['ops_per_sec']:.2f}×" if base else "–")
            if r.get("fences_per_update") is not None:
                fences.append(f"{r['fences_per_update']:.3f}")
        cells.append(" / ".join(fences) if fences else "–")
        body.append(cells)
    lines = table(["system", "Zipfian 0.99: ops/s wall (per process-CPU-s × threads)",
                   "/ PMDK B+-tree", "/ PMDK hash", "uniform", "/ B+-tree", "/ hash",
                   "fences per update (Zipfian / uniform)"], body)
    for r in rows:
        if r.get("bench") == "index-restart":
            steps = ""
            if "trial_ms" in r:
                steps = (f" The open: the trial open {r['trial_ms']:.1f} ms, the engine's recovery "
                         f"{r['engine_ms']:.1f} ms (journaling the operations "
                         f"{r['journal_ms']:.1f} ms); {num(r['pending_at_first_get'])} still "
                         f"pending at the first answer (applied in the background).")
            budget = ""
            if r.get("log_budget"):
                budget = (f" (transaction log budget {r['log_budget'] / 2**20:g} MiB, "
                          f"{num(r['records_replayed'])} log records replayed)")
            lines.append(Note(f"Restart after a crash with {num(r['keys'])} keys{budget}: open "
                      f"{r['open_ms']:.1f} ms, the first answer after {r['first_get_ms']:.1f} ms "
                      f"({'found' if r.get('found') else 'NOT FOUND'}), "
                      f"{num(r['replayed_index_ops'])} index operations of committed "
                      f"transactions to replay.{steps}"))
    return lines


# --------------------------------------------------------------------------------------------
# Allocator (bench/allocbench*.sh, pmrt-space)

ALLOC_TESTS = [("threadtest", 1), ("threadtest", 2), ("shbench", 1), ("shbench", 2),
               ("larson", 1), ("larson", 2), ("prodcon", 2)]


def alloc_name(r):
    """The allocator, with pmrt's equal-durability runs as their own: pmrt/sync1, pmrt/sync64."""
    d = r.get("durability", "")
    return r["allocator"] + ("/sync" + d.split()[2] if d.startswith("Sync every") else "")


def alloc_rounds(rows):
    """{(test, threads, name): [runs in order]}: run i of each allocator is round i."""
    out = {}
    for r in rows:
        if r.get("test") != "restart":
            out.setdefault((r["test"], r["threads"], alloc_name(r)), []).append(r)
    return out


def alloc_key(test):
    # prodcon's consumer spins on an empty queue, which CPU time would count as work: wall.
    return "ops_per_sec" if test == "prodcon" else "ops_per_cpu_sec"


def per_round(a, b, key):
    return [x[key] / y[key] for x, y in zip(a, b)]


def render_allocbench(rows):
    rounds = alloc_rounds(rows)
    body = []
    for t, n in ALLOC_TESTS:
        r = {a: rounds.get((t, n, a)) for a in ("pmrt", "pmdk", "malloc")}
        if not r["pmrt"]:
            continue
        k = alloc_key(t)
        mm = lambda a: f"{med(x[k] for x in r[a]) / 1e6:.2f}" if r[a] else "–"
        rp = per_round(r["pmrt"], r["pmdk"], k) if r["pmdk"] else []
        rm = per_round(r["pmrt"], r["malloc"], k) if r["malloc"] else []
        ok = lambda xs, target: "–" if not xs else ("met" if statistics.median(xs) >= target
                                                    else "**missed**")
        fences = med(x.get("fences_per_op") for x in r["pmrt"])
        body.append([t + (" (wall)" if t == "prodcon" else ""), n, mm("pmrt"), mm("pmdk"),
                     mm("malloc"), ratio(rp, 1), ratio(rm, 2),
                     "–" if fences is None else f"{fences:.6f}",
                     f"{ok(rp, 30)} / {ok(rm, 0.7)}"])
    if not body:
        return ["No allocator runs in this file."]
    nr = max(len(v) for v in rounds.values())
    return table(["test", "T", "pmrt", "PMDK", "glibc", "pmrt / PMDK", "pmrt / glibc",
                  "pmrt fences / call", "≥ 30× PMDK / ≥ 0.7× glibc"], body) + [Note(
        f"M calls per process-CPU-second × threads (prodcon: per wall second), medians of "
        f"{nr} round{'s' if nr != 1 else ''}; ratios: median of the per-round ratios (min–max).")]


def render_alloc_restart(rows):
    rs = [r for r in rows if r.get("test") == "restart"]
    if not rs:
        return ["No restart runs in this file (bench/allocbench.sh with RESTART=1)."]
    body = []
    for r in rs:
        parts = "–"
        if r["allocator"] == "pmrt":
            parts = (f"{r['pool_open_ms']:.2f} / {r['epochs_open_ms']:.2f} / "
                     f"{r['heap_open_ms']:.2f}")
        body.append([r["allocator"], r["case"], num(r["objects"]),
                     f"{r['open_ms']:.2f} ({r['open_ms_min']:.2f}–{r['open_ms_max']:.2f})", parts,
                     f"{r['first_alloc_ms']:.2f}", f"{r['open_plus_first_alloc_ms']:.2f}",
                     num(r["live_blocks"])])
    return table(["allocator", "case", "live objects", "open ms, median (min–max)",
                  "pmrt: Pool / Manager / Heap ms", "first allocation ms",
                  "open + first allocation ms", "live blocks after"], body)


def render_alloc_equal(rows):
    rounds = alloc_rounds(rows)
    names = ("pmdk", "malloc", "pmrt", "pmrt/sync1", "pmrt/sync64")
    body = []
    for t, n in ALLOC_TESTS:
        r = {a: rounds.get((t, n, a)) for a in names}
        if not r["pmdk"] or not (r["pmrt/sync1"] or r["pmrt/sync64"]):
            continue
        k = alloc_key(t)
        mm = lambda a: f"{med(x[k] for x in r[a]) / 1e6:.3f}" if r[a] else "–"
        def rr(a, b, digits):
            return ratio(per_round(r[a], r[b], k), digits) if r[a] and r[b] else "–"
        body.append([t + (" (wall)" if t == "prodcon" else ""), n, mm("pmdk"), mm("malloc"),
                     mm("pmrt"), mm("pmrt/sync1"), mm("pmrt/sync64"), rr("pmrt", "pmdk", 1),
                     rr("pmrt", "malloc", 2), rr("pmrt/sync1", "pmdk", 2),
                     rr("pmrt/sync64", "pmdk", 1)])
    if not body:
        return ["No equal-durability runs (--pmrt-sync-every) in this file."]
    return table(["test", "T", "PMDK", "glibc", "pmrt, epoch", "pmrt, Sync every call",
                  "pmrt, Sync every 64 calls", "epoch / PMDK", "epoch / glibc",
                  "every call / PMDK", "every 64 / PMDK"], body) + [Note(
        "M calls per process-CPU-second × threads (prodcon: per wall second); PMDK's every "
        "call is durable when it returns, pmrt's at the next epoch boundary (epoch), or after "
        "an `epoch::Manager::Sync` every call or every 64 calls of a thread (shared frees).")]


def render_alloc_shared(rows):
    runs = {}
    for r in rows:
        runs.setdefault((r["test"], r["threads"], r.get("pmrt_free")), []).append(r)
    body = []
    for t, n in ALLOC_TESTS:
        u, s = runs.get((t, n, "unshared"), []), runs.get((t, n, "shared"), [])
        if not u or not s:
            continue
        k = alloc_key(t)
        body.append([t + (" (wall)" if t == "prodcon" else ""), n,
                     f"{med(x[k] for x in u) / 1e6:.1f}", f"{med(x[k] for x in s) / 1e6:.1f}",
                     ratio([b[k] / a[k] for a, b in zip(u, s)], times=False),
                     f"{num(med(x['heap_footprint_mib'] for x in u))} / "
                     f"{num(med(x['heap_footprint_mib'] for x in s))} MiB",
                     f"{num(med(x['epoch_advances'] for x in u))} / "
                     f"{num(med(x['epoch_advances'] for x in s))}"])
    if not body:
        return ["No shared/unshared pairs in this file."]
    return table(["test", "T", "unshared", "shared", "shared / unshared (min–max)",
                  "footprint unshared / shared", "epoch advances unshared / shared"], body) + [Note(
        "M calls per process-CPU-second × threads (prodcon: per wall second), medians of the "
        "rounds; ratio: median of the per-round ratios.")]


def render_alloc_ab(rows):
    body = []
    for t, n in ALLOC_TESTS:
        sel = [r for r in rows if r["test"] == t and r["threads"] == n]
        base = {r["round"]: r for r in sel if r.get("build") == "base"}
        new = {r["round"]: r for r in sel if r.get("build") == "new"}
        if not base or not new:
            continue
        body.append([t, n, f"{med(r['ops_per_sec'] for r in base.values()) / 1e6:.1f} M",
                     f"{med(r['ops_per_sec'] for r in new.values()) / 1e6:.1f} M",
                     ratio(paired(new, base, "ops_per_sec"), 3, times=False)])
    if not body:
        return ["No base/new pairs in this file."]
    nr = len({r["round"] for r in rows})
    return table(["test", "T", "before (base) calls/s", "after (new) calls/s",
                  "after / before (min–max)"], body) + [Note(
        f"Wall-clock calls per second, medians of {nr} rounds; ratio: median of the "
        "per-round ratios.")]


def render_space(rows):
    body = []
    for r in sorted(rows, key=lambda r: r.get("seed", 0)):
        if r.get("bench") != "space":
            continue
        with_meta = r["pmrt_live"] / (r["pmrt_chunk_bytes"] + r["pmrt_meta_bytes"])
        body.append([r["seed"], f"{r['pmrt_live'] / MIB:.1f}",
                     f"{r['pmrt_chunk_bytes'] / MIB:.1f} (+{r['pmrt_meta_bytes'] / MIB:.1f})",
                     f"{r['pmrt_efficiency']:.3f} ({with_meta:.3f})",
                     f"{(r['pmrt_usable_bytes'] - r['pmrt_live']) / MIB:.1f} / "
                     f"{r['pmrt_free_in_small_chunks'] / MIB:.1f}",
                     f"{r['malloc_rss_bytes'] / MIB:.1f}", f"{r['malloc_rss_efficiency']:.3f}",
                     f"{r['pmrt_efficiency'] / r['malloc_rss_efficiency']:.3f}"])
    if not body:
        return ["No space records in this file."]
    r0 = rows[0]
    return table(["seed", "live MiB", "pmrt chunks MiB (+ metadata)",
                  "pmrt efficiency (with metadata)",
                  "pmrt: size rounding / free in small chunks, MiB", "glibc RSS growth MiB",
                  "glibc efficiency", "pmrt / glibc"], body) + [Note(
        f"Efficiency: requested bytes live ÷ bytes held, after filling {r0.get('live_mb')} "
        f"MiB and {num(r0.get('churn'))} churn operations.")]


# --------------------------------------------------------------------------------------------
# Masstree value checksums, server


def render_value_checksums(rows):
    body = []
    for w in "ac":
        for d in ("uniform", "zipf"):
            on = [r for r in rows if r["workload"] == w and r["dist"] == d and r["value_checksums"]]
            off = [r for r in rows if r["workload"] == w and r["dist"] == d
                   and not r["value_checksums"]]
            if not on or not off:
                continue
            rc = sorted(a["ops_per_cpu_sec"] / b["ops_per_cpu_sec"] for a, b in zip(on, off))
            rw = [a["ops_per_sec"] / b["ops_per_sec"] for a, b in zip(on, off)]
            q = (statistics.quantiles(rc, n=4, method="inclusive") if len(rc) >= 2
                 else [rc[0], rc[0], rc[0]])
            body.append([WORKLOADS[w] if d == "uniform" else w.upper(), d, len(rc),
                         f"{med(r['ops_per_cpu_sec'] for r in on) / 1e6:.2f}",
                         f"{med(r['ops_per_cpu_sec'] for r in off) / 1e6:.2f}",
                         f"**{statistics.median(rc):.2f}** ({q[0]:.2f}–{q[2]:.2f})",
                         f"{statistics.median(rw):.2f}"])
    if not body:
        return ["No on/off pairs in this file."]
    return table(["workload", "dist", "rounds", "with checksums, M ops/s per CPU-s",
                  "without", "with / without, process CPU (interquartile range)",
                  "with / without, wall"], body) + [Note(
        "Ratios: median of the per-round ratios (each round runs the tree with and without "
        "checksums back to back).")]


SERVERS = [("pmrt", "pmrt serve (durable Masstree, pmem backend)"),
           ("redis-nopersist", "redis-server, persistence off"),
           ("redis-aof-everysec", "redis-server, appendonly yes + appendfsync everysec"),
           ("redis-aof-always", "redis-server, appendonly yes + appendfsync always"),
           ("pmrt-cluster3", "3 pmrt serve shards behind nutcracker")]
SERVER_TESTS = ("SET", "GET", "INCR", "MSET", "HSET", "MULTI")


def render_server(rows):
    runs = [r for r in rows if r.get("bench") == "server"]
    if not runs:
        return ["No server records in this file."]
    lines = []
    present = [t for t in SERVER_TESTS if any(r["test"] == t for r in runs)]
    cols = [(t, p) for p in sorted({r["pipeline"] for r in runs}) for t in present]
    for ks in sorted({r.get("keyspace", 1) for r in runs}):
        sel = [r for r in runs if r.get("keyspace", 1) == ks]
        rps = {(r["system"], r["test"], r["pipeline"]): r["rps"] for r in sel}
        ours = [s for s, _ in SERVERS]
        known = ours + sorted({r["system"] for r in sel} - set(ours))
        names = dict(SERVERS)
        body = []
        for s in known:
            if any((s, t, p) in rps for t, p in cols):
                body.append([names.get(s, s)] + [num(rps.get((s, t, p))) for t, p in cols])
        for s in known[1:]:
            if s == "pmrt-cluster3":
                continue  # pmrt behind its own proxy: its row is enough, no ratio
            ratios = [rps[("pmrt", t, p)] / rps[(s, t, p)] if ("pmrt", t, p) in rps and
                      (s, t, p) in rps else None for t, p in cols]
            if any(x is not None for x in ratios):
                body.append([f"pmrt / {names.get(s, s).replace('redis-server, ', 'redis, ')}"] +
                            ["–" if x is None else f"{x:.2f}×" for x in ratios])
        if lines:
            lines.append("")
        if ks != 1 or len({r.get("keyspace", 1) for r in runs}) > 1:
            lines += [f"Keyspace {num(ks)} (`redis-benchmark -r {ks}`):", ""]
        lines += table(["requests/s"] + [f"{t} -P {p}" for t, p in cols], body)
    r0 = runs[0]
    rb = [t.lower() for t in present if t != "MULTI"]
    multi = (" MULTI: transactions (EXECs) per second of `pmrt-server-txbench` (`MULTI; SET; "
             "INCR; EXEC`, the same clients and pipeline depth, random keys among 100,000; "
             "not through the proxy, which refuses `MULTI`)." if "MULTI" in present else "")
    lines.append(Note(f"`redis-benchmark -t {','.join(rb)} "
                      f"-n {r0.get('n')}`, {r0.get('clients')} "
                      f"clients, median of {r0.get('repeat')} runs, each against a fresh server."
                      + multi))
    return lines


# --------------------------------------------------------------------------------------------
# Google Benchmark output (epoch_bench, persist_bench)

GB_COUNTERS = {
    "BM_FlushShare": ["lines_per_epoch", "flush_share_pct", "boundary_share_pct", "ns_per_line",
                      "advancer_cpu_pct", "Mops_s", "base_Mops_s"],
    "BM_Boundary": ["lines", "ns_per_line", "cpu_us", "cpu_ns_per_line"],
}
GB_SKIP = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
           "iterations", "real_time", "cpu_time", "time_unit", "family_index",
           "per_family_instance_index", "aggregate_name", "aggregate_unit", "_context",
           "error_occurred", "error_message", "label"}


def sig(v):
    """A counter: thousands separated from 1,000 up, else three significant digits."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def duration(v, unit):
    """A Google Benchmark time in the unit that keeps it between 1 and 1000."""
    ns = v * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}.get(unit, 1)
    for name, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{sig(ns / scale)} {name}"
    return f"{sig(ns)} ns"


def render_gbench(rows):
    # Repetitions (--benchmark_repetitions): the median of each benchmark only.
    if any(b.get("run_type") == "aggregate" for b in rows):
        rows = [b for b in rows if b.get("aggregate_name") == "median"]
    fams = {}
    for b in rows:
        fams.setdefault(b["name"].split("/")[0], []).append(b)
    lines = []
    for fam, bs in fams.items():
        counters = GB_COUNTERS.get(fam) or [k for k in bs[0] if k not in GB_SKIP
                                             and isinstance(bs[0][k], (int, float))]
        body = []
        for b in bs:
            name = re.sub(r"/(iterations:\d+|manual_time|real_time)", "", b.get("run_name", b["name"]))
            if b.get("label"):
                name += f" ({b['label']})"
            unit = b.get("time_unit", "ns")
            body.append([f"`{name}`", duration(b["real_time"], unit),
                         duration(b["cpu_time"], unit)] +
                        ["–" if b.get(c) is None else sig(b[c]) for c in counters])
        if lines:
            lines.append("")
        lines += table(["benchmark", "wall", "CPU"] + counters, body)
    return lines or ["No benchmarks in this file."]


# --------------------------------------------------------------------------------------------
# The tables: marker name -> (results file, suite of summary.json / SUITE.txt, renderer,
# command that reproduces the file). A file in FILE_NOTES names the machine of records that do
# not, while the file's SHA-256 starts with the given prefix (a rerun drops the note).

FORCE = "PMEM_IS_PMEM_FORCE=1 "
TABLES = {
    "ycsb-recovery": ("ycsb.jsonl", "ycsb", render_ycsb_recovery, "bench/report.sh --only ycsb"),
    "masstree-ab": (
        "masstree-ab.jsonl", None, render_masstree_ab,
        "REPEAT=3 OPS=1000000 ROUNDS=2 OUT=bench/results/masstree-ab.jsonl bench/ycsb_ab.sh "
        "--build-base BASE"),
    "value-checksums-ab": (
        "value-checksums-ab.jsonl", None, render_value_checksums,
        "OUT=bench/results/value-checksums-ab.jsonl bench/value_checksums_ab.sh "
        "build/release/bench/pmrt-ycsb"),
    "txbench": ("txbench.jsonl", "txbench", render_txbench, "bench/report.sh --only txbench"),
    "txn-reopen": (
        "txn-reopen.jsonl", None, render_txn_reopen,
        "rm -f bench/results/txn-reopen.jsonl; build/release/bench/pmrt-txn-reopen --sizes "
        "256M,2G,8G --txns 1000000 --json bench/results/txn-reopen.jsonl"),
    "index-txbench": (
        "index-txbench.jsonl", None, render_index_txbench,
        "OUT=bench/results/index-txbench.jsonl bench/index_txbench.sh "
        "build/release/bench/pmrt-index-txbench"),
    "allocbench": ("allocbench.jsonl", "allocbench", render_allocbench,
                   "bench/report.sh --only allocbench"),
    "allocbench-restart": ("allocbench.jsonl", "allocbench", render_alloc_restart,
                           "bench/report.sh --only allocbench"),
    "allocbench-equal-durability": (
        "allocbench-equal-durability.jsonl", None, render_alloc_equal,
        "RUN_SECONDS=1 REPEAT=1 RESTART=0 OUT=bench/results/allocbench-equal-durability.jsonl "
        "bench/allocbench.sh build/release/bench/pmrt-allocbench"),
    "allocbench-shared": (
        "allocbench-shared.jsonl", None, render_alloc_shared,
        "bench/allocbench_shared.sh build/release/bench/pmrt-allocbench"),
    "allocbench-growth-ab": (
        "allocbench-growth-ab.jsonl", None, render_alloc_ab,
        "REPEAT=4 OUT=bench/results/allocbench-growth-ab.jsonl bench/allocbench_ab.sh "
        "BASE/bench/pmrt-allocbench build/release/bench/pmrt-allocbench"),
    "space": (
        "space.jsonl", None, render_space,
        "rm -f bench/results/space.jsonl; for s in 1 2 3; do build/release/bench/pmrt-space "
        "--live-mb 256 --churn 400000 --seed $s --json bench/results/space.jsonl; done"),
    "server": ("server.jsonl", "server", render_server, "bench/report.sh --only server"),
    "epoch-bench": (
        "epoch-bench.json", None, render_gbench,
        FORCE + "build/release/bench/epoch_bench --benchmark_filter=BM_FlushShare "
        "--benchmark_out=bench/results/epoch-bench.json --benchmark_out_format=json && "
        "bench/stamp_cpu.py bench/results/epoch-bench.json"),
    "persist-bench": (
        "persist-bench.json", None, render_gbench,
        FORCE + "build/release/bench/persist_bench --benchmark_filter='BM_PersistLine|"
        "BM_RecordPersist/./(1|64)$|BM_FlushBatch/(64|8192)$' --benchmark_repetitions=3 "
        "--benchmark_report_aggregates_only=true --benchmark_out=bench/results/persist-bench.json "
        "--benchmark_out_format=json && bench/stamp_cpu.py bench/results/persist-bench.json"),
}

_EPYC = "2 vCPUs, AMD EPYC family 25 model 1"
# file: (SHA-256 prefix, machine or None, a note on the run or None[, the tables the note is for])
FILE_NOTES = {
    "ycsb.jsonl": ("913816d4fabb", None,
                   "The transient tree of this run allocated its nodes and values from glibc "
                   "(before the transient twin's per-thread node cache), which favours the "
                   "durable tree; the A/B table's durable ÷ transient is the comparison to read.",
                   {"ycsb"}),
    "allocbench-equal-durability.jsonl": ("71fc56f66119", _EPYC, None),
    "allocbench-shared.jsonl": ("c4bd5fa4165d", _EPYC, None),
    "allocbench-growth-ab.jsonl": ("a230a3636e6f", _EPYC, None),
    "space.jsonl": ("a2d0b66d4d7f", _EPYC, None),
    "index-txbench.jsonl": ("a57a863cfef5", _EPYC, None),
    "value-checksums-ab.jsonl": ("31daacc3a167", _EPYC, None),
}


def file_note(results, file, table=None):
    """FILE_NOTES' (machine, note for the table) while the file is unchanged, else (None, None)."""
    note = FILE_NOTES.get(file)
    path = os.path.join(results, file)
    if note and os.path.exists(path) and sha256_prefix(path) == note[0]:
        applies = len(note) < 4 or table in note[3]
        return note[1], note[2] if applies else None
    return None, None


def sha256_prefix(path, n=12):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:n]


def machine_of(results, file, suite, rows, meta):
    """The machine a results file ran on (see the module comment), or None."""
    if rows and isinstance(rows[0], dict) and "_context" in rows[0]:
        ctx = rows[0]["_context"]
        if ctx.get("cpu"):  # bench/stamp_cpu.py
            return str(ctx["cpu"])
        if ctx.get("num_cpus"):
            mhz = f" at {ctx['mhz_per_cpu']:,} MHz" if ctx.get("mhz_per_cpu") else ""
            return f"{ctx['num_cpus']} CPUs{mhz} (Google Benchmark's context)"
    own = sorted({str(r.get("cpu") or r.get("machine")) for r in rows or []
                  if (r.get("cpu") or r.get("machine")) not in (None, "", "unknown")})
    if own:
        return "; ".join(own)
    if suite:
        if meta.get(suite + "_machine"):
            return meta[suite + "_machine"]
        txt = os.path.join(results, suite + ".txt")
        if os.path.exists(txt):
            with open(txt, encoding="utf-8") as f:
                for line in f:
                    m = re.match(r"#\s*machine:\s*(.*?)(,\s*load average.*)?$", line.strip())
                    if m:
                        return m.group(1)
        # summary.json's machine is that of the last bench/report.sh run: this suite's when its
        # date is the latest of the suites'.
        dates = {k[:-5]: v for k, v in meta.items() if k.endswith("_date")}
        if meta.get("machine") and dates.get(suite) and dates[suite] == max(dates.values()):
            return meta["machine"]
    noted, _ = file_note(results, file)
    if noted:
        return noted + " (noted by hand: the records do not name it)"
    return None


def render_block(name, results, meta):
    file, suite, render, command = TABLES[name]
    path = os.path.join(results, file)
    rows = read_gbench(path) if file.endswith(".json") else read_jsonl(path)
    if rows is not None and not file.endswith(".json"):
        rows = latest_run(rows)
    if not rows:
        return [f"No results yet; run `{command}`."]
    out = render(rows)
    lines = [x for x in out if not isinstance(x, Note)]
    notes = [x for x in out if isinstance(x, Note)]
    _, note = file_note(results, file, name)
    if note:
        notes.append(note)
    if suite and meta.get(suite + "_mode") == "quick":
        notes.append("A `--quick` (smoke) run: reduced sizes, not for comparison.")
    if suite and meta.get(suite + "_status", "ok") != "ok":
        notes.append(f"The suite's status: {meta[suite + '_status']}.")
    machine = machine_of(results, file, suite, rows, meta) or "not recorded"
    notes.append(f"Results: `bench/results/{file}`; machine: {machine}; reproduce: `{command}`.")
    return lines + ["", " ".join(notes)]


# --------------------------------------------------------------------------------------------
# The page

MARK = re.compile(r"<!-- table:([A-Za-z0-9_.-]+) -->")


def regenerate(text, results, meta):
    """The page with every marked table regenerated; raises ValueError on a bad marker."""
    out, pos = [], 0
    for m in MARK.finditer(text):
        if m.start() < pos:
            continue
        name = m.group(1)
        if name not in TABLES:
            raise ValueError(f"unknown table '{name}' (known: {', '.join(sorted(TABLES))})")
        end_mark = f"<!-- /table:{name} -->"
        end = text.find(end_mark, m.end())
        if end < 0:
            raise ValueError(f"<!-- table:{name} --> has no {end_mark}")
        block = "\n".join(render_block(name, results, meta))
        out.append(text[pos:m.end()])
        out.append("\n" + block + "\n")
        pos = end
    out.append(text[pos:])
    return "".join(out)


# docs/performance.md is a current-state page: --check fails it past this many lines.
MAX_PAGE_LINES = 400


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 when the page's tables differ from the results")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--page", default=os.path.join(ROOT, "docs", "performance.md"))
    ap.add_argument("--render", nargs=2, metavar=("TABLE", "FILE"),
                    help="print TABLE's table from the JSON-lines FILE and exit")
    args = ap.parse_args(argv)
    if args.render:
        name, path = args.render
        if name not in TABLES:
            print(f"perf_tables.py: unknown table {name}", file=sys.stderr)
            return 2
        rows = latest_run(read_jsonl(path) or [])
        print("\n".join(TABLES[name][2](rows)))
        return 0

    meta = {}
    summary = os.path.join(args.results, "summary.json")
    if os.path.exists(summary):
        with open(summary, encoding="utf-8") as f:
            meta = json.load(f).get("meta", {})
    with open(args.page, encoding="utf-8") as f:
        text = f.read()
    try:
        new = regenerate(text, args.results, meta)
    except ValueError as e:
        print(f"perf_tables.py: {args.page}: {e}", file=sys.stderr)
        return 2
    missing = sorted(set(TABLES) - set(MARK.findall(text)))
    if missing:
        print(f"perf_tables.py: not on the page: {', '.join(missing)}", file=sys.stderr)
    if args.check:
        lines = new.count("\n")
        if os.path.basename(args.page) == "performance.md" and lines > MAX_PAGE_LINES:
            print(f"perf_tables.py: {args.page} has {lines} lines; a current-state page keeps to "
                  f"{MAX_PAGE_LINES} (history goes to bench/results/history/)", file=sys.stderr)
            return 1
        if new != text:
            old_blocks = dict(blocks(text))
            changed = [n for n, b in blocks(new) if old_blocks.get(n) != b]
            print(f"perf_tables.py: {args.page} differs from {args.results} in: "
                  f"{', '.join(changed)}; run bench/perf_tables.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        with open(args.page, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"perf_tables.py: {args.page} updated")
    else:
        print(f"perf_tables.py: {args.page} up to date")
    return 0


def blocks(text):
    """(name, content) of every marked block of a page."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"<!-- table:([A-Za-z0-9_.-]+) -->(.*?)<!-- /table:\1 -->", text, re.S)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
