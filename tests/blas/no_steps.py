#!/usr/bin/env python3
"""A long call under the drop-in on one CPU device runs in one step, not in steps of ~0.2 s (what
the library's contexts cut long in-place work into): BLAS has no cancel and no progress, so steps
would only cost speed. numpy's `a @ b` on 3072^3 float64 (about 1 s on 2 cores) must be logged with
steps=1 (the direct path, or one engine unit where the measured kernels put the engine ahead) and
give the right C.

    no_steps.py PYTHON SHIM WORKDIR
"""
import os
import sys

import blas_log

CALL = r'''
import sys, time
import numpy as np
rng = np.random.default_rng(11)
n = 3072
a = rng.uniform(-1, 1, (n, n))
b = rng.uniform(-1, 1, (n, n))
t0 = time.perf_counter()
c = a @ b
seconds = time.perf_counter() - t0
rows = rng.choice(n, 8, replace=False)
ref = np.array([[np.dot(a[i], b[:, j]) for j in range(0, n, 97)] for i in rows])
if not np.allclose(c[np.ix_(rows, range(0, n, 97))], ref, rtol=1e-12, atol=1e-10):
    sys.exit('wrong C')
print('seconds %.3f' % seconds)
'''


def main():
    python, shim, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, 'no_steps.log')
    p = blas_log.run([python, '-c', CALL], {'TILESTREAM_BLAS_THRESHOLD': '0', 'TILESTREAM_DEVICES': 'cpu'}, shim, log,
                     timeout=300)
    blas_log.check(p.returncode == 0, 'the numpy call under the drop-in: exit %d' % p.returncode)
    seconds = float(p.stdout.split()[-1])
    _, calls = blas_log.parse(log)
    calls = [c for c in calls if 'dgemm' in c['routine'] and (c['m'], c['n'], c['k']) == ('3072',) * 3]
    blas_log.check(len(calls) == 1, 'expected one logged 3072^3 dgemm: %s' % calls)
    if seconds < 0.25:
        # A step is ~0.2 s: on a machine this fast the call fits one step either way.
        print('skipped: the 3072^3 call took %.3f s, under one step' % seconds)
        return
    # One step: the direct path (vendor on both sides), or one engine unit when the kernels
    # measured put the engine ahead (tiled on the device's threads on a busy machine).
    blas_log.check(calls[0].get('steps') == '1', 'a %.2f s call under the drop-in ran in steps: %s' % (seconds, calls[0]))
    print('no steps: the %.2f s call ran as one step (strategy=%s kernel=%s)' % (seconds, calls[0]['strategy'],
                                                                                calls[0]['kernel']))


if __name__ == '__main__':
    main()
