#!/usr/bin/env bash
# Installs pmrt's build and test dependencies from Debian 12's packages (run as root).
# Used by run.sh, test.sh and .ci/run; safe to run again. (redis-tools: the server tests drive
# pmrt serve with redis-cli and redis-benchmark, python3-redis with redis-py; nutcracker: the
# scale-out test puts three servers behind it; python3: bench/report_charts.py and its test.)
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config
      libpmem-dev libpmemobj-dev libabsl-dev libboost-dev
      libgtest-dev libgmock-dev libbenchmark-dev redis-tools nutcracker python3 python3-redis)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
