#!/usr/bin/env python3
"""Where routing the Level 3 routines other than GEMM through the BLAS drop-in starts to pay.

Runs build/bench/blas3_shim_threshold (a C client of the system CBLAS: cblas_dtrsm, dtrmm, dsymm,
dsyrk, dsyr2k, ztrsm, zhemm, zherk, zher2k on n x n operands) in three configurations, alternating
the processes round by round so that drift on a shared machine falls on all three:

  system   the system BLAS alone (no preload)
  default  libtilestream_blas.so preloaded with its default thresholds
  routed   preloaded with TILESTREAM_BLAS_THRESHOLD=1 (every call through tilestream)

Each preloaded run writes the drop-in's log, from which each row records where its calls ran. Per
routine and size: the median over rounds of each process's median call time, the ratios
routed / system and default / system, and per routine the smallest n from which routing costs at
most --tolerance more than the system BLAS at that and every larger size measured ("pays from").
Prints one JSON object (git hash, machine, date, rows, summary).

    bench/blas3_shim_threshold.py --build build --rounds 5 --out bench/results/blas3-shim-threshold.json
    bench/blas3_shim_threshold.py --routines dtrsm,dsyrk --sizes 64,128,256,512 --rounds 3

Run it on a quiet machine for figures of record: the ratios near 1 are the point.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROUTINES = 'dtrsm,dtrmm,dsymm,dsyrk,dsyr2k,ztrsm,zhemm,zherk,zher2k'
SIZES = '64,128,192,256,384,512,768,1024,1536,2048'


def cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or 'unknown'


def run(args, config, log):
    env = {k: v for k, v in os.environ.items() if not k.startswith('TILESTREAM_') and k != 'LD_PRELOAD'}
    if config != 'system':
        env['LD_PRELOAD'] = os.path.abspath(args.shim)
        env['TILESTREAM_BLAS_LOG'] = log
        if config == 'routed':
            env['TILESTREAM_BLAS_THRESHOLD'] = '1'
        if args.devices:
            env['TILESTREAM_DEVICES'] = args.devices
    out = subprocess.run([args.client, args.routines, args.sizes, str(args.seconds)], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f'blas3_shim_threshold ({config}) failed with status {out.returncode}: {out.stderr.strip()}')
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{')]


def where_ran(log):
    """(cblas routine name, n) -> set of 'tilestream' / 'system' from the drop-in's log."""
    ran = {}
    try:
        with open(log) as f:
            for line in f:
                fields = dict(p.split('=', 1) for p in line.split() if '=' in p)
                if 'routine' not in fields or 'ran' not in fields:
                    continue
                name = fields['routine'].replace('cblas_', '')
                ran.setdefault((name, int(fields.get('n', 0))), set()).add(
                    'tilestream' if fields['ran'] == 'tilestream' else 'system')
    except OSError:
        pass
    return ran


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--build', default=os.path.join(root, 'build'))
    p.add_argument('--shim', help='libtilestream_blas.so (default: BUILD/src/blas/libtilestream_blas.so)')
    p.add_argument('--client', help='the C client (default: BUILD/bench/blas3_shim_threshold)')
    p.add_argument('--routines', default=ROUTINES)
    p.add_argument('--sizes', default=SIZES)
    p.add_argument('--rounds', type=int, default=5, help='processes per configuration, alternated')
    p.add_argument('--seconds', type=float, default=0.2, help='time per routine and size in one process')
    p.add_argument('--tolerance', type=float, default=0.05, help='routing pays when routed / system <= 1 + this')
    p.add_argument('--devices', default='', help='TILESTREAM_DEVICES for the preloaded runs (default: the drop-in\'s)')
    p.add_argument('--git-hash', default='')
    p.add_argument('--out', default='', help='also write the JSON here')
    args = p.parse_args()
    args.shim = args.shim or os.path.join(args.build, 'src', 'blas', 'libtilestream_blas.so')
    args.client = args.client or os.path.join(args.build, 'bench', 'blas3_shim_threshold')
    for what, path in (('--shim', args.shim), ('--client', args.client)):
        if not os.path.isfile(path):
            sys.exit(f'{what}: {path} does not exist (build the targets tilestream_blas and blas3_shim_threshold)')
    if args.rounds < 1 or args.seconds <= 0:
        sys.exit('--rounds must be at least 1 and --seconds positive')
    if not args.git_hash:
        try:
            args.git_hash = subprocess.run(['git', '-C', root, 'rev-parse', '--short=12', 'HEAD'],
                                           capture_output=True, text=True).stdout.strip() or 'unknown'
        except OSError:
            args.git_hash = 'unknown'

    configs = ['system', 'default', 'routed']
    times = {}  # (config, routine, n) -> [median of each process]
    mins = {}
    ran = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = configs[r % 3:] + configs[:r % 3]
            for config in order:
                log = os.path.join(tmp, f'{config}.log')
                for row in run(args, config, log):
                    key = (config, row['routine'], row['n'])
                    times.setdefault(key, []).append(row['seconds'])
                    mins[key] = min(mins.get(key, row['min_seconds']), row['min_seconds'])
        for config in ('default', 'routed'):
            ran[config] = where_ran(os.path.join(tmp, f'{config}.log'))
    load_after = os.getloadavg()

    rows = []
    for routine in args.routines.split(','):
        for n in [int(s) for s in args.sizes.split(',')]:
            med = {c: statistics.median(times[(c, routine, n)]) for c in configs}
            rows.append({'routine': routine, 'n': n, 'size': n ** 3,
                         'seconds': med, 'min_seconds': {c: mins[(c, routine, n)] for c in configs},
                         'routed_over_system': med['routed'] / med['system'],
                         'default_over_system': med['default'] / med['system'],
                         'default_ran': sorted(ran['default'].get((routine, n), set())),
                         'routed_ran': sorted(ran['routed'].get((routine, n), set()))})
    summary = {}
    for routine in args.routines.split(','):
        mine = [r for r in rows if r['routine'] == routine]
        pays = None
        for r in reversed(mine):
            if r['routed_over_system'] <= 1 + args.tolerance:
                pays = r['n']
            else:
                break
        routed_default = [r['n'] for r in mine if r['default_ran'] == ['tilestream']]
        summary[routine] = {'routing_pays_from_n': pays,
                            'default_routes_from_n': min(routed_default) if routed_default else None}
    result = {'benchmark': 'blas3_shim_threshold', 'git_hash': args.git_hash,
              'machine': f'{platform.node()} ({cpu_model()}, {os.cpu_count()} cores)',
              'cpu_model': cpu_model(), 'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'),
              'load_average_before': load_before, 'load_average_after': load_after,
              'devices': args.devices or '(drop-in default)', 'rounds': args.rounds,
              'seconds_per_size': args.seconds, 'tolerance': args.tolerance,
              'kernel_environment': {k: os.environ.get(k, '(unset)')
                                     for k in ('OPENBLAS_CORETYPE', 'OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS')},
              'rows': rows, 'summary': summary}
    text = json.dumps(result, indent=1)
    if args.out:
        tmp_out = args.out + f'.tmp.{os.getpid()}'
        with open(tmp_out, 'w') as f:
            f.write(text + '\n')
        os.replace(tmp_out, args.out)
    print(text)
    for r in rows:
        print(f"{r['routine']:8s} n={r['n']:5d}  system {r['seconds']['system']*1e3:9.3f} ms  "
              f"routed {r['seconds']['routed']*1e3:9.3f} ms ({r['routed_over_system']:.3f})  "
              f"default {r['seconds']['default']*1e3:9.3f} ms ({r['default_over_system']:.3f}, "
              f"{'/'.join(r['default_ran']) or '?'})", file=sys.stderr)
    for routine, s in summary.items():
        print(f'{routine}: routing pays from n = {s["routing_pays_from_n"]}, default routes from n = '
              f'{s["default_routes_from_n"]}', file=sys.stderr)


if __name__ == '__main__':
    main()
