"""exit() while another thread is inside a dgemm_ the drop-in routes to tilestream (exit_client.c),
at delays that land before, during and after the context opens and the call runs: every run must end
with status 0 (no crash, no hang).

usage: exit_test.py CLIENT SHIM WORK_DIR
"""
import os
import subprocess
import sys

from blas_log import check, run


def main():
    client, shim, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    env = {'TILESTREAM_BLAS_THRESHOLD': '1', 'TILESTREAM_DEVICES': 'cpu'}
    for delay_ms in (0, 2, 10, 30, 60, 100, 200, 400):
        try:
            p = run([client, str(delay_ms * 1000)], env, shim, os.path.join(work, 'exit.log'), timeout=60)
        except subprocess.TimeoutExpired:
            check(False, 'exit() %d ms after the call started: the process still runs after 60 s' % delay_ms)
        check(p.returncode == 0, 'exit() %d ms after the call started: status %d (a negative status is a '
              'signal)' % (delay_ms, p.returncode))
    print('exit() at 8 moments of a routed dgemm_: every run ended with status 0')


if __name__ == '__main__':
    main()
