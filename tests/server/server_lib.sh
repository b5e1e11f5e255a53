# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # sets python/port/server_pid for, and reads pmrt from, the caller
# Shared by the server's shell tests (sourced, not run): a scratch directory removed at exit,
# fail(), starting `pmrt serve` in the background, and the python3 that has redis-py.
#
#   source "$(dirname "$0")/server_lib.sh"
#   make_test_dir redis-cli        # sets dir; the EXIT trap kills the server and removes dir
#   start_server "$dir/kv.pool" --create-size 64M   # sets server_pid and port
#   redis_python || exit 77        # sets python
#   expect PONG PING               # with a cli() function defined by the caller

# make_test_dir NAME: a fresh directory on /dev/shm (or $TMPDIR) in `dir`, removed at exit
# together with the server started by start_server.
make_test_dir() {
  local base=/dev/shm
  [[ -d $base && -w $base ]] || base=${TMPDIR:-/tmp}
  dir=$(mktemp -d "$base/pmrt-$1-XXXXXX")
  server_pid=
  trap server_lib_cleanup EXIT
}

server_lib_cleanup() {
  if [[ -n ${server_pid:-} ]]; then kill -9 "$server_pid" 2>/dev/null; fi
  rm -rf "$dir"
}

# fail MESSAGE...: the message and the server's output, then exit 1.
fail() {
  echo "FAIL: $*" >&2
  if [[ -f $dir/server.out ]]; then sed 's/^/  server: /' "$dir/server.out" >&2; fi
  exit 1
}

# start_server POOL ARGS... [--wrap-prlimit]: `pmrt serve POOL --port 0 ARGS...` in the
# background (under a 2.5 GiB address-space limit with --wrap-prlimit); sets server_pid and port
# (from its start line). Uses $pmrt.
start_server() {
  local pool=$1
  shift
  local wrap=()
  if [[ ${*: -1} == --wrap-prlimit ]]; then # the last argument: run under 2.5 GiB of address space
    wrap=(prlimit --as=$((2560 << 20)) --)
    set -- "${@:1:$#-1}"
  fi
  : >"$dir/server.out" # exists before the background job's redirection opens it
  "${wrap[@]}" "$pmrt" serve "$pool" --port 0 "$@" >>"$dir/server.out" 2>&1 &
  server_pid=$!
  port=
  for _ in $(seq 600); do
    port=$(sed -n 's/.*listening on \(\[[^]]*\]\|[^ ,]*\):\([0-9]*\)[, ].*/\2/p' "$dir/server.out" | head -1)
    if [[ -n $port ]]; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || fail "the server on $pool exited"
    sleep 0.1
  done
  fail "no listening line"
}

# redis_python: sets `python` to an interpreter that imports redis (Debian's python3-redis
# installs for /usr/bin/python3, which another python3 earlier in PATH may not search); false
# when there is none.
redis_python() {
  local p
  python=
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import redis' 2>/dev/null; then
      python=$p
      return 0
    fi
  done
  return 1
}

# expect WANT CMD...: the output of `cli CMD...` (the caller's redis-cli wrapper; its plain,
# non-tty format) is exactly WANT, else fail.
expect() {
  local want=$1
  shift
  local got
  got=$(cli "$@" 2>&1) || fail "redis-cli $* exited with $?"
  [[ $got == "$want" ]] || fail "redis-cli $*: got '$got', want '$want'"
}
