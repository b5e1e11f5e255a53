#!/usr/bin/env python3
"""Tests of bench/report_charts.py: medians, filters, missing values, files written.

    report_charts_test.py BENCH_DIR      (the directory holding report_charts.py)
"""

import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else
                os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import report_charts  # noqa: E402


def ycsb(run, w, d, variant, ops):
    return {"run": run, "workload": w, "dist": d, "variant": variant, "ops_per_sec": ops}


YCSB = [
    ycsb(1, "a", "uniform", "transient", 1.0e6), ycsb(1, "a", "uniform", "durable", 0.9e6),
    ycsb(2, "a", "uniform", "transient", 3.0e6), ycsb(2, "a", "uniform", "durable", 1.1e6),
    ycsb(3, "a", "uniform", "transient", 2.0e6), ycsb(3, "a", "uniform", "durable", 1.0e6),
    ycsb(1, "e", "zipf", "durable", 0.5e6),  # no transient run: NaN
    {"mode": "recovery", "keys": 1000000, "to_first_get_ms": 2.0},
]
TX = [
    {"system": "pmrt", "words": 4, "dist": "zipf", "threads": 1, "seconds": 2, "prewarm": True,
     "ops_per_sec": 4000.0},
    {"system": "pmrt", "words": 4, "dist": "zipf", "threads": 1, "seconds": 2, "prewarm": False,
     "ops_per_sec": 1.0},  # cold start: not charted
    {"system": "pmrt", "words": 4, "dist": "zipf", "threads": 1, "seconds": 10, "prewarm": True,
     "ops_per_sec": 2.0},  # steady-state run: not charted
    {"system": "pmdk", "words": 4, "dist": "zipf", "threads": 1, "seconds": 2, "ops_per_sec": 1000.0},
]
ALLOC = [
    {"allocator": "pmrt", "test": "threadtest", "threads": 1, "ops_per_cpu_sec": 60e6,
     "ops_per_sec": 30e6},
    {"allocator": "malloc", "test": "threadtest", "threads": 1, "ops_per_cpu_sec": 120e6,
     "ops_per_sec": 100e6},
    {"allocator": "pmrt", "test": "prodcon", "threads": 2, "ops_per_cpu_sec": 1e6,
     "ops_per_sec": 7e6},
    {"allocator": "pmrt", "test": "restart", "threads": 1, "open_ms": 1.0},
]
SERVER = [
    {"bench": "server", "system": "redis-nopersist", "test": "SET", "pipeline": 16, "rps": 9e5},
    {"bench": "server", "system": "pmrt", "test": "SET", "pipeline": 16, "rps": 8e5},
    {"bench": "server", "system": "pmrt", "test": "GET", "pipeline": 1, "rps": 1e5},
]


def rows_of(chart):
    return {label: values for label, values in chart.rows}


class ReportChartsTest(unittest.TestCase):
    def test_ycsb_medians_and_missing(self):
        c = report_charts.ycsb_chart(YCSB)
        self.assertEqual(c.columns, ["transient", "durable"])
        r = rows_of(c)
        self.assertEqual(list(r), ["A uniform", "E zipf"])  # workload order, recovery ignored
        self.assertEqual(r["A uniform"], [2.0e6, 1.0e6])
        self.assertTrue(math.isnan(r["E zipf"][0]))
        self.assertEqual(c.data_text().splitlines(),
                         ["# group transient durable", '"A uniform" 2 1', '"E zipf" NaN 0.5'])

    def test_txbench_keeps_prewarmed_short_runs(self):
        c = report_charts.txbench_chart(TX)
        self.assertEqual(c.columns, ["pmrt", "pmdk"])
        self.assertEqual(rows_of(c), {"zipf K=4": [4000.0, 1000.0]})
        self.assertTrue(c.log)
        # Only the note that T=2 runs pmrt and PMDK alone; no "no result" line.
        self.assertEqual(len(c.notes), 1)

    def test_txbench_two_threads_lack_undo_and_plain_by_design(self):
        rows = TX + [{"system": s, "words": 4, "dist": "zipf", "threads": t, "seconds": 2,
                      "ops_per_sec": 1.0} for s, t in (("undo", 1), ("pmdk", 2))]
        c = report_charts.txbench_chart(rows)
        self.assertTrue(math.isnan(rows_of(c)["zipf K=4 T=2"][2]))  # undo at T=2
        self.assertEqual([n for n in c.notes if n.startswith("no result")],
                         ["no result for pmrt zipf K=4 T=2 (see the suite's output in the "
                          "results directory)"])

    def test_allocbench_cpu_figure_and_prodcon_wall(self):
        c = report_charts.allocbench_chart(ALLOC)
        self.assertEqual(c.columns, ["pmrt", "malloc"])
        r = rows_of(c)
        self.assertEqual(r["threadtest T=1"], [60e6, 120e6])
        self.assertEqual(r["prodcon T=2"][0], 7e6)
        self.assertTrue(math.isnan(r["prodcon T=2"][1]))
        self.assertNotIn("restart T=1", r)
        self.assertIn("no result for malloc prodcon T=2", c.notes[0])

    def test_server_order(self):
        c = report_charts.server_chart(SERVER)
        self.assertEqual(c.columns, ["pmrt", "redis-nopersist"])
        self.assertEqual(list(rows_of(c)), ["GET -P 1", "SET -P 16"])

    def test_empty_suites_give_no_chart(self):
        for make in (report_charts.ycsb_chart, report_charts.txbench_chart,
                     report_charts.allocbench_chart, report_charts.server_chart):
            self.assertIsNone(make([]))

    def test_gnuplot_script_names_its_files(self):
        c = report_charts.allocbench_chart(ALLOC)
        text = c.gnuplot_text("d/allocbench.dat", "img/allocbench.png", "today")
        self.assertIn('set output "img/allocbench.png"', text)
        self.assertIn("set logscale y", text)
        self.assertIn("'d/allocbench.dat' using 2:xtic(1) title 'pmrt'", text)
        self.assertIn("today", text)

    def test_main_data_only_writes_data_and_summary(self):
        with tempfile.TemporaryDirectory() as d:
            for name, rows in (("ycsb", YCSB), ("txbench", TX), ("allocbench", ALLOC)):
                with open(os.path.join(d, name + ".jsonl"), "w") as f:
                    f.write("# a comment line\n")
                    f.writelines(json.dumps(r) + "\n" for r in rows)
            rc = report_charts.main([d, os.path.join(d, "img"), "--data-only",
                                     "--meta", "ycsb_date=2026-11-30 04:00 UTC",
                                     "--meta", "machine=2 CPUs", "--meta", "ycsb_load=1 before"])
            self.assertEqual(rc, 0)
            # A later run of one suite keeps the other suites' meta.
            rc = report_charts.main([d, os.path.join(d, "img"), "--data-only",
                                     "--meta", "txbench_date=2026-11-30 05:00 UTC"])
            self.assertEqual(rc, 0)
            with open(os.path.join(d, "charts", "ycsb.gp")) as f:
                self.assertIn("2026-11-30 04:00 UTC, 2 CPUs, load average 1 before", f.read())
            for name in ("ycsb", "txbench", "allocbench"):
                self.assertTrue(os.path.exists(os.path.join(d, "charts", name + ".dat")))
                self.assertTrue(os.path.exists(os.path.join(d, "charts", name + ".gp")))
            self.assertFalse(os.path.exists(os.path.join(d, "charts", "server.dat")))
            with open(os.path.join(d, "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual(summary["meta"]["ycsb_date"], "2026-11-30 04:00 UTC")
            self.assertEqual(summary["meta"]["txbench_date"], "2026-11-30 05:00 UTC")
            self.assertEqual(summary["charts"]["ycsb"]["rows"][1]["values"], [None, 0.5])

    def test_subtitle_marks_quick_runs(self):
        meta = {"machine": "2 CPUs", "ycsb_date": "d", "ycsb_load": "1 before, 2 after",
                "ycsb_mode": "quick"}
        self.assertEqual(report_charts.subtitle_of(meta, "ycsb"),
                         "d, 2 CPUs, load average 1 before, 2 after, QUICK (smoke) run")
        self.assertEqual(report_charts.subtitle_of(meta, "server"), "2 CPUs")

    def test_main_without_results_fails(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(report_charts.main([d, d, "--data-only"]), 1)


if __name__ == "__main__":
    unittest.main()
