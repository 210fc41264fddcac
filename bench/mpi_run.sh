#!/usr/bin/env bash
# The benchmark over MPI ranks (issue 15): 4 ranks, one OpenBLAS thread each, tilestream's SUMMA
# against ScaLAPACK's PDGEMM/PSGEMM at the same 2x2 grid (f64 n = 4096, f32 n = 8192), then Jacobi
# strong scaling over 1, 2 and 4 ranks with the efficiency. JSON under bench/results/. Run it on a
# quiet machine: it takes every core (4 ranks oversubscribed on 2 cores here).
# LAYERS > 1 runs tilestream's GEMM as 2.5D over that many layers (ScaLAPACK stays on 2x2).
# usage: bench/mpi_run.sh [BUILD_DIR] [GEMM_SIZES] [JACOBI_N] [LAYERS]
set -euo pipefail
build=${1:-build}
sizes=${2:-f64:4096,f32:8192}
jn=${3:-4096}
layers=${4:-1}
cd "$(dirname "$0")/.."
hash=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && hash="$hash-dirty"
date=$(date -u +%Y-%m-%d)
host=$(hostname -s 2>/dev/null || echo host)
mkdir -p bench/results
run=tests/mpi/run_mpi_test.sh  # OpenMPI's root, oversubscribe and single-copy variables; OPENBLAS_NUM_THREADS=1
"$run" 4 "$build/bench/mpi_bench" gemm --sizes "$sizes" --block 128 --reps 3 --layers "$layers" \
  --git-hash "$hash" --out "bench/results/gemm-mpi-cpu$([ "$layers" = 1 ] || echo "-c$layers")-$host-$date.json"
parts=()
for np in 1 2 4; do
  out="bench/results/.jacobi-mpi-np$np.json"
  "$run" "$np" "$build/bench/mpi_bench" jacobi --nx "$jn" --ny "$jn" --iters 200 --git-hash "$hash" --out "$out"
  parts+=("$out")
done
/usr/bin/python3 - "bench/results/jacobi-mpi-cpu-$host-$date.json" "${parts[@]}" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[2:]]
base = runs[0]["seconds"]
for r in runs:
    r["speedup"] = base / r["seconds"]
    r["efficiency"] = r["speedup"] / r["ranks"]
    print(f'jacobi {r["nx"]}x{r["ny"]} on {r["ranks"]} ranks: {r["seconds"]:.3f} s, speedup {r["speedup"]:.2f}, efficiency {r["efficiency"]:.2f}')
json.dump({"benchmark": "mpi_jacobi_strong_scaling", "runs": runs}, open(sys.argv[1], "w"), indent=1)
PY
rm -f "${parts[@]}"
