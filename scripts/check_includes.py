#!/usr/bin/env python3
"""Include-direction check (run by ./test.sh): the layers build on each other in one direction.

  base -> epoch -> alloc -> txn -> ds -> runtime -> testing -> tools -> bench, examples   (tests: anything)

(testing/, the crash simulator and kill harness, builds on epoch/ only; it sits above runtime/
so that no library layer can include it.)

A source file of a layer may include a project header only from its own layer or one below it,
and another layer's internal/ headers never (its own internal/ is fine). Tests may include any
header, internals included (they test them).

Exceptions, if one is ever needed, are listed in ALLOWED with the reason. A listed exception
that no longer occurs fails the check too, so the list cannot go stale.

Usage: scripts/check_includes.py [REPO_ROOT]   exit 0 clean, 1 violations (one line each).
"""
import os
import re
import sys

LAYERS = ["base", "epoch", "alloc", "txn", "ds", "runtime", "testing", "tools", "bench", "examples"]
RANK = {name: i for i, name in enumerate(LAYERS)}
# bench and examples are both top floor: neither includes the other.
RANK["examples"] = RANK["bench"]

# (file, included header): the include-direction exceptions that exist today (none).
ALLOWED = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    top = path.split("/", 1)[0]
    return top if top in RANK else None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    problems = []
    seen_allowed = set()
    for layer in LAYERS:
        base = os.path.join(root, layer)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                with open(full, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        header = m.group(1)
                        top = header.split("/", 1)[0]
                        if top not in RANK and top != "tests":
                            continue  # a third-party header (absl/...)
                        key = (rel, header)
                        if key in ALLOWED:
                            seen_allowed.add(key)
                            continue
                        if top == "tests":
                            problems.append(f"{rel}:{lineno}: includes test code {header}")
                        elif RANK[top] > RANK[layer] or (RANK[top] == RANK[layer] and top != layer):
                            problems.append(f"{rel}:{lineno}: {layer}/ includes {header} "
                                            f"from the layer above it ({top}/)")
                        elif top != layer and "/internal/" in header:
                            problems.append(f"{rel}:{lineno}: includes {header}, an internal "
                                            f"header of {top}/")
    for key in sorted(ALLOWED - seen_allowed):
        problems.append(f"scripts/check_includes.py: the exception {key[0]} -> {key[1]} no "
                        f"longer occurs: remove it from ALLOWED")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
