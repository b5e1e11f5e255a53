#!/usr/bin/env bash
# redis-py (Debian's python3-redis) against `pmrt serve`: starts a server on a fresh pool, runs
# redis_py_test.py against it, then a clean SIGTERM shutdown.
# Usage: redis_py_test.sh PMRT_BINARY. Exit 77 (skipped) when no python3 can import redis.
set -euo pipefail
pmrt=$1
here=$(cd "$(dirname "$0")" && pwd)
# Debian's interpreter first: python3-redis installs for it (another python3 may come first
# in PATH).
python=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import redis' 2>/dev/null; then
    python=$p
    break
  fi
done
if [[ -z $python ]]; then
  echo "SKIP: no python3 with redis-py (apt-get install python3-redis)"
  exit 77
fi
base=/dev/shm
[[ -d $base && -w $base ]] || base=${TMPDIR:-/tmp}
dir=$(mktemp -d "$base/pmrt-redis-py-XXXXXX")
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill -9 "$server_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [[ -f $dir/server.out ]] && sed 's/^/  server: /' "$dir/server.out" >&2
  exit 1
}

: >"$dir/server.out"
"$pmrt" serve "$dir/kv.pool" --port 0 --create-size 64M --threads 2 >>"$dir/server.out" 2>&1 &
server_pid=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\),.*/\1/p' "$dir/server.out")
  [[ -n $port ]] && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited"
  sleep 0.1
done
[[ -n $port ]] || fail "no listening line"

"$python" "$here/redis_py_test.py" "$port" || fail "redis_py_test.py exited with $?"

kill -TERM "$server_pid"
wait "$server_pid" || fail "the server exited with $? after SIGTERM"
server_pid=
grep -q 'closed cleanly' "$dir/server.out" || fail "no clean shutdown line"
echo "PASS"
