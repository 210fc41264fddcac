#!/usr/bin/env python3
"""numpy `a @ b` (or a numpy.linalg call that reaches the drop-in's LAPACK routines: `--op solve`
dgesv_, `cholesky` dpotrf_, `det` dgetrf_) with and without libtilestream_blas.so preloaded (square
n x n, one dtype).

Three configurations, each in its own process, alternated over --rounds rounds (plain, default,
routed; then the reverse order) so that load drifts cancel; per size the median over the rounds of
each process's median call:

  plain    numpy's own BLAS, nothing preloaded (the anchor);
  default  the drop-in preloaded with nothing else set: what a user gets (the goal's row, issue 27:
           numpy under the drop-in >= 0.95x numpy without it at every size of the sweep);
  routed   the drop-in with TILESTREAM_BLAS_THRESHOLD=1: every call runs on tilestream (a labelled
           diagnostic of the routed path's cost, not a goal).

No timed process has TILESTREAM_BLAS_LOG set (the log costs a write per call). Each timed child
reads /proc/self/maps to show the drop-in really is loaded (and whether libtilestream, OpenCL or
CUDA libraries were mapped); which calls went where comes from a separate, untimed pass of each
drop-in configuration with the log on (one call per size). Per size: a warm-up, then the median of
up to --repeat timed calls into a preallocated `out` (fewer for calls over ~0.1 s; operands rotated
between two pairs when they fit in cache).

Prints one JSON object (git hash, machine: CPU model, ISA flags, OPENBLAS_CORETYPE and the thread
environment, load average before and after, date; per size the seconds of each configuration and
the ratios) and writes it to --out too; exits 1 when the goal is not met (matmul only).

    bench/blas_shim_numpy.py --shim build/src/blas/libtilestream_blas.so --sizes 1,2,4,16,64,512 --rounds 5
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
import statistics
import subprocess
import sys
import tempfile

GOAL = 0.95  # numpy under the drop-in (defaults) >= 0.95x numpy alone, speed

# The LAPACK routine each numpy.linalg call reaches, and its flop count (n x n; solve: one right-hand side).
LINALG = {'solve': ('gesv_', lambda n: 2 * n ** 3 / 3 + 2 * n * n),
          'cholesky': ('potrf_', lambda n: n ** 3 / 3),
          'det': ('getrf_', lambda n: 2 * n ** 3 / 3)}

THREAD_ENV = ('OPENBLAS_CORETYPE', 'OPENBLAS_NUM_THREADS', 'OPENBLAS_L2_SIZE', 'OMP_NUM_THREADS',
              'GOTO_NUM_THREADS', 'TILESTREAM_CPU_ISA')


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
        t0 = time.perf_counter()
        call(*ops[0])  # warm-up (and, routed, the context's first opening)
        first = time.perf_counter() - t0
        call(*ops[-1])
        t0 = time.perf_counter()
        call(*ops[0])
        once = time.perf_counter() - t0
        reps = max(3, min(repeat, int(0.5 / max(once, 1e-9)))) if once > 0.02 else repeat
        times = []
        for r in range(reps):
            a, b = ops[r % pairs]
            t0 = time.perf_counter()
            call(a, b)
            times.append(time.perf_counter() - t0)
        out.append({'n': n, 'seconds': statistics.median(times), 'min_seconds': min(times), 'reps': reps,
                    'first_call_seconds': first})
    return out


def mapped_libraries():
    """What this process has mapped that matters here: the drop-in, libtilestream, GPU/OpenCL runtimes."""
    with open('/proc/self/maps') as f:
        files = {l.split()[5] for l in f if len(l.split()) > 5 and l.split()[5].startswith('/')}
    names = [os.path.basename(p) for p in files]
    has = lambda pat: sorted(n for n in names if re.search(pat, n))
    return {'drop_in': has(r'^libtilestream_blas\.so'), 'bridge': has(r'^libtilestream_blas_context\.so'),
            'libtilestream': has(r'^libtilestream(_opencl|_cuda)?\.so'),
            'blas': has(r'^lib(open)?blas'), 'gpu_or_opencl': has(r'^lib(OpenCL|pocl|cuda|cublas|clblast|LLVM)'),
            'threads': len(os.listdir('/proc/self/task'))}


def child(args):
    rows = measure([int(s) for s in args.sizes.split(',')], args.dtype, args.repeat, args.op)
    print(json.dumps({'rows': rows, 'mapped': mapped_libraries()}))


CONFIGS = {'plain': None, 'default': {}, 'routed': {'TILESTREAM_BLAS_THRESHOLD': '1'}}


def run_config(args, name, repeat=None, log=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith('TILESTREAM_') and k != 'LD_PRELOAD'}
    if CONFIGS[name] is not None:
        env['LD_PRELOAD'] = os.path.abspath(args.shim)
        env.update(CONFIGS[name])
        if args.devices:
            env['TILESTREAM_DEVICES'] = args.devices
        if log:
            env['TILESTREAM_BLAS_LOG'] = log
    cmd = [sys.executable, os.path.abspath(__file__), '--child', '--sizes', args.sizes, '--dtype', args.dtype,
           '--repeat', str(repeat or args.repeat), '--op', args.op]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit('the %s configuration failed (%d): %s' % (name, p.returncode, p.stderr.strip()[-2000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def routes(args, name):
    """The untimed, logged pass: per size, where numpy's calls went (tilestream or the system BLAS)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, 'blas.log')
        run_config(args, name, repeat=1, log=log)
        with open(log) as f:
            lines = [l for l in f if l.startswith('routine=')]
    if args.op != 'matmul':  # numpy.linalg may call other BLAS routines too: only its LAPACK call counts
        lines = [l for l in lines if l.split()[0].endswith(LINALG[args.op][0])]
    per_n = {}
    for l in lines:
        dims = dict(re.findall(r'\b([mn])=(\d+)', l))
        ran = re.search(r'ran=(\S+)', l).group(1)
        d = per_n.setdefault(int(dims.get('n', dims.get('m', 0))), {})
        d[ran] = d.get(ran, 0) + 1
        m = re.search(r' devices=(\S+)', l)
        if m:
            d.setdefault('devices', m.group(1))
        m = re.search(r'reason=(\S+)', l)
        if m:
            d.setdefault('reason', m.group(1))
    return per_n


def cpu_record():
    model, flags = platform.processor(), set()
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name') and model in ('', platform.processor()):
                    model = line.split(':', 1)[1].strip()
                if line.startswith('flags') and not flags:
                    flags = set(line.split(':', 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ('sse4_2', 'avx', 'avx2', 'fma', 'avx512f', 'avx512bw', 'avx512vl', 'avx512_bf16', 'amx_tile')
           if f in flags]
    return model, ' '.join(isa)


def machine():
    model, isa = cpu_record()
    return {'cpu': model, 'cpu_isa_flags': isa, 'cores': os.cpu_count(), 'host': platform.node(),
            'load_average': os.getloadavg(),
            'environment': {k: os.environ.get(k, '(unset)') for k in THREAD_ENV}}


def write_report(report, out, met):
    """Ends a benchmark's JSON object (load average after, goals_met) and writes it to `out`, or stdout."""
    report['load_average_after'] = os.getloadavg()
    report['goals_met'] = met
    text = json.dumps(report, indent=1)
    if out:
        with open(out, 'w') as f:
            f.write(text + '\n')
    else:
        print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--shim', help='path of libtilestream_blas.so')
    ap.add_argument('--sizes', default='1,2,4,8,16,32,64,128,256,512,1024,2048,4096')
    ap.add_argument('--dtype', default='float64', choices=['float32', 'float64'])
    ap.add_argument('--repeat', type=int, default=21, help='timed calls per size and process (fewer for long calls)')
    ap.add_argument('--rounds', type=int, default=5, help='processes per configuration, alternated')
    ap.add_argument('--configs', default='plain,default,routed',
                    help='which configurations (plain is the anchor; default is the goal row)')
    ap.add_argument('--devices', default='', help='TILESTREAM_DEVICES for the drop-in runs (default: unset)')
    ap.add_argument('--op', default='matmul', choices=['matmul'] + sorted(LINALG),
                    help='a @ b (cblas_?gemm), or numpy.linalg solve (?gesv_), cholesky (?potrf_), det (?getrf_)')
    ap.add_argument('--git-hash', default='')
    ap.add_argument('--out', default='', help='also write the JSON here')
    ap.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if not args.shim or not os.path.exists(args.shim):
        ap.error('--shim PATH (libtilestream_blas.so) is required')
    configs = [c.strip() for c in args.configs.split(',') if c.strip()]
    if 'plain' not in configs or any(c not in CONFIGS for c in configs):
        ap.error('--configs: a list of plain, default, routed that includes plain')
    before = machine()
    samples = {c: [] for c in configs}
    mapped = {}
    for r in range(args.rounds):
        for name in (configs if r % 2 == 0 else configs[::-1]):
            res = run_config(args, name)
            samples[name].append(res['rows'])
            mapped.setdefault(name, res['mapped'])
    for name in configs:
        expect = mapped[name]['drop_in'] != [] if name != 'plain' else mapped[name]['drop_in'] == []
        if not expect:
            sys.exit('the %s configuration did not have the drop-in %s: %s' %
                     (name, 'loaded' if name != 'plain' else 'absent', mapped[name]))
    where = {name: routes(args, name) for name in configs if name != 'plain'}
    if 'routed' in where:
        off = [n for n, d in where['routed'].items() if set(d) - {'tilestream', 'devices'}]
        if off or not where['routed']:
            sys.exit('the routed configuration did not run every call on tilestream (sizes %s): %s' % (off, where['routed']))
    git = args.git_hash
    if not git:
        try:
            git = subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], capture_output=True, text=True,
                                 cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            git = ''
    sizes = [row['n'] for row in samples['plain'][0]]
    rows = []
    goal_applies = args.op == 'matmul' and 'default' in configs
    for i, n in enumerate(sizes):
        flops = 2.0 * n ** 3 if args.op == 'matmul' else LINALG[args.op][1](n)
        row = {'n': n}
        for name in configs:
            s = statistics.median(rounds[i]['seconds'] for rounds in samples[name])
            row[name + '_seconds'] = s
            row[name + '_gflops'] = flops / s / 1e9 if s > 0 else None
            row[name + '_round_medians'] = [rounds[i]['seconds'] for rounds in samples[name]]
            # The process's first call of this size (the drop-in's first routed call opens the context).
            row[name + '_first_call_seconds'] = statistics.median(rounds[i]['first_call_seconds']
                                                                  for rounds in samples[name])
        for name in configs:
            if name != 'plain':
                # speed of the configuration relative to plain numpy (>= 0.95: the goal for 'default')
                row['speed_%s_vs_plain' % name] = row['plain_seconds'] / row[name + '_seconds']
                row[name + '_route'] = where[name].get(n, {})
        if 'routed' in configs:
            row['routed_extra_us'] = (row['routed_seconds'] - row['plain_seconds']) * 1e6
        if goal_applies:
            row['goal'] = GOAL
            row['met'] = row['speed_default_vs_plain'] >= GOAL
        rows.append(row)
    what = 'a @ b' if args.op == 'matmul' else 'numpy.linalg.%s (%s)' % (args.op, LINALG[args.op][0])
    report = {
        'benchmark': 'numpy %s with and without libtilestream_blas.so' % what, 'git': git,
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'machine': before, 'load_average_after': os.getloadavg(),
        'numpy_python': sys.executable, 'dtype': args.dtype, 'op': args.op,
        'rounds': args.rounds, 'repeat': args.repeat,
        'conditions': 'one process per configuration and round, rounds alternate (plain, default, routed; then '
                      'reversed); per size the median over rounds of each process\'s median call; no log in '
                      'the timed processes',
        'configurations': {
            'plain': 'numpy alone (anchor)',
            'default': 'LD_PRELOAD=libtilestream_blas.so, no TILESTREAM_* setting: what a user gets (goal row)',
            'routed': 'LD_PRELOAD=libtilestream_blas.so TILESTREAM_BLAS_THRESHOLD=1: every call on tilestream '
                      '(diagnostic, no goal)'},
        'devices_env': args.devices or '(unset)',
        'mapped_in_timed_processes': mapped,
        'goal': ('numpy under the drop-in (default settings) >= %.2fx numpy alone at every size' % GOAL)
                if goal_applies else None,
        'goal_met': all(r['met'] for r in rows) if goal_applies else None,
        'results': rows}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')
    for r in rows:
        line = 'n=%5d plain %10.3g s' % (r['n'], r['plain_seconds'])
        for name in configs:
            if name != 'plain':
                line += '  %s %10.3g s (%.2fx)' % (name, r[name + '_seconds'], r['speed_%s_vs_plain' % name])
        print(line, file=sys.stderr)
    if goal_applies:
        print('goal (default >= %.2fx plain at every size): %s' % (GOAL, 'met' if report['goal_met'] else 'NOT met'),
              file=sys.stderr)
        return 0 if report['goal_met'] else 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
