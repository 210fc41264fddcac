#!/usr/bin/env python3
"""numpy under the drop-in calls `a @ b` on tilestream's engine (a 1 MiB budget: out of core, worker
threads), forks, and the child calls it again: the child must open its own context (the parent's
worker threads did not come along) and get the same C. The drop-in keeps the process id rather than
asking the kernel on every call; this checks that a child after fork() is still told apart (without
that, the child would hand its call to the parent's queue and wait forever: the alarm ends it).

    fork_client.py PYTHON SHIM WORKDIR
"""
import os
import subprocess
import sys

CHILD = r'''
import os, signal, sys
import numpy as np
rng = np.random.default_rng(7)
for dtype in (np.float32, np.float64):
    a = rng.uniform(-1, 1, (301, 203)).astype(dtype)
    b = rng.uniform(-1, 1, (203, 157)).astype(dtype)
    ref = a.astype(np.float64) @ b.astype(np.float64)  # dgemm: routed as well, checked below
    c = a @ b
    tol = 1e-4 if dtype == np.float32 else 1e-12
    if not np.allclose(c, ref, rtol=tol, atol=tol):
        sys.exit('parent: wrong C')
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)
        c2 = np.full_like(c, np.nan)
        np.matmul(a, b, out=c2)
        os._exit(0 if np.allclose(c2, ref, rtol=tol, atol=tol) else 3)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit('child after fork (%s): exit %d (-14: hung on the parent\'s context)' % (np.dtype(dtype), code))
print('ok')
'''


def main():
    python, shim, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, 'fork.log')
    if os.path.exists(log):
        os.remove(log)
    env = {k: v for k, v in os.environ.items() if not k.startswith('TILESTREAM_')}
    env.update({'LD_PRELOAD': shim, 'TILESTREAM_BLAS_THRESHOLD': '1', 'TILESTREAM_DEVICES': 'cpu',
                'TILESTREAM_MEMORY_BUDGET': '1MiB', 'TILESTREAM_BLAS_LOG': log})
    p = subprocess.run([python, '-c', CHILD], env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or 'ok' not in p.stdout:
        sys.exit('FAIL: %s %s' % (p.stdout, p.stderr))
    with open(log) as f:
        calls = [l for l in f if l.startswith('routine=')]
    # Per dtype: the reference and the parent's call (both dgemm for f64), then the child's.
    engine = [l for l in calls if 'ran=tilestream' in l and 'strategy=direct' not in l]
    children = [l for l in calls if 'm=301 n=157' in l]
    if len(children) != 6 or len(engine) < 6:
        sys.exit('FAIL: expected every 301x157 product (parents and children) on the engine:\n' + ''.join(calls))
    print('fork: the child after fork() opened its own context and computed C on the engine')


if __name__ == '__main__':
    main()
