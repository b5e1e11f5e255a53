#!/usr/bin/env bash
# Installs dependencies, builds pmrt (Release, only the `pmrt` tool) and runs the main demo,
# `pmrt demo`, on a default pool ($PMRT_POOL, or /dev/shm/pmrt-demo.pool): it loads a durable
# Masstree with 1M keys, compares it with the transient tree on YCSB A, SIGKILLs a process in
# the middle of writing to it, reopens the pool and verifies every key (tools/demo.cc).
#
#   ./run.sh [DEMO FLAGS]      e.g. ./run.sh --keys 200000 --seconds 1 (see `pmrt demo --help`)
#   environment: PMRT_POOL (the pool file), PMRT_JOBS (build parallelism, default 2)
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "${PMRT_JOBS:-2}" --target pmrt-cli
exec ./build/release/tools/pmrt demo "${PMRT_POOL:-/dev/shm/pmrt-demo.pool}" "$@"
