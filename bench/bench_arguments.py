#!/usr/bin/env python3
"""The benchmarks' command lines: a bad argument ends the run with one message naming it and exit
status 2 before any work; 'none' as a routine list runs nothing. Usage: bench_arguments.py BLAS3_BENCH LU_BENCH"""
import subprocess
import sys

blas3, lu = sys.argv[1], sys.argv[2]
failures = []
checked = 0


def check(cmd, rc, first_line=None, stdout_empty=False):
    global checked
    checked += 1
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    err = run.stderr.splitlines()
    what = " ".join(cmd[1:])
    if run.returncode != rc:
        failures.append(f"{what}: exit {run.returncode}, expected {rc}; stderr: {run.stderr.strip()[:300]}")
    if first_line is not None and (not err or first_line not in err[0]):
        failures.append(f"{what}: stderr's first line {err[0] if err else '(none)'!r} lacks {first_line!r}")
    if stdout_empty and run.stdout.strip():
        failures.append(f"{what}: printed {run.stdout.strip()[:200]!r}, expected nothing")


check([blas3, "--ooc-tiles", "12x"], 2, "blas3_bench: error: --ooc-tiles: '12x' is not TILE/TILE_FREE")
check([blas3, "--ooc-tiles", "0/512"], 2, "--ooc-tiles: '0/512'")
check([blas3, "--routines", "nope", "--complex-routines", "none"], 2, "unknown Level 3 routine 'nope'")
check([blas3, "--bogus", "1"], 2, "error: unknown option --bogus")
check([blas3, "--reps", "3x"], 2, "--reps: '3x' is not a number")
check([blas3, "stray"], 2, "error: 'stray' is not an option")
check([blas3, "--reps"], 2, "error: --reps needs a value")
check([lu, "--reps", "x"], 2, "--reps: 'x' is not a number")
# Both lists empty: nothing to run, nothing printed, every (no) goal met.
check([blas3, "--routines", "none", "--complex-routines", "none"], 0, stdout_empty=True)

for f in failures:
    print("FAIL:", f)
print(f"all {checked} command lines as expected" if not failures else f"{len(failures)} failures in {checked} command lines")
sys.exit(1 if failures else 0)
