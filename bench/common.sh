# Shared by the bench/*_ab.sh scripts (sourced): the checks and the header line of a run.

# require_executables SCRIPT BIN...: exits 2 naming the first BIN that is not an executable.
require_executables() {
  local script=$1 bin
  shift
  for bin in "$@"; do
    if [[ ! -x "$bin" ]]; then
      echo "$script: $bin not found; build it first" >&2
      exit 2
    fi
  done
}

# machine_line: "# machine: N CPUs, MODEL, load average A B C" (the figures' context).
machine_line() {
  echo "# machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1)," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
