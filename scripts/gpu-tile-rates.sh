#!/usr/bin/env bash
# The tile kinds' measured rates on a lent GPU (device_rates::tile_rates): the probe's tests and
# cost, then the Level 3, Cholesky and LU calls as users type them, each twice, with --explain
# (predicted against measured) and --check; JSON lines under $OUT. Run from the repository root
# after unpacking scripts/gpu-bundle.sh's bundle (that script says how).
set -u
out=${OUT:-./gpu-tile-rates-out}
mkdir -p "$out"
cli=build-gpu/apps/tilestream
echo "commit $(cat build-gpu/bundle-git-hash 2>/dev/null)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== tests"
timeout 240 build-gpu/tests/tilestream_tests \
    --gtest_filter='TileRates.*:Blas3Cuda.*:PotrfCuda.*:GetrfCuda.*:Blas3Balance.*' >"$out/tests.log" 2>&1
echo "tests rc $?"
grep -E '^probe |^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.log"
echo "== host LAPACK beside CUDA (bench/gpu/host_lapack_probe.cpp)"
timeout 60 build-gpu/bench/gpu/host_lapack_probe 2>&1 | tee "$out/host_lapack_probe.txt"
echo "== CLI (each twice)"
runs=("potrf --devices cuda:0 --n 4096 --dtype f64"
    "potrf --devices cuda:0 --n 8192 --dtype f64"
    "potrf --devices cuda:0 --n 4096 --dtype c64"
    "trsm --devices cuda:0 --m 4096 --n 4096 --dtype f64"
    "trmm --devices cuda:0 --m 4096 --n 4096 --dtype f64"
    "symm --devices cuda:0 --m 4096 --n 4096 --dtype f64"
    "syrk --devices cuda:0 --n 4096 --k 4096 --dtype f64"
    "getrf --devices cuda:0 --n 4096 --dtype f64"
    "potrf --devices cuda:0,cpu --n 8192 --dtype f64")
for round in 1 2; do
    for r in "${runs[@]}"; do
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086
        j=$(timeout 60 $cli $r --check --explain --json 2>>"$out/explain.log")
        rc=$?
        t1=$(date +%s.%N)
        printf '%s\n' "$j" >>"$out/cli.jsonl"
        echo "$j" | /usr/bin/python3 -c '
import json, sys
r, rc, wall = sys.argv[1], sys.argv[2], float(sys.argv[4]) - float(sys.argv[3])
try:
    j = json.loads(sys.stdin.read())
except Exception:
    print(f"{r:55s} rc {rc} (no JSON)"); sys.exit()
g = lambda k, d=0: j.get(k, d)
print("%-55s rc %s seconds %.5f predicted %.5f tile %s check %s process %.2f s" % (
    r, rc, g("seconds"), g("predicted_seconds"), g("tile"), g("check_passed"), wall))' "$r" "$rc" "$t0" "$t1"
    done
done
grep -E '^  (tile kinds|predicted|tiles )|^plan:' "$out/explain.log" | head -60
