#!/usr/bin/env bash
# The examples under SIGKILL: each example's `run` is killed at a random moment (10-90 ms after
# its start: during its open and recovery, or mid-transaction), KILLS times (default 100) on one
# pool, and its `check` must find the invariants intact after every kill.
#
#   tests/examples/examples_kill_test.sh BINDIR
set -u -o pipefail
bindir=${1:?usage: examples_kill_test.sh BINDIR}
kills=${KILLS:-100}
dir=$(mktemp -d /dev/shm/pmrt-examples.XXXXXX)
trap 'rm -rf "$dir"' EXIT

for ex in bank object-index root-publish; do
  bin="$bindir/pmrt-example-$ex"
  pool="$dir/$ex.pool"
  for i in $(seq "$kills"); do
    "$bin" "$pool" run >/dev/null 2>"$dir/err" &
    pid=$!
    sleep "0.0$((RANDOM % 9 + 1))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [[ -s $dir/err ]]; then
      echo "FAIL: $ex run $i wrote to stderr:" >&2
      cat "$dir/err" >&2
      exit 1
    fi
    if ! out=$("$bin" "$pool" check 2>&1); then
      echo "FAIL: $ex after kill $i: $out" >&2
      exit 1
    fi
  done
  echo "$ex: $kills kills, then: $out"
  # The runs made progress: a bounded run ends with the invariants checked too.
  out=$("$bin" "$pool" run 2000) || { echo "FAIL: $ex run 2000: $out" >&2; exit 1; }
  echo "$ex: after 2000 more operations: $out"
done
echo PASS
