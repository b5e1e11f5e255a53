#!/usr/bin/env bash
# The server comparison of docs/performance.md ("Server"): redis-benchmark -t TESTS against
# `pmrt serve` and against Debian's redis-server, persistence off, with its closest durability
# setting (appendonly yes, appendfsync everysec), and with appendfsync always (a write durable when
# it is acknowledged); and against three `pmrt serve` shards behind nutcracker
# (scripts/cluster.sh; when nutcracker is installed), on the same machine with the same flags:
#
#   redis-benchmark -p PORT -t TESTS -n N -P PIPELINE -q --csv      (50 clients, the default)
#
# for each PIPELINE, and for the test "multi" bench/server_txbench.cc (pmrt-server-txbench: 50
# clients pipelining N MULTI; SET; INCR; EXEC transactions; its rps counts EXECs;
# not through the proxy, which refuses MULTI). Every server keeps its data under one temporary directory on /dev/shm
# (tmpfs): pmrt's pool with PMEM_IS_PMEM_FORCE=1 (the pmem backend: cache-line flushes and
# fences, as on real persistent memory), redis's append-only file. Each figure is the median of
# REPEAT runs, each against a fresh server. Prints a table; with --json FILE, also appends one
# JSON line per figure: {"bench":"server","system":...,"test":"SET","pipeline":16,"rps":...}
# (test: SET, GET, INCR, MSET, HSET, MULTI).
#
#   bench/server_bench.sh [--json FILE] [PMRT_BINARY]
#     PMRT_BINARY   default build/release/tools/pmrt
#   environment: N=200000 PIPELINES="1 16" REPEAT=3 EPOCH_MS=64 THREADS=0 (0: one per core)
#                TESTS=set,get,incr,mset,hset,multi (redis-benchmark -t, MSET sets 10 keys per
#                request; multi: pmrt-server-txbench)
#                SYSTEMS (default: every one available: pmrt redis-nopersist redis-aof-everysec
#                redis-aof-always pmrt-cluster3)
#                KEYSPACE=K   random keys among K (redis-benchmark -r K; default: one key,
#                             redis-benchmark's own default)
#
# Needs redis-benchmark (redis-tools); the redis-server rows need redis-server (skipped, with a
# note, when it is not installed: apt-get install redis-server).
set -u -o pipefail

JSON=
BIN=build/release/tools/pmrt
while (($#)); do
  case $1 in
    --json)
      JSON=$2
      shift 2
      ;;
    -h | --help)
      sed -n '2,20p' "$0"
      exit 0
      ;;
    *)
      BIN=$1
      shift
      ;;
  esac
done
N=${N:-200000}
PIPELINES=${PIPELINES:-"1 16"}
REPEAT=${REPEAT:-3}
EPOCH_MS=${EPOCH_MS:-64}
THREADS=${THREADS:-0}
KEYSPACE=${KEYSPACE:-}
TESTS=${TESTS:-set,get,incr,mset,hset,multi}
# redis-benchmark's tests: TESTS without multi.
RB_TESTS=$(tr ',' '\n' <<<"$TESTS" | grep -vx multi | paste -sd, -)
TXBENCH=$(dirname "$BIN")/../bench/pmrt-server-txbench
rflag=()
[[ -n $KEYSPACE ]] && rflag=(-r "$KEYSPACE")

if ! command -v redis-benchmark >/dev/null; then
  echo "server_bench.sh: redis-benchmark not found (apt-get install redis-tools)" >&2
  exit 2
fi
if [[ ! -x $BIN ]]; then
  echo "server_bench.sh: $BIN not found; build it: cmake --preset release &&" \
    "cmake --build build/release -j2 --target pmrt-cli" >&2
  exit 2
fi
base=/dev/shm
[[ -d $base && -w $base ]] || base=${TMPDIR:-/tmp}
dir=$(mktemp -d "$base/pmrt-server-bench-XXXXXX")
pid=
cluster_up=
here=$(cd "$(dirname "$0")/.." && pwd)
cluster() { CLUSTER_DIR=$dir/run/cluster PMRT=$BIN "$here/scripts/cluster.sh" "$@"; }
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [[ -n $cluster_up ]] && cluster stop >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT

# A free TCP port on loopback.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_ready() {
  local port=$1
  for _ in $(seq 300); do
    [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && return 0
    sleep 0.1
  done
  echo "server_bench.sh: the server on port $port did not answer" >&2
  return 1
}

# start SYSTEM: starts a fresh server of that kind in $dir/run, sets pid and port.
start() {
  rm -rf "$dir/run"
  mkdir -p "$dir/run"
  port=$(free_port)
  case $1 in
    pmrt)
      PMEM_IS_PMEM_FORCE=1 "$BIN" serve "$dir/run/kv.pool" --create-size 1G --port "$port" \
        --epoch-ms "$EPOCH_MS" $( ((THREADS > 0)) && echo --threads "$THREADS") \
        >"$dir/run/log" 2>&1 &
      ;;
    redis-nopersist)
      redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/run" --save '' \
        --appendonly no >"$dir/run/log" 2>&1 &
      ;;
    redis-aof-everysec | redis-aof-always)
      redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/run" --save '' \
        --appendonly yes --appendfsync "${1#redis-aof-}" >"$dir/run/log" 2>&1 &
      ;;
    pmrt-cluster3)
      # Three shards behind nutcracker; the benchmark talks to the proxy.
      PMEM_IS_PMEM_FORCE=1 PROXY_PORT=$port SHARD_SIZE=1G \
        SERVE_ARGS="--epoch-ms $EPOCH_MS $( ((THREADS > 0)) && echo --threads "$THREADS")" \
        cluster start 3 >"$dir/run/log" 2>&1 || {
        echo "server_bench.sh: cluster.sh start 3 failed: $(tail -1 "$dir/run/log")" >&2
        return 1
      }
      cluster_up=1
      return 0
      ;;
  esac
  pid=$!
  wait_ready "$port"
}

stop() {
  if [[ -n $cluster_up ]]; then
    cluster stop >/dev/null 2>&1
    cluster_up=
    return
  fi
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pid=
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "n/a"}'; }

systems=(pmrt)
if command -v redis-server >/dev/null; then
  systems+=(redis-nopersist redis-aof-everysec redis-aof-always)
else
  echo "# redis-server not installed: no redis rows (apt-get install redis-server)"
fi
if command -v nutcracker >/dev/null; then
  systems+=(pmrt-cluster3)
else
  echo "# nutcracker not installed: no proxy row (apt-get install nutcracker)"
fi
if [[ -n ${SYSTEMS:-} ]]; then read -r -a systems <<<"$SYSTEMS"; fi
# The tests' names in redis-benchmark's CSV ("MSET (10 keys)" is MSET).
read -r -a tests <<<"$(tr 'a-z,' 'A-Z ' <<<"$TESTS")"

echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# redis-benchmark -t $RB_TESTS -n $N -P {$PIPELINES} ${rflag[*]} -q (50 clients); median of $REPEAT;" \
  "$(redis-server --version 2>/dev/null | cut -d' ' -f1-3)"
declare -A results
for sys in "${systems[@]}"; do
  for p in $PIPELINES; do
    for rep in $(seq "$REPEAT"); do
      start "$sys" || exit 1
      # --csv: "SET","434782.59",... (redis 7 adds latency columns; the second is requests/s).
      : >"$dir/out"
      : >"$dir/err"
      if [[ -n $RB_TESTS ]]; then
        redis-benchmark -p "$port" -t "$RB_TESTS" -n "$N" -P "$p" "${rflag[@]}" -q --csv \
          2>"$dir/err" | tr -d '"' |
          awk -F, 'NR > 1 || $1 != "test" {split($1, name, " "); print name[1], $2}' >"$dir/out"
        # (Through the proxy redis-benchmark warns that CONFIG GET is refused: not an error.)
        sed -i '/Could not fetch server CONFIG/d' "$dir/err"
      fi
      if [[ ,$TESTS, == *,multi,* && $sys != pmrt-cluster3 ]]; then
        "$TXBENCH" --port "$port" --clients 50 --transactions "$N" --pipeline "$p" \
          --keyspace "${KEYSPACE:-100000}" --system "$sys" 2>>"$dir/err" |
          sed -n 's/.*MULTI\/EXEC: \([0-9]*\) transactions.*/MULTI \1/p' >>"$dir/out"
      fi
      if [[ -s $dir/err ]]; then
        echo "server_bench.sh: a benchmark against $sys failed: $(cat "$dir/err")" >&2
      fi
      while read -r test rps; do
        results[$sys,$test,$p]+="$rps "
      done <"$dir/out"
      stop
    done
  done
done

printf '%-20s %-5s %9s %14s\n' system test pipeline requests/s
for sys in "${systems[@]}"; do
  for p in $PIPELINES; do
    for test in "${tests[@]}"; do
      rps=$(tr ' ' '\n' <<<"${results[$sys,$test,$p]:-}" | grep . | median)
      printf '%-20s %-5s %9s %14s\n' "$sys" "$test" "$p" "$rps"
      if [[ -n $JSON && $rps != n/a ]]; then
        printf '{"bench":"server","system":"%s","test":"%s","pipeline":%d,"rps":%s,"n":%d,"clients":50,"repeat":%d,"keyspace":%d}\n' \
          "$sys" "$test" "$p" "$rps" "$N" "$REPEAT" "${KEYSPACE:-1}" >>"$JSON"
      fi
    done
  done
done
