#!/usr/bin/env bash
# The real Redis clients (Debian's redis-tools) against `pmrt serve`: redis-cli for each
# command, redis-cli --scan, and redis-benchmark -t set,get with and without pipelining (and
# incr,hset,mset,ping pipelined), with
# zero errors and the values checked afterwards; then a clean SIGTERM shutdown.
# Usage: redis_cli_test.sh PMRT_BINARY. Exit 77 (skipped) when redis-cli is not installed.
set -euo pipefail
pmrt=$1
if ! command -v redis-cli >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "SKIP: redis-cli or redis-benchmark not installed (apt-get install redis-tools)"
  exit 77
fi
# shellcheck source=tests/server/server_lib.sh
source "$(dirname "$0")/server_lib.sh"
make_test_dir redis-cli

start_server "$dir/kv.pool" --create-size 256M
echo "server on port $port"

cli() { redis-cli -p "$port" "$@"; }

expect PONG PING
expect hello PING hello
expect "a b" ECHO "a b"
expect OK SET k1 v1
expect v1 GET k1
expect "" GET missing
expect OK MSET k2 v2 k3 v3
expect $'v1\n\nv3' MGET k1 nope k3
expect 2 EXISTS k1 k2 nope
expect 3 DBSIZE
expect 1 DEL k2 nope
expect 2 DBSIZE
expect $'k1\nv1\nk3\nv3' PMRT.RANGE k "" LIMIT 10
expect $'k1\nv1' PMRT.RANGE k1 k3
expect save CONFIG GET save
expect $'appendonly\nno' CONFIG GET appendonly
expect OK PMRT.SYNC
expect OK SELECT 0
expect "ERR unknown command 'NOSUCHCMD'" NOSUCHCMD a b
expect "ERR wrong number of arguments for 'get' command" GET
cli INFO | grep -q '^epoch_completed:' || fail "INFO has no epoch_completed"
cli INFO | grep -q '^pool_path:' || fail "INFO has no pool_path"
cli INFO | grep -q '^heap_used_bytes:' || fail "INFO has no heap_used_bytes"
cli INFO keyspace | grep -q '^db0:keys=2' || fail "INFO keyspace"

# The string and counter commands.
expect 1 INCR counter
expect 11 INCRBY counter 10
expect 9 DECRBY counter 2
expect "ERR value is not an integer or out of range" INCRBY counter x
expect OK SET float 10.50
expect 10.6 INCRBYFLOAT float 0.1
expect 5 APPEND greeting Hello
expect 11 APPEND greeting " World"
expect World GETRANGE greeting -5 -1
expect 11 SETRANGE greeting 6 Redis
expect "Hello Redis" GETSET greeting bye
expect bye GETDEL greeting
expect 0 STRLEN greeting
expect 9 SET counter 0 XX GET
expect "ERR syntax error" SET counter 0 XX NX
expect OK SET counter 1 EX 100
expect 100 TTL counter
expect 1 PERSIST counter
expect -1 TTL counter
expect "ERR invalid expire time in 'set' command" SET counter 1 EX 0
expect 2 DEL counter float
expect 2 HSET user:1 name ada age 36
expect ada HGET user:1 name
expect 37 HINCRBY user:1 age 1
expect hash TYPE user:1
expect "WRONGTYPE Operation against a key holding the wrong kind of value" GET user:1
expect 1 DEL user:1

# The keyspace and connection commands, and RESP3 through redis-cli -3.
expect OK SET src hello
expect OK RENAME src dst
expect "ERR no such key" RENAME src dst
expect 1 COPY dst dst2
expect string TYPE dst2
expect $'dst\ndst2' KEYS 'dst*'
expect 2 DEL dst dst2
expect OK CLIENT SETNAME cli
expect "ERR Client names cannot contain spaces, newlines or special characters." CLIENT SETNAME "a b"
[[ $(cli TIME | wc -l) == 2 ]] || fail "TIME"
got=$(redis-cli -3 -p "$port" CONFIG GET appendonly) || fail "redis-cli -3 exited with $?"
# A map: redis-cli prints each pair on one line (an array would take two).
[[ $got == 'appendonly no' ]] || fail "redis-cli -3 CONFIG GET appendonly: '$got'"
got=$(redis-cli -3 -p "$port" HELLO 3 | tr '\n' ' ')
[[ $got == *"proto 3 "* ]] || fail "redis-cli -3 HELLO 3: '$got'"
cli INFO persistence | grep -q '^pmrt_last_open_clean:' || fail "INFO persistence"

# SCAN through redis-cli's own cursor loop, with and without a pattern.
for i in $(seq 1 300); do echo "SET scan:$i x"; done | cli >/dev/null
n=$(cli --scan | grep -c '^scan:') || true
[[ $n == 300 ]] || fail "redis-cli --scan found $n of 300 keys"
n=$(cli --scan --pattern 'scan:1*' | wc -l)
[[ $n == 111 ]] || fail "redis-cli --scan --pattern found $n of 111 keys"

# redis-benchmark: zero errors, and the values landed.
expect OK FLUSHALL
for pipeline in 16 1; do
  out=$(redis-benchmark -p "$port" -t set,get -n 20000 -P $pipeline -r 1000 -q 2>&1) ||
    fail "redis-benchmark -P $pipeline exited with $?: $out"
  echo "$out" | tr '\r' '\n' | grep -E '^(SET|GET):' | grep -v rps= || true
  if echo "$out" | grep -qi 'error'; then fail "redis-benchmark -P $pipeline: $out"; fi
  echo "$out" | grep -q 'SET: [0-9]' || fail "redis-benchmark -P $pipeline printed no SET result"
  echo "$out" | grep -q 'GET: [0-9]' || fail "redis-benchmark -P $pipeline printed no GET result"
done
keys=$(cli DBSIZE)
((keys > 900 && keys <= 1000)) || fail "after redis-benchmark -r 1000: DBSIZE is $keys"
v=$(cli GET key:000000000042)
[[ ${#v} == 3 ]] || fail "GET key:000000000042 after redis-benchmark: '$v'"
# Every other redis-benchmark test the server has: no errors, and the hash landed.
out=$(redis-benchmark -p "$port" -t incr,hset,mset,ping -n 10000 -P 16 -r 1000 -q 2>&1) ||
  fail "redis-benchmark -t incr,hset,mset,ping exited with $?: $out"
if echo "$out" | grep -qi 'error'; then fail "redis-benchmark -t incr,hset,mset,ping: $out"; fi
for t in INCR HSET MSET; do
  echo "$out" | grep -q "$t.*: [0-9]" || fail "redis-benchmark printed no $t result: $out"
done
fields=$(cli HLEN myhash)
((fields > 900 && fields <= 1000)) || fail "after redis-benchmark -t hset -r 1000: HLEN is $fields"
expect OK PMRT.SYNC

kill -TERM "$server_pid"
wait "$server_pid" || fail "the server exited with $? after SIGTERM"
server_pid=
grep -q 'closed cleanly' "$dir/server.out" || fail "no clean shutdown line"
grep -q 'warning' "$dir/server.out" && fail "a loopback server warned: $(grep warning "$dir/server.out")"

# A 16 MiB pool that grows by 16 MiB whenever it is full: redis-benchmark writes ~60 MB of
# values through it with zero errors; the pool then checks healthy and grows by hand too.
start_server "$dir/grow.pool" --create-size 16M --grow-by 16M
out=$(redis-benchmark -p "$port" -t set -n 100000 -r 100000 -d 1000 -P 16 -q 2>&1) ||
  fail "redis-benchmark on a growing pool exited with $?: $out"
if echo "$out" | grep -qi 'error'; then fail "redis-benchmark on a growing pool: $out"; fi
info=$(cli INFO pool | tr -d '\r')
growths=$(echo "$info" | sed -n 's/^pool_growths://p')
size=$(echo "$info" | sed -n 's/^pool_size://p')
((growths >= 3 && size >= 64 << 20)) || fail "the pool did not grow: $info"
keys=$(cli DBSIZE)
((keys > 50000)) || fail "after redis-benchmark on a growing pool: DBSIZE is $keys"
echo "growing pool: $keys keys, $growths growths, $size bytes"
kill -TERM "$server_pid"
wait "$server_pid" || fail "the growing server exited with $? after SIGTERM"
server_pid=
"$pmrt" check "$dir/grow.pool" >"$dir/check.out" 2>&1 || fail "pmrt check after growth: $(cat "$dir/check.out")"
"$pmrt" grow "$dir/grow.pool" +16M >"$dir/grow.out" 2>&1 || fail "pmrt grow: $(cat "$dir/grow.out")"
grep -q "$((size + (16 << 20))) bytes" "$dir/grow.out" || fail "pmrt grow printed: $(cat "$dir/grow.out")"
"$pmrt" check "$dir/grow.pool" >"$dir/check.out" 2>&1 || fail "pmrt check after pmrt grow: $(cat "$dir/check.out")"

# Reply amplification under a memory limit: with 2.5 GiB of address space (prlimit), a
# 2.3 KB MGET of one 8 MiB value 256 times (a 2 GiB reply) gets the reply-limit error, and the
# server goes on serving, the value intact.
# (Not under ASan, which reserves terabytes of shadow address space: no such limit can apply.)
if command -v prlimit >/dev/null && [[ -z ${ASAN_OPTIONS:-} ]]; then
  start_server "$dir/big.pool" --create-size 64M --threads 2 --wrap-prlimit
  head -c $((8 << 20)) /dev/zero | tr '\0' v >"$dir/big.value"
  cli -x SET big <"$dir/big.value" >/dev/null || fail "SET of an 8 MiB value"
  args=()
  for _ in $(seq 256); do args+=(big); done
  got=$(cli MGET "${args[@]}" 2>&1 | head -c 200)
  [[ $got == *"reply too large: MGET"* ]] || fail "MGET of 256 x 8 MiB: got '$got'"
  kill -0 "$server_pid" 2>/dev/null || fail "the server died of an amplified reply"
  expect PONG PING
  [[ $(cli GET big | wc -c) == $(((8 << 20) + 1)) ]] || fail "the 8 MiB value after the MGET"
  kill -TERM "$server_pid"
  wait "$server_pid" || fail "the memory-limited server exited with $? after SIGTERM"
  server_pid=
  echo "memory-limited server: amplified MGET refused, server alive"
fi

# A Redis-style --config file (flags given override it): requirepass, maxclients, bind.
cat >"$dir/pmrt.conf" <<'CONF'
# comments and blank lines are skipped

requirepass "pass word"
maxclients 77
bind 127.0.0.1
pmrt-verify-reads yes
CONF
start_server "$dir/kv.pool" --config "$dir/pmrt.conf" --max-clients 88
expect "NOAUTH Authentication required." GET k1
got=$(redis-cli -p "$port" --no-auth-warning -a "pass word" CONFIG GET maxclients requirepass \
  pmrt-verify-reads | tr '\n' ' ')
[[ $got == "requirepass pass word maxclients 88 pmrt-verify-reads yes " ]] ||
  fail "CONFIG GET under --config: '$got'"
kill -TERM "$server_pid"
wait "$server_pid" || fail "the --config server exited with $? after SIGTERM"
server_pid=
echo "maxclients 1 2" >"$dir/bad.conf"
if "$pmrt" serve "$dir/kv.pool" --config "$dir/bad.conf" >"$dir/bad.out" 2>&1; then
  fail "a bad --config file was accepted"
fi
grep -q "bad.conf:1: 'maxclients' takes one value" "$dir/bad.out" || fail "bad --config: $(cat "$dir/bad.out")"

# Bound to every address with no authentication: the server says so at start.
: >"$dir/server.out"
"$pmrt" serve "$dir/kv.pool" --port 0 --bind 0.0.0.0 >>"$dir/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 600); do
  grep -q 'listening on' "$dir/server.out" && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server on 0.0.0.0 exited"
  sleep 0.1
done
grep -q 'warning: listening on 0.0.0.0 with no authentication' "$dir/server.out" ||
  fail "no warning for a server bound to 0.0.0.0"
kill -TERM "$server_pid"
wait "$server_pid" || fail "the server on 0.0.0.0 exited with $? after SIGTERM"
server_pid=
echo "PASS"
