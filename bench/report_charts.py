#!/usr/bin/env python3
"""Turns the JSON lines of bench/report.sh into gnuplot data, gnuplot scripts and PNG charts.

    bench/report_charts.py RESULTS_DIR IMG_DIR [--data-only] [--meta KEY=VALUE ...]

Reads RESULTS_DIR/{ycsb,txbench,allocbench,server}.jsonl (each optional), as written by
bench/ycsb.sh, bench/txbench.sh, bench/allocbench.sh and bench/server_bench.sh, and for each
suite present writes:

    RESULTS_DIR/charts/NAME.dat   one line per group: "label" value value ... (NaN: not measured)
    RESULTS_DIR/charts/NAME.gp    the gnuplot script (a grouped bar chart) drawing IMG_DIR/NAME.png
    IMG_DIR/NAME.png              unless --data-only (needs gnuplot with the pngcairo terminal)

and RESULTS_DIR/summary.json: the --meta pairs (merged over those of an earlier summary.json
there) and, per chart, its columns and rows (the values drawn). Values are medians over repeated
runs of the same configuration.

Charts: ycsb (M ops/s, durable vs transient, per workload and key distribution), txbench
(transactions/s per system, per words per transaction K, log scale), allocbench (M allocator
calls per CPU-second x threads per allocator, per test, log scale; prodcon per wall second),
server (requests/s per server, per command and pipeline depth, log scale).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys


def read_jsonl(path):
    """The JSON objects of a JSON-lines file ([] when it does not exist); skips other lines."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def median_of(rows, key):
    """Median of row[key] over rows, NaN when there are none."""
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else math.nan


class Chart:
    """One grouped bar chart: a value per (group, column).

    columns: the bars of each group (legend entries); rows: [(group label, [value per column])].
    """

    def __init__(self, name, title, ylabel, columns, rows, log=False, scale=1.0, by_design=None,
                 note=""):
        self.name = name
        self.title = title
        self.ylabel = ylabel
        self.columns = columns
        self.rows = rows
        self.log = log
        self.scale = scale  # the .dat holds value / scale (e.g. 1e6 for millions)
        # Notes under the title: `note`, then the missing bars that by_design(group, column)
        # does not explain (a run that failed or was not made).
        self.notes = [note] if note else []
        missing = [f"{col} {label}" for label, values in rows for col, v in zip(columns, values)
                   if math.isnan(v) and not (by_design and by_design(label, col))]
        if missing:
            self.notes.append("no result for " + ", ".join(missing) +
                              " (see the suite's output in the results directory)")

    def data_text(self):
        """The gnuplot data file: a header comment, then one quoted label and the values."""
        lines = ["# group " + " ".join(c.replace(" ", "_") for c in self.columns)]
        for label, values in self.rows:
            cells = ["NaN" if math.isnan(v) else f"{v / self.scale:.6g}" for v in values]
            lines.append(f'"{label}" ' + " ".join(cells))
        return "\n".join(lines) + "\n"

    def gnuplot_text(self, dat_path, png_path, subtitle):
        """A gnuplot script drawing the chart from dat_path into png_path, with value labels."""
        n = len(self.columns)
        gap = 1
        width = 1.0 / (n + gap)
        colors = ["#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f", "#b07aa1"]
        g = [
            'set terminal pngcairo size 1100,520 font "sans,10"',
            f'set output "{png_path}"',
            f'set title "{self.title}\\n{{/*0.8 {subtitle}}}' +
            "".join(f"\\n{{/*0.8 {n}}}" for n in self.notes) + '"',
            f'set ylabel "{self.ylabel}"',
            "set style data histograms",
            f"set style histogram clustered gap {gap}",
            "set style fill solid 0.85 border -1",
            "set grid ytics lc rgb '#dddddd'",
            "set key top left",
            "set xtics nomirror",
            "set border 3",
            "set ytics nomirror",
            "set datafile missing 'NaN'",
        ]
        if self.log:
            g += ["set logscale y", "set yrange [*:*]"]
        else:
            g += ["set yrange [0:*]"]
        plots = []
        for j, col in enumerate(self.columns):
            using = f"{j + 2}:xtic(1)" if j == 0 else f"{j + 2}"
            plots.append(f"'{dat_path}' using {using} title '{col}' lc rgb '{colors[j % len(colors)]}'")
        for j in range(n):
            offset = (j - (n - 1) / 2.0) * width
            plots.append(
                f"'{dat_path}' using ($0{offset:+.4f}):{j + 2}:"
                f"(${j + 2} >= 100 ? sprintf('%.0f', ${j + 2}) : sprintf('%.3g', ${j + 2})) "
                "with labels offset 0,0.6 font ',7' notitle")
        g.append("plot " + ", \\\n     ".join(plots))
        return "\n".join(line for line in g if line) + "\n"

    def summary(self):
        return {
            "title": self.title,
            "notes": self.notes,
            "unit": self.ylabel,
            "columns": self.columns,
            "rows": [{"group": label,
                      "values": [None if math.isnan(v) else round(v / self.scale, 6) for v in values]}
                     for label, values in self.rows],
        }


def ycsb_chart(rows):
    """Durable vs transient Masstree, M ops per wall second, per workload and distribution."""
    runs = [r for r in rows if r.get("mode") != "recovery" and "variant" in r]
    if not runs:
        return None
    groups = []
    for w in "abce":
        for d in ("uniform", "zipf"):
            sel = [r for r in runs if r["workload"] == w and r["dist"] == d]
            if not sel:
                continue
            values = [median_of([r for r in sel if r["variant"] == v], "ops_per_sec")
                      for v in ("transient", "durable")]
            groups.append((f"{w.upper()} {d}", values))
    return Chart("ycsb", "YCSB on the Masstree: durable (pool, pmem backend) vs transient (malloc)",
                 "M ops/s (wall)", ["transient", "durable"], groups, scale=1e6)


def txbench_chart(rows):
    """Transactions per second per system, per dist, K and threads (the prewarmed runs)."""
    def keep(r):
        return r.get("seconds", 0) < 8 and r.get("prewarm", True)
    runs = [r for r in rows if keep(r)]
    if not runs:
        return None
    systems = [s for s in ("pmrt", "pmdk", "undo", "plain", "floor")
               if any(r["system"] == s for r in runs)]
    groups = []
    for d in ("uniform", "zipf"):
        for k, t in ((1, 1), (4, 1), (16, 1), (4, 2)):
            sel = [r for r in runs if r["dist"] == d and r["words"] == k and r["threads"] == t]
            if not sel:
                continue
            label = f"{d} K={k}" + (f" T={t}" if t != 1 else "")
            groups.append((label, [median_of([r for r in sel if r["system"] == s], "ops_per_sec")
                                   for s in systems]))
    return Chart("txbench", "Transactions: pmrt vs PMDK libpmemobj, an undo log, plain stores, the floor",
                 "k transactions/s (wall, log scale)", systems, groups, log=True, scale=1e3,
                 by_design=lambda label, col: "T=" in label and col in ("undo", "plain", "floor"),
                 note="T=2: pmrt and PMDK only; every system prewarmed; medians of the rounds (bench/txbench.sh)")


def allocbench_chart(rows):
    """Allocator calls per CPU-second x threads (prodcon: per wall second), per test and T."""
    # (pmrt's equal-durability runs, a Sync every N calls, have their own table in
    # bench/allocbench.sh; the chart compares each allocator's own durability.)
    runs = [r for r in rows if r.get("test") != "restart" and "allocator" in r
            and not r.get("durability", "").startswith("Sync every")]
    if not runs:
        return None
    allocators = [a for a in ("pmrt", "pmdk", "malloc") if any(r["allocator"] == a for r in runs)]
    groups = []
    for test in ("threadtest", "shbench", "larson", "prodcon"):
        for t in (1, 2):
            sel = [r for r in runs if r["test"] == test and r["threads"] == t]
            if not sel:
                continue
            key = "ops_per_sec" if test == "prodcon" else "ops_per_cpu_sec"
            groups.append((f"{test} T={t}",
                           [median_of([r for r in sel if r["allocator"] == a], key)
                            for a in allocators]))
    return Chart("allocbench", "Allocator: pmrt's persistent heap vs PMDK and glibc malloc",
                 "M calls per CPU-s x threads (prodcon: wall; log scale)", allocators, groups,
                 log=True, scale=1e6)


def server_chart(rows):
    """redis-benchmark requests per second per server, per command and pipeline depth."""
    runs = [r for r in rows if r.get("bench") == "server"]
    if not runs:
        return None
    order = ["pmrt", "redis-nopersist", "redis-aof-everysec"]
    systems = [s for s in order if any(r["system"] == s for r in runs)]
    systems += sorted({r["system"] for r in runs} - set(systems))
    groups = []
    for p in sorted({r["pipeline"] for r in runs}):
        for test in ("SET", "GET"):
            sel = [r for r in runs if r["pipeline"] == p and r["test"] == test]
            if sel:
                groups.append((f"{test} -P {p}",
                               [median_of([r for r in sel if r["system"] == s], "rps")
                                for s in systems]))
    return Chart("server", "Key-value server: pmrt serve vs redis-server (redis-benchmark, 50 clients)",
                 "k requests/s (log scale)", systems, groups, log=True, scale=1e3)


SUITES = [("ycsb", ycsb_chart), ("txbench", txbench_chart), ("allocbench", allocbench_chart),
          ("server", server_chart)]


def build_charts(results_dir):
    """The charts of every suite whose JSON lines are in results_dir, in SUITES order."""
    charts = []
    for name, make in SUITES:
        chart = make(read_jsonl(os.path.join(results_dir, name + ".jsonl")))
        if chart is not None and chart.rows:
            charts.append(chart)
    return charts


def subtitle_of(meta, suite):
    """When and where a suite ran, from the summary's meta keys: "date, machine, load" (the
    suite's own SUITE_machine where recorded, else the last run's machine)."""
    parts = [meta.get(suite + "_date"), meta.get(suite + "_machine") or meta.get("machine")]
    if suite + "_load" in meta:
        parts.append("load average " + meta[suite + "_load"])
    if meta.get(suite + "_mode") == "quick":
        parts.append("QUICK (smoke) run")
    return ", ".join(p for p in parts if p).replace('"', "'")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir")
    ap.add_argument("img_dir")
    ap.add_argument("--data-only", action="store_true", help="write .dat/.gp, run no gnuplot")
    ap.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                    help="recorded in summary.json (merged over an earlier one); machine and "
                         "SUITE_date, SUITE_load, SUITE_mode go in the chart subtitles")
    args = ap.parse_args(argv)

    summary_path = os.path.join(args.results_dir, "summary.json")
    meta, old_charts = {}, {}
    if os.path.exists(summary_path):  # an earlier run's, for the suites not run this time
        with open(summary_path) as f:
            earlier = json.load(f)
        meta, old_charts = earlier.get("meta", {}), earlier.get("charts", {})
    # A suite that ran before keeps the machine it ran on when this run's machine replaces the
    # summary's (`--only` runs some suites, on whatever machine this is).
    for suite, _ in SUITES:
        if suite + "_date" in meta and "machine" in meta:
            meta.setdefault(suite + "_machine", meta["machine"])
    meta.update(m.split("=", 1) for m in args.meta)
    chart_dir = os.path.join(args.results_dir, "charts")
    os.makedirs(chart_dir, exist_ok=True)
    if not args.data_only:
        os.makedirs(args.img_dir, exist_ok=True)
    charts = build_charts(args.results_dir)
    if not charts:
        print(f"report_charts.py: no benchmark results in {args.results_dir}", file=sys.stderr)
        return 1
    failed = False
    for chart in charts:
        dat = os.path.join(chart_dir, chart.name + ".dat")
        gp = os.path.join(chart_dir, chart.name + ".gp")
        png = os.path.join(args.img_dir, chart.name + ".png")
        with open(dat, "w") as f:
            f.write(chart.data_text())
        with open(gp, "w") as f:
            f.write(chart.gnuplot_text(dat, png, subtitle_of(meta, chart.name)))
        if args.data_only:
            print(f"  {dat}, {gp}")
            continue
        proc = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(png):
            print(f"report_charts.py: gnuplot failed on {gp}:\n{proc.stderr}", file=sys.stderr)
            failed = True
        else:
            print(f"  {png}")
    # The charts of this run, and those of an earlier one whose results are not here any more.
    summaries = dict(old_charts)
    summaries.update({c.name: c.summary() for c in charts})
    with open(summary_path, "w") as f:
        json.dump({"meta": meta, "charts": summaries}, f, indent=1)
        f.write("\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
