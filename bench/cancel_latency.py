#!/usr/bin/env python3
"""Issue 27: Ctrl-C ends any run within 0.5 s, as users meet it.

  CLI     the default command line (`tilestream gemm --m N --n N --k N --dtype f64 --out C.npy`, no
          tuning flag) started, SIGINT sent at random moments of its run (input generation, rate
          measurement, the product, the write): the time from the signal to the process's exit, its
          exit status (killed by SIGINT, or 130), and that no C.npy or temporary is left;
  Python  `tilestream.matmul(a, b)` (defaults) called in a loop in a child interpreter, SIGINT sent at
          random moments: the time from the signal to `except KeyboardInterrupt` running (both
          clocks are CLOCK_MONOTONIC, shared by the processes);
  split   with --split-bench: build/bench/split_bench's JSON (the cost of the ~0.2 s steps against
          one unsplit call, goal >= 0.98x; the progress callbacks' gaps; the API's cancel latency).

Goal: every latency under 0.5 s (and the split >= 0.98x). Writes one JSON object (git hash,
machine, CPU model, ISA flags, kernel environment, load average, date) to --out or stdout; exits 1
when a goal is not met.

  bench/cancel_latency.py --cli build/apps/tilestream --pythonpath build/python \\
      --split-bench build/bench/split_bench --n 4096 --samples 8 --out bench/results/cancel.json
"""
import argparse
import datetime
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_shim_numpy import machine  # noqa: E402  (the same machine record)

GOAL_SECONDS = 0.5

CHILD = r'''
import sys, time
import numpy as np
import tilestream
n = int(sys.argv[1])
rng = np.random.default_rng(5)
a, b = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n))
tilestream.matmul(a, b)  # the context's opening and its rate measurement
t = time.monotonic()
tilestream.matmul(a, b)
print('call', time.monotonic() - t, flush=True)
while True:
    sys.stdin.readline()  # the parent's go
    print('ready', flush=True)
    try:
        while True:
            tilestream.matmul(a, b)
    except KeyboardInterrupt:
        print('interrupted', time.monotonic(), flush=True)
'''


def summary(latencies):
    return {'median_seconds': statistics.median(latencies) if latencies else None,
            'max_seconds': max(latencies) if latencies else None, 'seconds': latencies}


def cli_samples(cli, n, samples, rng):
    args = [cli, 'gemm', '--m', str(n), '--n', str(n), '--k', str(n), '--dtype', 'f64']
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, 'c.npy')
        t0 = time.monotonic()
        p = subprocess.run(args + ['--out', out], capture_output=True, text=True)
        whole = time.monotonic() - t0
        if p.returncode != 0 or not os.path.exists(out):
            sys.exit('the CLI run failed (%d): %s' % (p.returncode, p.stderr[-2000:]))
        os.remove(out)
        rows = []
        for _ in range(samples):
            delay = rng.uniform(0.05, 0.95 * whole)
            with open(os.path.join(work, 'err.txt'), 'w') as err:
                child = subprocess.Popen(args + ['--out', out], stdout=subprocess.DEVNULL, stderr=err)
            time.sleep(delay)
            sent = time.monotonic()
            child.send_signal(signal.SIGINT)
            code = child.wait()
            latency = time.monotonic() - sent
            left = sorted(f for f in os.listdir(work) if f != 'err.txt')
            finished = code == 0
            for f in left:
                os.remove(os.path.join(work, f))
            rows.append({'signal_after_seconds': delay, 'exit_after_signal_seconds': latency, 'returncode': code,
                         'finished_before_the_signal': finished, 'left_behind': [] if finished else left,
                         'ok': finished or (code in (-signal.SIGINT, 130) and not left)})
        return whole, rows


def python_samples(python, pythonpath, n, samples, rng):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    child = subprocess.Popen([python, '-c', CHILD, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        line = child.stdout.readline().split()
        if not line or line[0] != 'call':
            sys.exit('the Python child did not start (%r)' % line)
        call = float(line[1])
        rows = []
        for _ in range(samples):
            child.stdin.write('go\n')
            child.stdin.flush()
            if child.stdout.readline().strip() != 'ready':
                sys.exit('the Python child stopped')
            delay = rng.uniform(0.05, 0.95 * call)
            time.sleep(delay)
            sent = time.monotonic()
            child.send_signal(signal.SIGINT)
            line = child.stdout.readline().split()
            if not line or line[0] != 'interrupted':
                sys.exit('no KeyboardInterrupt in the Python child (%r)' % line)
            rows.append({'signal_after_seconds': delay, 'keyboard_interrupt_after_signal_seconds': float(line[1]) - sent})
        return call, rows
    finally:
        child.kill()  # our own child, by its handle
        child.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--cli', help='build/apps/tilestream')
    ap.add_argument('--python', default='/usr/bin/python3')
    ap.add_argument('--pythonpath', help='where the tilestream package is (build/python); none: no Python part')
    ap.add_argument('--split-bench', help='build/bench/split_bench; none: no split part')
    ap.add_argument('--n', type=int, default=4096, help='square f64 size (a run of a few seconds)')
    ap.add_argument('--samples', type=int, default=8)
    ap.add_argument('--seed', type=int, default=27)
    ap.add_argument('--git-hash', default='')
    ap.add_argument('--out', default='')
    args = ap.parse_args()
    rng = random.Random(args.seed)
    report = {'benchmark': 'Ctrl-C latency (CLI, Python) and the cost of ~0.2 s steps', 'machine': machine(),
              'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              'git': args.git_hash or subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], capture_output=True,
                                                     text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip(),
              'n': args.n, 'dtype': 'f64', 'goal_seconds': GOAL_SECONDS}
    met = True
    if args.cli:
        whole, rows = cli_samples(args.cli, args.n, args.samples, rng)
        lat = [r['exit_after_signal_seconds'] for r in rows if not r['finished_before_the_signal']]
        ok = all(r['ok'] for r in rows) and all(x < GOAL_SECONDS for x in lat)
        met = met and ok
        report['cli'] = dict(command='tilestream gemm --m {0} --n {0} --k {0} --dtype f64 --out C.npy'.format(args.n),
                             run_seconds=whole, samples=rows, met=ok, **summary(lat))
        print('CLI: run %.2f s; SIGINT -> exit: median %s s, max %s s over %d; %s' %
              (whole, report['cli']['median_seconds'], report['cli']['max_seconds'], len(lat), 'met' if ok else 'NOT met'),
              file=sys.stderr)
    if args.pythonpath:
        call, rows = python_samples(args.python, args.pythonpath, args.n, args.samples, rng)
        lat = [r['keyboard_interrupt_after_signal_seconds'] for r in rows]
        ok = all(x < GOAL_SECONDS for x in lat)
        met = met and ok
        report['python'] = dict(call='tilestream.matmul(a, b) (defaults), f64 %d^2' % args.n, call_seconds=call,
                                samples=rows, met=ok, **summary(lat))
        print('Python: call %.2f s; SIGINT -> KeyboardInterrupt: median %.3f s, max %.3f s; %s' %
              (call, report['python']['median_seconds'], report['python']['max_seconds'], 'met' if ok else 'NOT met'),
              file=sys.stderr)
    if args.split_bench:
        with tempfile.TemporaryDirectory() as work:
            out = os.path.join(work, 'split.json')
            p = subprocess.run([args.split_bench, '--n', str(args.n), '--dtype', 'f64', '--git-hash', report['git'],
                                '--out', out], capture_output=True, text=True)
            sys.stderr.write(p.stdout)
            if p.returncode not in (0, 1):
                sys.exit('split_bench failed (%d): %s' % (p.returncode, p.stderr))
            with open(out) as f:
                report['split'] = json.load(f)
        met = met and report['split']['met']
    report['load_average_after'] = os.getloadavg()
    report['goals_met'] = met
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')
    else:
        print(text)
    return 0 if met else 1


if __name__ == '__main__':
    sys.exit(main())
