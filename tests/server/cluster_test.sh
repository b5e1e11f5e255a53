#!/usr/bin/env bash
# The scale-out recipe (scripts/cluster.sh, docs/server.md "Scale-out behind nutcracker"): three
# `pmrt serve` shards behind Debian's nutcracker on loopback. redis-benchmark and redis-cli
# through the proxy with zero errors, the keys spread over every shard; redis-py through the
# proxy when python3-redis is installed; then one shard SIGKILLed and restarted in the middle of
# a write load: every key acknowledged before the last `cluster.sh sync` is present afterwards,
# with its value.
# Usage: cluster_test.sh PMRT_BINARY REPO_ROOT. Exit 77 (skipped) without nutcracker or
# redis-tools.
set -euo pipefail
pmrt=$1
root=$2
for tool in nutcracker redis-cli redis-benchmark; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (apt-get install nutcracker redis-tools)"
    exit 77
  fi
done
base=/dev/shm
[[ -d $base && -w $base ]] || base=${TMPDIR:-/tmp}
export CLUSTER_DIR
CLUSTER_DIR=$(mktemp -d "$base/pmrt-cluster-XXXXXX")
export PMRT=$pmrt PROXY_PORT=0 SHARD_SIZE=128M SERVE_ARGS="--threads 1"
cluster=$root/scripts/cluster.sh
# shellcheck source=tests/server/server_lib.sh
source "$(dirname "$0")/server_lib.sh" # redis_python, expect
writer_pid=
cleanup() {
  if [[ -n $writer_pid ]]; then
    pkill -P "$writer_pid" 2>/dev/null # the pipeline's redis-cli, then its subshell
    kill "$writer_pid" 2>/dev/null
  fi
  "$cluster" stop >/dev/null 2>&1 || true
  for f in "$CLUSTER_DIR"/*.pid; do [[ -f $f ]] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$CLUSTER_DIR"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$CLUSTER_DIR"/*.log; do
    [[ -f $f ]] && sed "s|^|  $(basename "$f"): |" "$f" | tail -5 >&2
  done
  exit 1
}

"$cluster" start 3 || fail "cluster.sh start 3"
proxy=$(cat "$CLUSTER_DIR/proxy.port")
shard_port() { cat "$CLUSTER_DIR/shard-$1.port"; }
cli() { redis-cli -p "$proxy" "$@"; }

# The commands that pass through twemproxy (docs/server.md lists them).
expect OK SET k1 v1
expect v1 GET k1
expect OK MSET k2 v2 k3 v3 k4 v4
expect $'v1\nv2\n\nv4' MGET k1 k2 nope k4
expect 1 EXISTS k1
expect 11 INCRBY counter 11
expect 2 DEL k2 k3
expect 5 APPEND k1 "abc"
expect v1abc GET k1

# redis-benchmark through the proxy: no error reply, and the keys on every shard.
out=$(redis-benchmark -p "$proxy" -t set,get,incr -n 20000 -r 5000 -P 16 -c 8 -q 2>&1) ||
  fail "redis-benchmark exited with $?: $out"
echo "$out" | tr '\r' '\n' | grep -q "requests per second" || fail "redis-benchmark printed no result: $out"
if echo "$out" | grep -qi "error"; then fail "redis-benchmark saw errors: $out"; fi
for i in 1 2 3; do
  n=$(redis-cli -p "$(shard_port "$i")" DBSIZE)
  ((n > 500)) || fail "shard $i holds $n keys after the benchmark: the keys are not spread"
done

# redis-py through the proxy (its own API; pipelines without MULTI, which twemproxy refuses).
if redis_python; then
  "$python" - "$proxy" <<'EOF' || fail "redis-py through the proxy"
import sys
import redis

r = redis.Redis(port=int(sys.argv[1]))
r.set("py:a", "1")
assert r.get("py:a") == b"1"
assert r.incr("py:a", 4) == 5
r.mset({"py:%d" % i: str(i) for i in range(200)})
assert r.mget(["py:%d" % i for i in range(200)]) == [str(i).encode() for i in range(200)]
p = r.pipeline(transaction=False)
for i in range(200):
    p.set("pp:%d" % i, i * 2)
for i in range(200):
    p.get("pp:%d" % i)
got = p.execute()
assert got[:200] == [True] * 200 and got[200:] == [str(i * 2).encode() for i in range(200)], got
assert r.delete(*["py:%d" % i for i in range(100)]) == 100
# EXISTS through twemproxy takes one key (its reply to several is not their count).
assert sum(r.exists("py:%d" % i) for i in range(200)) == 100
EOF
else
  echo "python3-redis not installed: redis-py part skipped"
fi

# Crash of one shard under load. Phase 1: keys written and acknowledged, then synced on every
# shard. Phase 2: a writer keeps writing while shard 2 is SIGKILLed and restarted; its
# errors while the shard is down are expected. Afterwards every phase-1 key is present.
n1=3000
seq 1 "$n1" | awk '{printf "SET p1:%d v%d\n", $1, $1}' | cli >"$CLUSTER_DIR/phase1.out" ||
  fail "phase 1 writes"
[[ $(grep -c '^OK$' "$CLUSTER_DIR/phase1.out") == "$n1" ]] || fail "phase 1: not every SET answered OK"
"$cluster" sync || fail "cluster.sh sync"
(
  for i in $(seq 1 8000); do echo "SET p2:$i w$i"; done | cli >/dev/null 2>&1
) &
writer_pid=$!
sleep 0.3
"$cluster" restart 2 || fail "cluster.sh restart 2"
wait "$writer_pid" || true
writer_pid=
# The proxy reconnects to the restarted shard on the next request for its keys.
for _ in $(seq 50); do
  [[ $(cli SET probe:after 1 2>/dev/null) == OK ]] && break
  sleep 0.1
done
missing=$(seq 1 "$n1" | awk '{printf "GET p1:%d\n", $1}' | cli | awk -v n="$n1" '
  { want = "v" NR; if ($0 != want) bad++ }
  END { if (NR != n) bad += n - NR; print bad + 0 }')
[[ $missing == 0 ]] || fail "$missing of $n1 synced keys are missing or wrong after the restart"
"$cluster" status >/dev/null || fail "cluster.sh status: a process is down"
"$cluster" stop >/dev/null || fail "cluster.sh stop"
echo "cluster test passed: 3 shards behind nutcracker on port $proxy"
