#!/usr/bin/env python3
"""Tests of bench/perf_tables.py: the latest run, the marked blocks, --check, missing files.

    perf_tables_test.py BENCH_DIR      (the directory holding perf_tables.py)
"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else
                os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import perf_tables  # noqa: E402

SERVER = [{"bench": "server", "system": s, "test": t, "pipeline": p, "rps": rps, "n": 1000,
           "clients": 50, "repeat": 3}
          for s, rps in (("pmrt", 200.0), ("redis-nopersist", 100.0))
          for t in ("SET", "GET") for p in (1, 16)]


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = perf_tables.main(argv)
    return rc, out.getvalue(), err.getvalue()


class PerfTablesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.results = os.path.join(self.dir.name, "results")
        os.makedirs(self.results)
        self.page = os.path.join(self.dir.name, "page.md")
        with open(self.page, "w") as f:
            f.write("# Page\n\n<!-- table:server -->\nold\n<!-- /table:server -->\n\ntext\n"
                    "<!-- table:space -->\n<!-- /table:space -->\n")

    def tearDown(self):
        self.dir.cleanup()

    def args(self, *extra):
        return ["--results", self.results, "--page", self.page] + list(extra)

    def test_latest_run_takes_the_last_group(self):
        rows = [{"commit": "a", "x": 1}, {"commit": "a", "x": 2}, {"commit": "b", "x": 3},
                {"commit": "b", "x": 4}]
        self.assertEqual([r["x"] for r in perf_tables.latest_run(rows)], [3, 4])
        plain = [{"run": 1}, {"run": 2}]  # pmrt-ycsb's per-process id is no run identity
        self.assertEqual(perf_tables.latest_run(plain), plain)

    def test_rewrite_then_check(self):
        write_jsonl(os.path.join(self.results, "server.jsonl"), SERVER)
        self.assertEqual(run(self.args("--check"))[0], 1)  # "old" is not what the results give
        self.assertEqual(run(self.args())[0], 0)
        with open(self.page) as f:
            text = f.read()
        self.assertIn("| pmrt serve (durable Masstree, pmem backend) | 200 | 200 | 200 | 200 |",
                      text)
        self.assertIn("| pmrt / redis, persistence off | 2.00× | 2.00× | 2.00× | 2.00× |", text)
        self.assertIn("reproduce: `bench/report.sh --only server`", text)
        self.assertIn("machine: not recorded", text)
        self.assertIn("No results yet; run `rm -f bench/results/space.jsonl;", text)
        self.assertTrue(text.endswith("<!-- /table:space -->\n"))
        self.assertIn("\ntext\n", text)
        self.assertEqual(run(self.args("--check"))[0], 0)
        # A changed result is drift.
        write_jsonl(os.path.join(self.results, "server.jsonl"),
                    [dict(r, rps=r["rps"] * 2) for r in SERVER])
        rc, _, err = run(self.args("--check"))
        self.assertEqual(rc, 1)
        self.assertIn("server", err)

    def test_machine_from_records_and_summary(self):
        write_jsonl(os.path.join(self.results, "server.jsonl"),
                    [dict(r, cpu="2 CPUs, Test CPU") for r in SERVER])
        run(self.args())
        with open(self.page) as f:
            self.assertIn("machine: 2 CPUs, Test CPU;", f.read())
        write_jsonl(os.path.join(self.results, "server.jsonl"), SERVER)
        with open(os.path.join(self.results, "summary.json"), "w") as f:
            json.dump({"meta": {"server_machine": "4 CPUs, Other", "server_mode": "quick"}}, f)
        run(self.args())
        with open(self.page) as f:
            text = f.read()
        self.assertIn("machine: 4 CPUs, Other;", text)
        self.assertIn("`--quick` (smoke) run", text)

    def test_bad_markers(self):
        with open(self.page, "w") as f:
            f.write("<!-- table:nosuch -->\n<!-- /table:nosuch -->\n")
        self.assertEqual(run(self.args("--check"))[0], 2)
        with open(self.page, "w") as f:
            f.write("<!-- table:server -->\n")
        self.assertEqual(run(self.args())[0], 2)

    def test_google_benchmark_output(self):
        doc = {"context": {"num_cpus": 2, "mhz_per_cpu": 2600},
               "benchmarks": [
                   {"name": "BM_FlushShare/pmem/64/0", "run_type": "iteration",
                    "real_time": 2.0e9, "cpu_time": 1.0e9, "time_unit": "ns",
                    "flush_share_pct": 9.5, "boundary_share_pct": 14.0},
                   {"name": "BM_PersistLine/pmem", "run_type": "iteration", "real_time": 158.0,
                    "cpu_time": 157.0, "time_unit": "ns"}]}
        rows = perf_tables.read_gbench(self._write_json(doc))
        text = "\n".join(perf_tables.render_gbench(rows))
        self.assertIn("| `BM_FlushShare/pmem/64/0` | 2 s | 1 s | – | 9.5 | 14 |", text)
        self.assertIn("| `BM_PersistLine/pmem` | 158 ns | 157 ns |", text)

    def _write_json(self, doc):
        path = os.path.join(self.results, "gb.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        return path


if __name__ == "__main__":
    unittest.main()
