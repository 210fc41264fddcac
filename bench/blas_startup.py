#!/usr/bin/env python3
"""Process start-up cost of the BLAS drop-in: a program (default /bin/true) started with nothing
preloaded, with the system BLAS preloaded (the anchor: what any BLAS client pays), with the drop-in,
and with the drop-in and the system BLAS; rounds alternate the four so load drifts cancel. Per
configuration: median wall time of spawn-to-exit and median peak resident memory (ru_maxrss of the
child). Goal (issue 27): the drop-in adds under 5 ms and under 10 MB to the system BLAS alone.
Writes one JSON object (git hash, machine, date, environment) to --out or stdout; exits 1 when a goal
is not met. Run it on a quiet machine.

  bench/blas_startup.py --shim build/src/blas/libtilestream_blas.so --out bench/results/blas-startup.json
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

from blas_shim_numpy import machine  # the same machine record as the numpy benchmark

GOAL_SECONDS, GOAL_BYTES = 5e-3, 10e6


def start_once(program, preload):
    """(seconds from spawn to exit, the program's peak resident bytes or None). The peak is measured by
    GNU time on a second start through env(1): a child spawned by Python itself would report Python's
    peak (its address space before exec counts); env's is under 1 MiB, the same floor for every setting."""
    env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}
    if preload:
        env['LD_PRELOAD'] = preload
    t0 = time.perf_counter()
    pid = os.posix_spawn(program, [program], env)
    _, status, _ = os.wait4(pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit('%s with LD_PRELOAD=%r failed: %d' % (program, preload, status))
    if not os.path.exists('/usr/bin/time'):
        return seconds, None
    plain = {k: v for k, v in env.items() if k != 'LD_PRELOAD'}
    p = subprocess.run(['/usr/bin/time', '-f', '%M', '/usr/bin/env', 'LD_PRELOAD=' + (preload or ''), program],
                       env=plain, capture_output=True, text=True, check=True)
    return seconds, int(p.stderr.strip().splitlines()[-1]) * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--shim', required=True, help='path of libtilestream_blas.so')
    ap.add_argument('--system-blas', default='/usr/lib/x86_64-linux-gnu/libblas.so.3')
    ap.add_argument('--program', default='/bin/true')
    ap.add_argument('--rounds', type=int, default=101)
    ap.add_argument('--git-hash', default='')
    ap.add_argument('--out', default='')
    args = ap.parse_args()
    configs = {'nothing': '', 'system_blas': args.system_blas, 'drop_in': os.path.abspath(args.shim),
               'drop_in_and_system_blas': os.path.abspath(args.shim) + ':' + args.system_blas}
    samples = {name: [] for name in configs}
    for name, preload in configs.items():  # warm the page cache
        start_once(args.program, preload)
    for r in range(args.rounds):
        order = list(configs.items())
        if r % 2:
            order.reverse()
        for name, preload in order:
            samples[name].append(start_once(args.program, preload))
    results = {name: {'ld_preload': configs[name],
                      'median_seconds': statistics.median(s for s, _ in samples[name]),
                      'min_seconds': min(s for s, _ in samples[name]),
                      'median_max_rss_bytes': statistics.median(m or 0 for _, m in samples[name])}
               for name in configs}
    anchor, ours = results['system_blas'], results['drop_in_and_system_blas']
    added_seconds = ours['median_seconds'] - anchor['median_seconds']
    added_bytes = ours['median_max_rss_bytes'] - anchor['median_max_rss_bytes']
    git = args.git_hash or subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], capture_output=True,
                                          text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    report = {'benchmark': 'process start with the BLAS drop-in preloaded', 'git': git,
              'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'machine': machine(), 'program': args.program, 'rounds': args.rounds,
              'environment': {k: v for k, v in os.environ.items()
                              if k.startswith(('OPENBLAS', 'OMP_', 'TILESTREAM_', 'GOTO'))},
              'results': results,
              'goals': {'added_seconds_over_system_blas': added_seconds, 'goal_seconds': GOAL_SECONDS,
                        'added_rss_bytes_over_system_blas': added_bytes, 'goal_bytes': GOAL_BYTES,
                        'met': added_seconds < GOAL_SECONDS and added_bytes < GOAL_BYTES}}
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')
    print(text)
    for name, r in results.items():
        print('%-26s %8.3f ms  %8.1f MiB' % (name, r['median_seconds'] * 1e3, r['median_max_rss_bytes'] / 2**20),
              file=sys.stderr)
    print('drop-in over the system BLAS: %+.3f ms (goal < 5), %+.2f MB (goal < 10)'
          % (added_seconds * 1e3, added_bytes / 1e6), file=sys.stderr)
    return 0 if report['goals']['met'] else 1


if __name__ == '__main__':
    sys.exit(main())
