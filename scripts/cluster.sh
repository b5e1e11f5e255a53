#!/usr/bin/env bash
# N `pmrt serve` shards behind one nutcracker (twemproxy) on loopback: the scale-out recipe of
# docs/server.md ("Scale-out behind nutcracker").
#
#   scripts/cluster.sh start N     # N shards (pools DIR/shard-I.pool) and the proxy
#   scripts/cluster.sh status      # each process, its port and its key count
#   scripts/cluster.sh sync        # PMRT.SYNC to every shard: every write acknowledged so far
#                                  # (through the proxy or not) is durable when it returns
#   scripts/cluster.sh restart I   # SIGKILL shard I (1-based) and start it again on its pool
#   scripts/cluster.sh stop        # SIGTERM to the proxy and every shard (pools closed cleanly)
#
# Environment: PMRT (the pmrt binary; default build/release/tools/pmrt), CLUSTER_DIR (state:
# pools, logs, pid and port files, the proxy's configuration; default /dev/shm/pmrt-cluster),
# PROXY_PORT (default 7379; 0 picks a free one), SHARD_SIZE (each new pool, default 1G),
# SERVE_ARGS (more `pmrt serve` flags for every shard, e.g. "--threads 2").
#
# The shards listen on free ports picked at their first start and kept in CLUSTER_DIR, so a
# restarted shard comes back where the proxy expects it. The proxy names each shard (`shard1`
# ...), and ketama hashes the names, so a key's shard depends only on N: the same pools served
# again with the same N find every key where it was.
set -euo pipefail
cd "$(dirname "$0")/.."
pmrt=${PMRT:-build/release/tools/pmrt}
dir=${CLUSTER_DIR:-/dev/shm/pmrt-cluster}
proxy_port=${PROXY_PORT:-7379}
shard_size=${SHARD_SIZE:-1G}
read -r -a serve_args <<<"${SERVE_ARGS:-}"

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

shard_count() {
  [[ -f $dir/shards ]] || die "no cluster in $dir (run: scripts/cluster.sh start N)"
  cat "$dir/shards"
}

# start_shard I: `pmrt serve` on shard I's pool and port (a free one at its first start), in the
# background; returns once it listens.
start_shard() {
  local i=$1 port=0
  local log=$dir/shard-$i.log
  if [[ -f $dir/shard-$i.port ]]; then port=$(cat "$dir/shard-$i.port"); fi
  : >"$log"
  "$pmrt" serve "$dir/shard-$i.pool" --port "$port" --create-size "$shard_size" \
    "${serve_args[@]}" >>"$log" 2>&1 &
  echo $! >"$dir/shard-$i.pid"
  for _ in $(seq 600); do
    # "listening on 127.0.0.1:P, ..." or "listening on [::1]:P, ...": the first address's port.
    port=$(sed -n 's/.*listening on \(\[[^]]*\]\|[^ ,]*\):\([0-9]*\)[, ].*/\2/p' "$log" | head -1)
    if [[ -n $port ]]; then
      echo "$port" >"$dir/shard-$i.port"
      return
    fi
    if ! alive "$dir/shard-$i.pid"; then die "shard $i did not start: $(tail -1 "$log")"; fi
    sleep 0.1
  done
  die "shard $i: no listening line after 60 s"
}

# The proxy's configuration: one pool, ketama over the shards' names.
write_proxy_conf() {
  local n=$1
  {
    echo "pmrt:"
    echo "  listen: 127.0.0.1:$proxy_port"
    echo "  hash: fnv1a_64"
    echo "  distribution: ketama"
    echo "  redis: true"
    # A shard that is down (restarting) answers errors for its keys; it is never ejected, so
    # the key placement does not move while it is away.
    echo "  auto_eject_hosts: false"
    echo "  timeout: 5000"
    echo "  server_connections: 1"
    echo "  servers:"
    for i in $(seq "$n"); do
      echo "    - 127.0.0.1:$(cat "$dir/shard-$i.port"):1 shard$i"
    done
  } >"$dir/nutcracker.yml"
}

start() {
  local n=${1:-}
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "start needs a shard count, e.g. scripts/cluster.sh start 3"
  command -v nutcracker >/dev/null || die "nutcracker is not installed (apt-get install nutcracker)"
  [[ -x $pmrt ]] || die "no pmrt binary at $pmrt (set PMRT)"
  mkdir -p "$dir"
  if [[ -f $dir/shards ]] && [[ $(cat "$dir/shards") != "$n" ]]; then
    die "$dir holds a cluster of $(cat "$dir/shards") shards: start it with that count (another N moves keys between shards)"
  fi
  for i in $(seq "$n"); do
    if alive "$dir/shard-$i.pid"; then die "shard $i is running already (pid $(cat "$dir/shard-$i.pid"))"; fi
  done
  if alive "$dir/nutcracker.pid"; then die "the proxy is running already (pid $(cat "$dir/nutcracker.pid"))"; fi
  echo "$n" >"$dir/shards"
  # A start that fails half-way stops what it started.
  trap 'stop_all' EXIT
  for i in $(seq "$n"); do start_shard "$i"; done
  if [[ $proxy_port == 0 ]]; then proxy_port=$(free_port); fi
  write_proxy_conf "$n"
  nutcracker -t -c "$dir/nutcracker.yml" >/dev/null 2>&1 ||
    die "nutcracker refuses $dir/nutcracker.yml: $(nutcracker -t -c "$dir/nutcracker.yml" 2>&1 | tail -1)"
  nutcracker -c "$dir/nutcracker.yml" -o "$dir/nutcracker.log" -p "$dir/nutcracker.pid" \
    -s "$(free_port)" -a 127.0.0.1 -d
  local up=0
  for _ in $(seq 100); do
    if [[ $(redis-cli -p "$proxy_port" SET pmrt:cluster:probe 1 2>/dev/null) == OK ]]; then
      up=1
      break
    fi
    sleep 0.1
  done
  ((up)) || die "the proxy does not answer on port $proxy_port: $(tail -1 "$dir/nutcracker.log" 2>/dev/null)"
  redis-cli -p "$proxy_port" DEL pmrt:cluster:probe >/dev/null
  echo "$proxy_port" >"$dir/proxy.port"
  trap - EXIT
  echo "cluster: $n shards, proxy on 127.0.0.1:$proxy_port (state in $dir)"
}

status() {
  local n bad=0
  n=$(shard_count)
  for i in $(seq "$n"); do
    if alive "$dir/shard-$i.pid"; then
      echo "shard $i: pid $(cat "$dir/shard-$i.pid"), port $(cat "$dir/shard-$i.port"), $(redis-cli -p "$(cat "$dir/shard-$i.port")" DBSIZE) keys"
    else
      echo "shard $i: down"
      bad=1
    fi
  done
  if alive "$dir/nutcracker.pid"; then
    echo "proxy: pid $(cat "$dir/nutcracker.pid"), port $(cat "$dir/proxy.port")"
  else
    echo "proxy: down"
    bad=1
  fi
  return $bad
}

sync_all() {
  local n failed=0
  n=$(shard_count)
  for i in $(seq "$n"); do
    if [[ $(redis-cli -p "$(cat "$dir/shard-$i.port")" PMRT.SYNC 2>&1) != OK ]]; then
      echo "cluster.sh: shard $i did not sync" >&2
      failed=1
    fi
  done
  return $failed
}

restart() {
  local i=${1:-} n
  n=$(shard_count)
  if ! [[ $i =~ ^[0-9]+$ ]] || ((i < 1 || i > n)); then die "restart needs a shard number in 1..$n"; fi
  if alive "$dir/shard-$i.pid"; then
    kill -9 "$(cat "$dir/shard-$i.pid")"
    wait_gone "$dir/shard-$i.pid" 30 || die "shard $i survived SIGKILL for 30 s"
  fi
  start_shard "$i"
  echo "shard $i: restarted on port $(cat "$dir/shard-$i.port")"
}

# wait_gone PIDFILE SECONDS: true once the process is gone; false if it outlives SECONDS.
wait_gone() {
  local i
  for ((i = 0; i < $2 * 20; i++)); do
    if ! alive "$1"; then return 0; fi
    sleep 0.05
  done
  ! alive "$1"
}

# stop_all: SIGTERM to the proxy and every shard that runs (a shard then closes its pool
# cleanly); whatever is still there after 30 s gets SIGKILL (its pool recovers at next start).
stop_all() {
  local f
  for f in "$dir"/nutcracker.pid "$dir"/shard-*.pid; do
    if alive "$f"; then kill "$(cat "$f")"; fi
  done
  for f in "$dir"/nutcracker.pid "$dir"/shard-*.pid; do
    if ! wait_gone "$f" 30; then
      echo "cluster.sh: $(basename "$f" .pid) did not stop in 30 s: SIGKILL" >&2
      kill -9 "$(cat "$f")" 2>/dev/null || true
    fi
  done
  rm -f "$dir"/*.pid
}

stop() {
  shard_count >/dev/null
  stop_all
  echo "cluster: stopped (pools kept in $dir)"
}

case ${1:-} in
  start) start "${2:-}" ;;
  status) status ;;
  sync) sync_all ;;
  restart) restart "${2:-}" ;;
  stop) stop ;;
  *) die "usage: scripts/cluster.sh start N | status | sync | restart I | stop" ;;
esac
