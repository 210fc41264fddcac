#!/usr/bin/env python3
"""numpy `a @ b` (or a numpy.linalg call that reaches the drop-in's LAPACK routines: `--op solve`
dgesv_, `cholesky` dpotrf_, `det` dgetrf_) with and without libtilestream_blas.so preloaded (square
n x n, one dtype).

Each configuration runs in its own process: the plain one uses numpy's BLAS, the shimmed one has the
drop-in preloaded with TILESTREAM_BLAS_THRESHOLD=1 so that every product goes through tilestream
(its log is checked for that). Per size: a warm-up, then the median of --repeat timed calls into a
preallocated `out` (no allocation in the timed loop; operands rotated between two pairs when they
fit in cache). Prints one JSON object (git hash, machine, date, per-size seconds, GFLOP/s and the
ratio shimmed / plain).

    bench/blas_shim_numpy.py --shim build/src/blas/libtilestream_blas.so --sizes 4096 --repeat 3
    bench/blas_shim_numpy.py --shim build/src/blas/libtilestream_blas.so \\
        --sizes 32,64,96,128,192,256,384,512 --repeat 21          # where the threshold should sit
    bench/blas_shim_numpy.py --shim build/src/blas/libtilestream_blas.so --op cholesky \\
        --sizes 256,512,739,1024,2048 --repeat 7                  # the LAPACK routines' crossover

Run it on a quiet machine: the ratio near 1 is the point, and other processes' load moves it.
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile


# The LAPACK routine each numpy.linalg call reaches, and its flop count (n x n; solve: one right-hand side).
LINALG = {'solve': ('gesv_', lambda n: 2 * n ** 3 / 3 + 2 * n * n),
          'cholesky': ('potrf_', lambda n: n ** 3 / 3),
          'det': ('getrf_', lambda n: 2 * n ** 3 / 3)}


def measure(sizes, dtype, repeat, op='matmul'):
    import time
    import numpy as np
    rng = np.random.default_rng(1)
    out = []
    for n in sizes:
        pairs = 1 if 2 * n * n * np.dtype(dtype).itemsize > (8 << 20) else 2
        ops = [(rng.uniform(-1, 1, (n, n)).astype(dtype), rng.uniform(-1, 1, (n, n)).astype(dtype))
               for _ in range(pairs)]
        c = np.empty((n, n), dtype)
        if op == 'matmul':
            call = lambda a, b: np.matmul(a, b, out=c)
        elif op == 'solve':
            ops = [(a + n * np.eye(n, dtype=dtype), b[:, 0].copy()) for a, b in ops]
            call = np.linalg.solve
        elif op == 'cholesky':
            ops = [(a @ a.T + n * np.eye(n, dtype=dtype), None) for a, _ in ops]
            call = lambda a, _: np.linalg.cholesky(a)
        else:
            call = lambda a, _: np.linalg.det(a)
        call(*ops[0])  # warm-up (and, shimmed, the context's first opening)
        times = []
        for r in range(repeat):
            a, b = ops[r % pairs]
            t0 = time.perf_counter()
            call(a, b)
            times.append(time.perf_counter() - t0)
        times.sort()
        out.append({'n': n, 'seconds': times[len(times) // 2], 'min_seconds': times[0]})
    return out


def child(args):
    print(json.dumps(measure([int(s) for s in args.sizes.split(',')], args.dtype, args.repeat, args.op)))


def run_config(args, shim, log):
    env = {k: v for k, v in os.environ.items() if not k.startswith('TILESTREAM_')}
    if shim:
        env['LD_PRELOAD'] = os.path.abspath(shim)
        env['TILESTREAM_BLAS_THRESHOLD'] = '1'
        env['TILESTREAM_BLAS_LOG'] = log
        if args.devices:
            env['TILESTREAM_DEVICES'] = args.devices
    cmd = [sys.executable, os.path.abspath(__file__), '--child', '--sizes', args.sizes, '--dtype', args.dtype,
           '--repeat', str(args.repeat), '--op', args.op]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def machine():
    cpu = platform.processor()
    try:
        with open('/proc/cpuinfo') as f:
            cpu = re.search(r'model name\s*:\s*(.*)', f.read()).group(1)
    except (OSError, AttributeError):
        pass
    return {'cpu': cpu, 'cores': os.cpu_count(), 'host': platform.node(),
            'load_average': os.getloadavg()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--shim', help='path of libtilestream_blas.so')
    ap.add_argument('--sizes', default='4096')
    ap.add_argument('--dtype', default='float64', choices=['float32', 'float64'])
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--devices', default='', help='TILESTREAM_DEVICES for the shimmed run (default: all)')
    ap.add_argument('--op', default='matmul', choices=['matmul'] + sorted(LINALG),
                    help='a @ b (cblas_?gemm), or numpy.linalg solve (?gesv_), cholesky (?potrf_), det (?getrf_)')
    ap.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if not args.shim or not os.path.exists(args.shim):
        ap.error('--shim PATH (libtilestream_blas.so) is required')
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, 'blas.log')
        plain = run_config(args, None, log)
        shimmed = run_config(args, args.shim, log)
        with open(log) as f:
            lines = [l for l in f if l.startswith('routine=')]
    if args.op != 'matmul':  # numpy.linalg may call other BLAS routines too: only its LAPACK call counts
        lines = [l for l in lines if l.split()[0].endswith(LINALG[args.op][0])]
    on_tilestream = sum('ran=tilestream' in l for l in lines)
    devices = sorted({m.group(1) for l in lines for m in [re.search(r'devices=(\S+)', l)] if m})
    if on_tilestream != len(lines) or not lines:
        sys.exit('the shimmed run did not go through tilestream: %d of %d calls' % (on_tilestream, len(lines)))
    try:
        git = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        git = ''
    rows = []
    for p, s in zip(plain, shimmed):
        flops = 2.0 * p['n'] ** 3 if args.op == 'matmul' else LINALG[args.op][1](p['n'])
        rows.append({'n': p['n'], 'plain_seconds': p['seconds'], 'shim_seconds': s['seconds'],
                     'plain_gflops': flops / p['seconds'] / 1e9, 'shim_gflops': flops / s['seconds'] / 1e9,
                     'ratio_shim_to_plain': s['seconds'] / p['seconds']})
    what = 'a @ b' if args.op == 'matmul' else 'numpy.linalg.%s (%s)' % (args.op, LINALG[args.op][0])
    print(json.dumps({'benchmark': 'numpy %s with and without libtilestream_blas.so' % what, 'git': git,
                      'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
                      'machine': machine(), 'numpy_python': sys.executable, 'dtype': args.dtype,
                      'repeat': args.repeat, 'tilestream_devices': devices, 'calls_logged': len(lines),
                      'results': rows}, indent=1))


if __name__ == '__main__':
    main()
