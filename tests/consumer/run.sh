#!/usr/bin/env bash
# Installs the pmrt build in $1 into a temporary prefix, then builds and runs a consumer project
# with find_package(pmrt CONFIG REQUIRED), and the same program with nothing but
# `pkg-config --cflags --libs pmrt`: either way the installed package alone must link it. The
# examples (examples/) are built and run both ways too (each run ends with its own check), and a
# program that crash-tests a structure of its own with the `testing` component (CMake only).
set -euo pipefail
build=$1; src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
examples=$(cd "$src/../../examples" && pwd)
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DPMRT_EXAMPLES="$examples" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer" "$work/a.pool" 3
"$work/build/crash_check"
for ex in bank object_index root_publish; do
  "$work/build/example-$ex" "$work/cmake-$ex.pool" run 200
done
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
g++ "$src/main.cc" -o "$work/consumer-pc" $(pkg-config --cflags --libs pmrt)
"$work/consumer-pc" "$work/b.pool" 3
for ex in bank object_index root_publish; do
  g++ "$examples/$ex.cc" -o "$work/$ex-pc" $(pkg-config --cflags --libs pmrt)
  "$work/$ex-pc" "$work/pc-$ex.pool" run 200
done
