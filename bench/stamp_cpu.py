#!/usr/bin/env python3
"""Names this machine's processor in a results file, for bench/perf_tables.py's tables.

  bench/stamp_cpu.py FILE...

A Google Benchmark JSON file (.json) gets "cpu" in its context; each record of a JSON-lines file
(.jsonl) that names no "cpu" gets one. The name: "N vCPUs, MODEL family F model M".
"""
import json
import os
import sys


def cpu_model():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return (f"{os.cpu_count()} vCPUs, {fields.get('model name', 'unknown')} "
            f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}")


def main():
    cpu = cpu_model()
    for path in sys.argv[1:]:
        if path.endswith(".jsonl"):
            with open(path) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            for r in rows:
                r.setdefault("cpu", cpu)
            with open(path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        else:
            with open(path) as f:
                data = json.load(f)
            data.setdefault("context", {})["cpu"] = cpu
            with open(path, "w") as f:
                json.dump(data, f, indent=2)
                f.write("\n")
    print(cpu)


if __name__ == "__main__":
    main()
