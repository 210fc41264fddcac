#!/usr/bin/env bash
# Runs the CPU benchmarks (the goals, GEMM kernels, out-of-core, several devices, Jacobi) and writes
# their JSON under bench/results/ (named by benchmark, host, date). Exits 1 when a goal is not met.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
hash=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && hash="$hash-dirty"
date=$(date -u +%Y-%m-%d)
host=$(hostname -s 2>/dev/null || echo host)
mkdir -p bench/results
# The goals first: every figure beside its goal; a figure below its goal fails the run (after the
# other benchmarks have still been written).
status=0
"$build/bench/goals_bench" --git-hash "$hash" --out "bench/results/goals-cpu-$host-$date.json" || status=$?
# Issue 25: the tiled kernel's AVX2 path beside OpenBLAS's Haswell kernels (both sides AVX2), where the
# CPU has AVX-512 (on an AVX2-only CPU the run above is that already).
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  TILESTREAM_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell "$build/bench/goals_bench" --only tiled,complex --git-hash "$hash" \
      --out "bench/results/goals-avx2-cpu-$host-$date.json" || status=$?
fi
"$build/bench/gemm_bench" --git-hash "$hash" --out "bench/results/gemm-cpu-$host-$date.json"
"$build/bench/ooc_bench" --git-hash "$hash" --out "bench/results/gemm-ooc-cpu-$host-$date.json"
# Issue 26: GEMM's pipeline against GEMM as tile tasks on the same tiles and budget, every strategy.
"$build/bench/engines_bench" --git-hash "$hash" --out "bench/results/gemm-engines-cpu-$host-$date.json"
"$build/bench/multi_bench" --git-hash "$hash" --cpu-threads 1 --sets cpu:1,cpu:2 --out "bench/results/gemm-multi-cpu-$host-$date.json"
"$build/bench/jacobi_bench" --git-hash "$hash" --devices "cpu;cpu:2" --out "bench/results/jacobi-cpu-$host-$date.json"
# The rest of Level 3 BLAS: in core / OpenBLAS, out of core / in core, cpu:2 efficiency (goals: exit 1 below one).
"$build/bench/blas3_bench" --git-hash "$hash" --out "bench/results/blas3-cpu-$host-$date.json" || status=$?
# Cholesky (issue 29): potrf in core / OpenBLAS ?potrf, out of core (a quarter fits) / in core (goals: exit 1 below one).
"$build/bench/potrf_bench" --git-hash "$hash" --out "bench/results/potrf-cpu-$host-$date.json" || status=$?
# Process start with the BLAS drop-in preloaded, beside the system BLAS alone (goal: < 5 ms, < 10 MB).
if [ -f "$build/src/blas/libtilestream_blas.so" ]; then
  python3 bench/blas_startup.py --shim "$build/src/blas/libtilestream_blas.so" --git-hash "$hash" \
      --out "bench/results/blas-startup-$host-$date.json" > /dev/null || status=1
fi
# Issue 27: one call over the sweep n = 1..4096 and skinny shapes beside OpenBLAS from C and numpy's @
# from Python, batched stacks beside np.matmul, numpy under the drop-in beside numpy alone.
"$build/bench/small_bench" --git-hash "$hash" --out "bench/results/small-cpu-$host-$date.json" || status=1
if [ -d "$build/python" ]; then
  PYTHONPATH="$build/python" /usr/bin/python3 bench/small_python.py --git-hash "$hash" \
      --out "bench/results/small-python-$host-$date.json" || status=1
fi
# The sweep as a plot (time per call against n: tilestream and its anchors; README's is docs/small-sweep.svg).
if [ -f "bench/results/small-python-$host-$date.json" ]; then
  /usr/bin/python3 bench/plot_small.py --cpu "bench/results/small-cpu-$host-$date.json" \
      --python "bench/results/small-python-$host-$date.json" --out "bench/results/small-sweep-$host-$date.svg" || status=1
fi
if [ -f "$build/src/blas/libtilestream_blas.so" ]; then
  # numpy alone, under the drop-in with its defaults (the goal row: >= 0.95x at every n; exit 1
  # below), and with every call routed (TILESTREAM_BLAS_THRESHOLD=1, a diagnostic row); alternated
  # rounds, no log in the timed processes.
  for dt in float32 float64; do
    /usr/bin/python3 bench/blas_shim_numpy.py --shim "$build/src/blas/libtilestream_blas.so" --dtype $dt --repeat 21 \
        --rounds 5 --sizes 1,2,4,8,16,32,64,128,256,512,1024,2048,4096 --git-hash "$hash" \
        --out "bench/results/blas-shim-numpy-$dt-$host-$date.json" > /dev/null || status=1
  done
  # The drop-in's LAPACK routines through numpy.linalg (cholesky: dpotrf_, solve: dgesv_, det: dgetrf_),
  # defaults and every call routed, around the default threshold's n (739 for potrf, 587 for getrf).
  for op in cholesky solve det; do
    /usr/bin/python3 bench/blas_shim_numpy.py --shim "$build/src/blas/libtilestream_blas.so" --op $op --repeat 11 \
        --rounds 3 --sizes 16,64,256,512,739,1024,2048 --git-hash "$hash" \
        --out "bench/results/blas-shim-numpy-$op-$host-$date.json" > /dev/null || status=1
  done
fi
# The drop-in's thresholds for the Level 3 routines other than GEMM (cblas_dtrsm, dsyrk, ...; n = 64..2048):
# the system BLAS alone, preloaded with the default thresholds, and with every call routed.
if [ -f "$build/src/blas/libtilestream_blas.so" ] && [ -x "$build/bench/blas3_shim_threshold" ]; then
  /usr/bin/python3 bench/blas3_shim_threshold.py --build "$build" --git-hash "$hash" \
      --out "bench/results/blas3-shim-threshold-$host-$date.json" > /dev/null || status=1
fi
# Issue 27: Ctrl-C within 0.5 s (the CLI's default gemm, Python's tilestream.matmul; SIGINT at random
# moments) and the cost of the ~0.2 s steps against one unsplit call (split_bench; goal >= 0.98x).
if [ -x "$build/bench/split_bench" ] && [ -x "$build/apps/tilestream" ] && [ -d "$build/python" ]; then
  /usr/bin/python3 bench/cancel_latency.py --cli "$build/apps/tilestream" --pythonpath "$build/python" \
      --split-bench "$build/bench/split_bench" --n 4096 --samples 8 --git-hash "$hash" \
      --out "bench/results/cancel-latency-$host-$date.json" || status=1
fi
# Issue 27, start-up: a first call with the default devices `all` against `cpu` (CLI gemm, numpy under
# the drop-in), where `all` finds no more than the CPU (goal: within 10 ms and 10 MB).
if [ -x "$build/apps/tilestream" ]; then
  shim_args=()
  [ -f "$build/src/blas/libtilestream_blas.so" ] && shim_args=(--shim "$build/src/blas/libtilestream_blas.so")
  /usr/bin/python3 bench/first_call_devices.py --cli "$build/apps/tilestream" "${shim_args[@]}" --rounds 11 \
      --git-hash "$hash" --out "bench/results/first-call-devices-$host-$date.json" || status=1
fi
# Issue 29: getrf beside OpenBLAS's dgetrf_/zgetrf_ (n = 8192 f64, 4096 c64) and out of core (goals: exit 1 below one).
"$build/bench/lu_bench" --git-hash "$hash" --out "bench/results/lu-cpu-$host-$date.json" || status=$?
exit $status
