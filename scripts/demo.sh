#!/usr/bin/env bash
# What tilestream does, on the devices present, in under a minute on a 2-core machine: the devices;
# on each device a verified GEMM with its GFLOP/s beside OpenBLAS called directly in the same run; an
# out-of-core GEMM with its plan explained; a GEMM on two CPU devices with its timeline drawn; the
# Jacobi field image. Every figure is checked (--check); pictures go to demo-output/.
set -euo pipefail
build=${1:-build}
ts="$build/apps/tilestream"
out=demo-output
mkdir -p "$out"
t0=$(date +%s.%N)

echo "== devices"
"$ts" devices

# One GEMM per device, sized for it. The device list comes from `devices --json` (one flat object
# per device), so every backend the build knows shows up here without editing this script.
gemm_on_device() {  # id kind object
  local id=$1 kind=$2 obj=$3 spec size repeat kernel=vendor
  case "$kind" in
    cpu) spec=cpu; size=2048; repeat=3 ;;  # `cpu` is one device on all the host's cores
    cuda) spec=$id; size=4096; repeat=3 ;;
    opencl)
      spec=$id
      # OpenCL on a CPU (PoCL) is slow: a small problem keeps the demo within its minute.
      # Its tiled kernel (local-memory tiles) avoids CLBlast's first-call compile of tens of seconds.
      if grep -qiE 'cpu|pthread' <<<"${obj#*\"name\"}"; then size=384; repeat=1; kernel=tiled; else size=2048; repeat=3; fi ;;
    *) echo "(no demo for $id: kind $kind)"; return 0 ;;
  esac
  echo
  echo "== in-core GEMM on $id: ${size}^3 f32, beside OpenBLAS on the host, checked in float64"
  local rc=0
  "$ts" gemm --m $size --n $size --k $size --devices "$spec" --strategy in-core --repeat $repeat \
    --kernel $kernel --anchor --check --quiet || rc=$?
  if [ $rc -eq 2 ]; then  # no vendor kernel or too little memory for in-core: tiled kernel, planner's strategy
    echo "(retrying with --kernel tiled --strategy auto)"
    "$ts" gemm --m $size --n $size --k $size --devices "$spec" --repeat $repeat \
      --kernel tiled --anchor --check --quiet
  elif [ $rc -ne 0 ]; then
    return $rc
  fi
  if [ "$kind" = opencl ]; then
    echo
    echo "== out-of-core GEMM on $id: a 1 MiB budget, odd shape, plan explained, checked"
    "$ts" gemm --m 701 --n 509 --k 613 --devices "$id@1MiB" --kernel tiled --explain --check --quiet
  fi
}
json=$("$ts" devices --json)
while IFS= read -r obj; do
  [ -n "$obj" ] || continue
  id=$(sed -n 's/^{"id": "\([^"]*\)".*/\1/p' <<<"$obj")
  kind=$(sed -n 's/.*"kind": "\([^"]*\)".*/\1/p' <<<"$obj")
  [ -n "$kind" ] || kind=${id%%:*}  # OpenCL entries name no kind: their id says it
  gemm_on_device "$id" "$kind" "$obj"
done < <(grep -o '{"id": "[^}]*}' <<<"$json" || true)

echo
echo "== out-of-core GEMM on the CPU: 3000^3 f32 (103 MiB of operands) through a 26 MiB budget, plan explained"
"$ts" gemm --m 3000 --n 3000 --k 3000 --dtype f32 --devices cpu --memory-budget 26MiB --explain --check --quiet

echo
echo "== GEMM on two CPU devices sharing a queue of work units, timeline drawn"
"$ts" gemm --m 2000 --n 1800 --k 1500 --devices cpu:2 --memory-budget 12MiB --check --quiet \
  --timeline "$out/gemm-timeline-cpu2.svg"

echo
echo "== Jacobi: 2-D Laplace on two CPU devices, checked bitwise against one device, field drawn"
"$ts" jacobi --nx 512 --ny 512 --iters 2000 --devices cpu:2 --check --image "$out/jacobi-field.png" --quiet

echo
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "== done in %.1f s; pictures:\n", b - a }'
echo "  $out/gemm-timeline-cpu2.svg   copies and kernels per device and stream (open in a browser)"
echo "  $out/jacobi-field.png         the solved field, colour-mapped"
