#!/usr/bin/env python3
"""tilestream.matmul from Python against the CLI on the same problem (issue 14: overhead below 3%).

Alternating rounds: the CLI (`tilestream gemm --m N --n N --k N --dtype D --repeat R --json`, its own
median, random operands) and, in this process, the wall time of `tilestream.matmul(a, b, out=out)`
on random operands of the same shape (median of R calls, after a warm-up). Default options on both
sides: the default devices (`auto`: the GPUs, else the CPU) and the vendor kernel. Prints one JSON object.
usage: PYTHONPATH=build/python bench/python_vs_cli.py --cli build/apps/tilestream [--n 4096] [--dtype f64]
"""
import argparse, json, os, platform, statistics, subprocess, sys, time
from datetime import datetime, timezone

import numpy as np
import tilestream

p = argparse.ArgumentParser()
p.add_argument("--cli", required=True)
p.add_argument("--n", type=int, default=4096)
p.add_argument("--dtype", default="f64", choices=["f32", "f64"])
p.add_argument("--repeat", type=int, default=3)
p.add_argument("--rounds", type=int, default=3)
args = p.parse_args()
n, dt = args.n, (np.float64 if args.dtype == "f64" else np.float32)
rng = np.random.default_rng(1)
a = rng.random((n, n)).astype(dt)
b = rng.random((n, n)).astype(dt)
out = np.empty((n, n), dt)
tilestream.matmul(a, b, out=out)  # warm-up: the context opens its devices once
cli_runs, py_runs = [], []
for _ in range(args.rounds):
    r = subprocess.run([args.cli, "gemm", "--m", str(n), "--n", str(n), "--k", str(n), "--dtype", args.dtype,
                        "--repeat", str(args.repeat), "--json", "--quiet"], check=True, capture_output=True, text=True)
    cli_runs.append(json.loads(r.stdout.strip().splitlines()[-1])["seconds"])
    t = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        tilestream.matmul(a, b, out=out)
        t.append(time.perf_counter() - t0)
    py_runs.append(statistics.median(t))
err = float(np.abs(out - a.astype(np.float64) @ b.astype(np.float64)).max())
cli, py = statistics.median(cli_runs), statistics.median(py_runs)
git = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({
    "benchmark": "python_vs_cli", "git_hash": git, "machine": f"{platform.node()} ({cpu}, {os.cpu_count()} cores)",
    "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "device": "devices 'auto' (default)",
    "kernel_environment": {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "TILESTREAM_CPU_ISA")},
    "n": n, "dtype": args.dtype, "rounds": args.rounds, "repeat": args.repeat,
    "cli_median_seconds_per_round": cli_runs, "python_median_seconds_per_round": py_runs,
    "cli_median_seconds": cli, "python_median_seconds": py, "python_overhead": py / cli - 1.0,
    "max_abs_error_vs_numpy_f64": err}, indent=1))
