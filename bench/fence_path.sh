#!/usr/bin/env bash
# Counts the instructions a single-threaded pmrt-txbench run executes from one commit fence to
# the next (docs/txn.md, "Design notes", "The path between fences"): the whole transaction loop
# of one transaction, by function. Deterministic, unlike timings on a shared machine: the figure a
# change to the commit or begin path is checked with before it is timed side by side.
#
#   bench/fence_path.sh [build-dir] [system] [words] [dist]   # defaults: build/release pmrt 1 uniform
#
# It runs pmrt-txbench under gdb (apt-get install gdb), stops at the system's fence after 20,000
# of them (the steady state: pmrt's prewarm is over, the log's tail block has room), then
# single-steps through TRACES (4) fence-to-fence paths and prints each one's instruction count
# and the last one's split by function. Systems: pmrt (the fence of txn's one-word commit,
# streamed or clwb as the processor's RecordWrites says; K = 1 only) and floor. A path that
# takes a slow branch (an epoch boundary or a reclamation while gdb holds the thread) shows as
# a longer count; the shortest is the steady state.
set -euo pipefail
build=${1:-build/release}
system=${2:-pmrt}
words=${3:-1}
dist=${4:-uniform}
traces=${TRACES:-4}
bin=$build/bench/pmrt-txbench
case "$system" in
  pmrt) fn='CommitOne(Stream|Crc)' ;;
  floor) fn='PmrtModeSystem<.*Mode\)2>::Tx' ;;
  *) echo "fence_path.sh: system must be pmrt or floor" >&2; exit 2 ;;
esac
if [ "$system" = pmrt ] && [ "$words" != 1 ]; then
  echo "fence_path.sh: pmrt's one-word commit needs words = 1" >&2
  exit 2
fi
# The first sfence of the function whose name matches (file offset; gdb runs the binary at
# 0x555555554000 with address randomization off).
kind=$(PMEM_IS_PMEM_FORCE=1 "$bin" --json --system pmrt --words 1 --array 4096 --seconds 0.01 \
  --warmup 0 2>/dev/null | tail -1 | sed 's/.*"record_writes": "\([a-z]*\)".*/\1/')
[ "$system" = pmrt ] && fn=$([ "$kind" = stream ] && echo 'CommitOneStream' || echo 'CommitOneCrc')
off=$(objdump -d --no-show-raw-insn -C "$bin" |
  awk -v re="$fn" '/^[0-9a-f]+ <.*>:$/ { f = ($0 ~ re) } f && !done && /\tsfence/ { sub(":", "", $1); print $1; done = 1 }')
[ -n "$off" ] || { echo "fence_path.sh: no sfence found in $fn" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cat > "$out.gdb" <<EOF
set pagination off
set confirm off
set disable-randomization on
python
import gdb
def trace(addr, n, out):
    with open(out, "w") as fh:
        for _ in range(n):
            count, fns = 0, []
            gdb.execute("stepi", to_string=True)
            while int(gdb.parse_and_eval("\$pc")) != addr and count < 20000:
                line = gdb.execute("x/i \$pc", to_string=True)
                fns.append(line.split("<", 1)[1].split("+", 1)[0].split(">", 1)[0] if "<" in line else "?")
                gdb.execute("stepi", to_string=True)
                count += 1
            fh.write("PATH %d\n" % count)
            fh.write("\n".join(fns) + "\n")
end
EOF
PMEM_IS_PMEM_FORCE=1 timeout 600 gdb -batch -x "$out.gdb" -ex starti \
  -ex "break *(0x555555554000+0x$off)" -ex "ignore 1 20000" -ex continue \
  -ex "python trace(0x555555554000+0x$off, $traces, '$out')" -ex kill \
  --args "$bin" --array 1048576 --seconds 600 --warmup 0 --budget-mb 64 --system "$system" \
  --words "$words" --dist "$dist" --threads 1 $([ "$system" = pmrt ] && echo --prewarm) \
  > /dev/null 2>&1 || true
rm -f "$out.gdb"
echo "$system K=$words $dist ($kind records): instructions from one fence to the next:" \
  "$(grep '^PATH' "$out" | cut -d' ' -f2 | tr '\n' ' ')"
awk '/^PATH/ { n++ } n == '"$traces"' && !/^PATH/' "$out" | c++filt | uniq -c |
  awk '{ c = $1; $1 = ""; sum[$0] += c; if (!($0 in seen)) { seen[$0] = 1; order[++k] = $0 } }
       END { for (i = 1; i <= k; i++) printf "%6d %s\n", sum[order[i]], substr(order[i], 1, 110) }'
