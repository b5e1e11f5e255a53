#!/usr/bin/env bash
# Runs `pmrt demo` on 20000 keys for half a second per stage and checks that it exits 0 and that
# its verification line reports every key verified with none lost and none corrupt.
#
#   tests/demo/demo_test.sh PMRT_BINARY
set -euo pipefail
bin=$1
dir=$(mktemp -d /dev/shm/pmrt-demo-test.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$dir"' EXIT
out="$dir/out.txt"
status=0
"$bin" demo "$dir/demo.pool" --keys 20000 --seconds 0.5 >"$out" 2>&1 || status=$?
cat "$out"
if [[ $status -ne 0 ]]; then
  echo "demo_test: pmrt demo exited with status $status" >&2
  exit 1
fi
line=$(grep -E '^recovered in [0-9.]+ ms; first get after [0-9.]+ ms; [0-9]+ keys verified, ' "$out" || true)
if [[ -z "$line" ]]; then
  echo "demo_test: no verification line in the output" >&2
  exit 1
fi
if ! [[ "$line" =~ ([0-9]+)\ keys\ verified,\ 0\ lost,\ 0\ corrupt$ ]] || (( BASH_REMATCH[1] < 20000 )); then
  echo "demo_test: verification failed: $line" >&2
  exit 1
fi
echo "demo_test: ok: $line"
