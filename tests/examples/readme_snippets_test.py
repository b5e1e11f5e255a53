#!/usr/bin/env python3
"""README's code is the examples' code: every region of examples/*.cc marked
`// [readme:NAME]` ... `// [/readme]` must appear in README.md line for line, and README must
show each region (a snippet edited in one place only fails here)."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
readme = (root / "README.md").read_text().splitlines()
failures = []
regions = 0
for example in sorted((root / "examples").glob("*.cc")):
    lines = example.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*// \[readme:([\w-]+)\]$", lines[i])
        if not m:
            i += 1
            continue
        name, start = m.group(1), i + 1
        while i < len(lines) and lines[i].strip() != "// [/readme]":
            i += 1
        region = lines[start:i]
        regions += 1
        found = any(readme[j:j + len(region)] == region for j in range(len(readme)))
        if not found:
            failures.append(f"{example.name}: region '{name}' ({len(region)} lines) is not in README.md")
if regions == 0:
    failures.append("no marked region in examples/*.cc")
for f in failures:
    print("FAIL:", f)
print(f"{regions} regions checked" if not failures else "")
sys.exit(1 if failures else 0)
