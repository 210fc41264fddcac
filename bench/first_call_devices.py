#!/usr/bin/env python3
"""Issue 27, start-up: what the default devices (`auto`; `all` before 2026-11-26's eighth session,
the same discovery) cost a process's first call against naming the CPU, where they find nothing
more than the CPU (no GPU driver; OpenCL, if any, PoCL on the
CPU): one process per sample, the configurations alternated, medians of wall time (spawn to exit)
and peak resident memory (GNU time's %M).

  cli     `tilestream gemm --m 64 --n 64 --k 64 --devices auto` beside `--devices cpu`;
  drop_in with --shim: numpy's `a @ b` (64^3 f64, routed: TILESTREAM_BLAS_THRESHOLD=1) under the
          drop-in with TILESTREAM_DEVICES unset (auto) beside TILESTREAM_DEVICES=cpu.

Goal: `auto` within 10 ms and 10 MB of `cpu` here. Also recorded: `tilestream devices --json`'s
cuda_status and opencl_under_all (why `all` skips what it skips). Writes one JSON object (git hash,
machine, CPU model, ISA, environment, date) to --out or stdout; exits 1 when the goal is not met.

  bench/first_call_devices.py --cli build/apps/tilestream --shim build/src/blas/libtilestream_blas.so \\
      --rounds 11 --out bench/results/first-call-devices.json
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_shim_numpy import machine, write_report  # noqa: E402  (the same machine record)

GOAL_SECONDS, GOAL_BYTES = 10e-3, 10e6
NUMPY = 'import numpy as np\na = np.random.rand(64, 64)\nb = a @ a\n'


def once(argv, env):
    """(seconds, peak resident bytes) of one process."""
    t0 = time.perf_counter()
    p = subprocess.run(['/usr/bin/time', '-f', '%M'] + argv, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit('%s failed (%d): %s' % (' '.join(argv), p.returncode, p.stderr[-2000:]))
    return seconds, int(p.stderr.strip().splitlines()[-1]) * 1024


def compare(name, configs, rounds):
    """configs: {label: (argv, env)}; alternated rounds; medians."""
    samples = {label: [] for label in configs}
    labels = list(configs)
    for label in labels:  # warm the page cache
        once(*configs[label])
    for r in range(rounds):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            samples[label].append(once(*configs[label]))
    rows = {label: {'median_seconds': statistics.median(s for s, _ in v),
                    'median_peak_bytes': statistics.median(b for _, b in v),
                    'seconds': [s for s, _ in v], 'peak_bytes': [b for _, b in v]} for label, v in samples.items()}
    extra_s = rows['auto']['median_seconds'] - rows['cpu']['median_seconds']
    extra_b = rows['auto']['median_peak_bytes'] - rows['cpu']['median_peak_bytes']
    met = extra_s < GOAL_SECONDS and extra_b < GOAL_BYTES
    print('%-8s auto %.4f s %6.1f MB   cpu %.4f s %6.1f MB   auto - cpu: %+.4f s %+.1f MB; %s' %
          (name, rows['auto']['median_seconds'], rows['auto']['median_peak_bytes'] / 1e6, rows['cpu']['median_seconds'],
           rows['cpu']['median_peak_bytes'] / 1e6, extra_s, extra_b / 1e6, 'met' if met else 'NOT met'), file=sys.stderr)
    return dict(rows, all_minus_cpu_seconds=extra_s, all_minus_cpu_peak_bytes=extra_b, met=met)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--cli', required=True, help='build/apps/tilestream')
    ap.add_argument('--shim', help='build/src/blas/libtilestream_blas.so; none: no drop-in part')
    ap.add_argument('--python', default='/usr/bin/python3', help='a Python with numpy, for the drop-in part')
    ap.add_argument('--rounds', type=int, default=11)
    ap.add_argument('--git-hash', default='')
    ap.add_argument('--out', default='')
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith('TILESTREAM_') and k != 'LD_PRELOAD'}
    listing = json.loads(subprocess.run([args.cli, 'devices', '--json'], env=base, capture_output=True, text=True,
                                        check=True, timeout=300).stdout)
    report = {'benchmark': "first call with the default devices 'auto' against 'cpu'", 'machine': machine(),
              'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'git': args.git_hash or subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], capture_output=True,
                                                     text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip(),
              'rounds': args.rounds, 'goal_seconds': GOAL_SECONDS, 'goal_bytes': GOAL_BYTES,
              'cuda_status': listing.get('cuda_status'), 'opencl_status': listing.get('opencl_status'),
              'opencl_under_all': listing.get('opencl_under_all'),
              'devices_under_all': [d['id'] for d in listing.get('devices', [])]}
    gemm = [args.cli, 'gemm', '--m', '64', '--n', '64', '--k', '64']
    report['cli'] = compare('cli', {'auto': (gemm + ['--devices', 'auto'], base),
                                    'cpu': (gemm + ['--devices', 'cpu'], base)}, args.rounds)
    met = report['cli']['met']
    if args.shim:
        shim = os.path.abspath(args.shim)
        routed = dict(base, LD_PRELOAD=shim, TILESTREAM_BLAS_THRESHOLD='1')
        report['drop_in'] = compare('drop-in', {'auto': ([args.python, '-c', NUMPY], routed),
                                                'cpu': ([args.python, '-c', NUMPY], dict(routed, TILESTREAM_DEVICES='cpu'))},
                                    args.rounds)
        met = met and report['drop_in']['met']
    write_report(report, args.out, met)
    return 0 if met else 1


if __name__ == '__main__':
    sys.exit(main())
