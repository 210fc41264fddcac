#!/usr/bin/env bash
# The benchmark over MPI ranks (issues 15, 28): 4 ranks (oversubscribed on 2 cores here) and 1 rank,
# one OpenBLAS thread each, tilestream's SUMMA against ScaLAPACK's PDGEMM/PSGEMM in the same run on
# the same grid (the model's best for the shape): square (f64 n = 4096, f32 n = 8192), tall-skinny
# (m = 65536, n = k = 512, f64 and f32), sub-matrices at offset 77 (f64 n = 4096) and complex
# beside ScaLAPACK's PZGEMM/PCGEMM (c64 and c32 n = 2048, c64 at offset 77), with the
# bytes each receives per rank; then Jacobi strong scaling over 1, 2 and 4 ranks with the
# efficiency. JSON under bench/results/. Run it on a quiet machine: it takes every core.
# LAYERS > 1 runs tilestream's GEMM as 2.5D over that many layers (ScaLAPACK stays on 2x2).
# usage: [REPS=3] bench/mpi_run.sh [BUILD_DIR] [GEMM_SIZES] [JACOBI_N] [LAYERS]
set -euo pipefail
build=${1:-build}
sizes=${2:-f64:4096,f32:8192,f64:65536x512x512,f32:65536x512x512,f64:4096+77,c64:2048,c32:2048,c64:2048+77}
jn=${3:-4096}
layers=${4:-1}
cd "$(dirname "$0")/.."
hash=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && hash="$hash-dirty"
date=$(date -u +%Y-%m-%d)
host=$(hostname -s 2>/dev/null || echo host)
mkdir -p bench/results
run=tests/mpi/run_mpi_test.sh  # OpenMPI's root, oversubscribe and single-copy variables; OPENBLAS_NUM_THREADS=1
"$run" 4 "$build/bench/mpi_bench" gemm --sizes "$sizes" --block 128 --reps "${REPS:-3}" --layers "$layers" \
  --git-hash "$hash" --out "bench/results/gemm-mpi-cpu$([ "$layers" = 1 ] || echo "-c$layers")-$host-$date.json"
# One rank: both libraries on a 1x1 grid (tilestream one local call, ScaLAPACK its local dgemm).
"$run" 1 "$build/bench/mpi_bench" gemm --sizes "$sizes" --block 128 --reps "${REPS:-3}" \
  --git-hash "$hash" --out "bench/results/gemm-mpi-cpu-np1-$host-$date.json"
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
