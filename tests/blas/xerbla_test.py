"""Which xerbla_ argument errors reach must not change when the drop-in is preloaded: the program's
own (xerbla_own.c: dgemm_ and cblas_dgemm with m = -1, the drop-in's own argument errors), and a
plugin's loaded with RTLD_LOCAL as numpy's lapack_lite is (xerbla_host.c with xerbla_plugin.c: LAPACK's
dgetrf_ and BLAS's dgemm_). Each program is run without the drop-in first, which proves the test.

usage: xerbla_test.py OWN HOST PLUGIN SHIM WORK_DIR
"""
import os
import sys

from blas_log import check, run


def main():
    own, host, plugin, shim, work = sys.argv[1:6]
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, 'xerbla.log')
    for preload in (None, shim):
        where = 'with the drop-in' if preload else 'without the drop-in'
        p = run([own], {}, preload, log)
        check(p.returncode == 0, "the program's own xerbla_ %s:\n%s" % (where, p.stdout))
        p = run([host, plugin], {}, preload, log)
        check(p.returncode == 0, "an RTLD_LOCAL plugin's xerbla_ %s:\n%s" % (where, p.stdout))
    print("xerbla_: the program's own and an RTLD_LOCAL plugin's see their errors, with and without the drop-in")


if __name__ == '__main__':
    main()
