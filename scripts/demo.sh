#!/usr/bin/env bash
# The main job on the devices present: list them, then a verified in-core GEMM with its GFLOP/s on
# the CPU and on each GPU.
set -euo pipefail
build=${1:-build}
ts="$build/apps/tilestream"
echo "== devices"
"$ts" devices
echo
echo "== in-core GEMM on the CPU (OpenBLAS kernel), verified against the float64 reference"
"$ts" gemm --m 1536 --n 1536 --k 1536 --dtype f32 --kernel vendor --devices cpu --strategy in-core --repeat 3 --check
"$ts" gemm --m 1031 --n 517 --k 769 --dtype f64 --kernel tiled --devices cpu --strategy in-core --check
echo
echo "== out-of-core GEMM on the CPU: a budget of 25% of the operands, plan explained"
"$ts" gemm --m 3000 --n 3000 --k 3000 --dtype f32 --devices cpu --memory-budget 26MiB --explain --check --quiet
echo
echo "== Jacobi: 2-D Laplace on two CPU devices, checked bitwise against one device, image written"
mkdir -p demo-output
"$ts" jacobi --nx 512 --ny 512 --iters 2000 --devices cpu:2 --check --image demo-output/jacobi-field.png --quiet
gpus=$("$ts" devices --json | grep -o '"id": "cuda:[0-9]*"' | grep -o 'cuda:[0-9]*' || true)
for g in $gpus; do
  echo
  echo "== in-core GEMM on $g (cuBLAS), verified"
  "$ts" gemm --m 4096 --n 4096 --k 4096 --dtype f32 --kernel vendor --devices "$g" --strategy in-core --repeat 5
  "$ts" gemm --m 1031 --n 517 --k 769 --dtype f32 --kernel tiled --devices "$g" --check
done
