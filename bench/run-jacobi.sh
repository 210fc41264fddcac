#!/usr/bin/env bash
# Runs the Jacobi benchmark on this machine's CPU (devices cpu and cpu:2, overlap on and off, f32
# and f64) and writes bench/results/jacobi-cpu-<host>-<date>.json. Arguments after the build
# directory go to jacobi_bench (e.g. --reps 9 --n 4096 --iters 50).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
hash=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && hash="$hash-dirty"
date=$(date -u +%Y-%m-%d)
host=$(hostname -s 2>/dev/null || echo host)
mkdir -p bench/results
"$build/bench/jacobi_bench" --git-hash "$hash" --devices "cpu;cpu:2" \
  --out "bench/results/jacobi-cpu-$host-$date.json" "${@:2}"
