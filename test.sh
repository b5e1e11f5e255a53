#!/usr/bin/env bash
# Installs dependencies, builds pmrt, and runs the whole test suite twice: once in a plain
# Release build (warnings as errors) and once under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install-deps.sh
echo "=== include directions ==="
python3 scripts/check_includes.py
jobs=${PMRT_JOBS:-2}
for preset in release asan; do
  echo "=== $preset: build ==="
  cmake --preset "$preset" -DPMRT_WERROR=ON
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== $preset: test ==="
  ctest --preset "$preset" -j "$jobs"
done
echo "=== all tests passed ==="
