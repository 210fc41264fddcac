"""numpy's own test_xerbla_override under the drop-in: numpy's lapack_lite defines xerbla_ and is
loaded privately (RTLD_LOCAL); the test skips when LAPACK's errors reach another xerbla_, which is
what a drop-in bringing a BLAS into the global scope did. It must pass, not skip.

usage: numpy_xerbla.py SHIM WORK_DIR
"""
import os
import subprocess
import sys

from blas_log import check, run


def main():
    shim, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    probe = subprocess.run([sys.executable, '-c', 'import numpy, pytest, hypothesis'], capture_output=True)
    if probe.returncode != 0:
        print('skipped: %s lacks numpy, pytest or hypothesis (numpy\'s tests need python3-hypothesis)'
              % sys.executable)
        return
    p = run([sys.executable, '-m', 'pytest', '--pyargs', 'numpy.linalg', '-k', 'xerbla', '-rs', '-q',
             '-p', 'no:cacheprovider'], {}, shim, os.path.join(work, 'numpy-xerbla.log'), timeout=300)
    tail = p.stdout.strip().splitlines()[-1:] or ['']
    check(p.returncode == 0 and 'passed' in tail[0] and 'skipped' not in p.stdout,
          'numpy test_xerbla_override under the drop-in: %s\n%s' % (tail[0], p.stdout[-2000:]))
    print('numpy test_xerbla_override under the drop-in:', tail[0])


if __name__ == '__main__':
    main()
