#!/usr/bin/env bash
# redis-py (Debian's python3-redis) against `pmrt serve`: starts a server on a fresh pool, runs
# redis_py_test.py against it, then a clean SIGTERM shutdown.
# Usage: redis_py_test.sh PMRT_BINARY. Exit 77 (skipped) when no python3 can import redis.
set -euo pipefail
pmrt=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/server/server_lib.sh
source "$here/server_lib.sh"
if ! redis_python; then
  echo "SKIP: no python3 with redis-py (apt-get install python3-redis)"
  exit 77
fi
make_test_dir redis-py
start_server "$dir/kv.pool" --create-size 64M --threads 2

"$python" "$here/redis_py_test.py" "$port" || fail "redis_py_test.py exited with $?"

kill -TERM "$server_pid"
wait "$server_pid" || fail "the server exited with $? after SIGTERM"
server_pid=
grep -q 'closed cleanly' "$dir/server.out" || fail "no clean shutdown line"
echo "PASS"
