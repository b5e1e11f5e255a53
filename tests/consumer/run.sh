#!/usr/bin/env bash
# Installs the pmrt build in $1 into a temporary prefix, then builds and runs a consumer project
# with find_package(pmrt CONFIG REQUIRED), and a second consumer with pkg-config's pmrt.pc.
set -euo pipefail
build=$1; src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer" "$work/a.pool"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
g++ -std=c++20 "$src/main.cc" -o "$work/consumer-pc" $(pkg-config --cflags --libs pmrt) \
  -labsl_strings -labsl_str_format_internal
"$work/consumer-pc" "$work/b.pool"
