#!/usr/bin/env bash
# Installs dependencies, builds pmrt (Release) and runs the main demo on a default pool
# ($PMRT_POOL, or /dev/shm/pmrt-demo.pool).
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "${PMRT_JOBS:-2}" --target pmrt-cli
exec ./build/release/tools/pmrt demo "${PMRT_POOL:-/dev/shm/pmrt-demo.pool}"
