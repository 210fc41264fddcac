"""`tilestream gemm --m 256 --n 256 --k 256 --check` under address-space limits (ulimit -v): it runs
under 600000 KiB, and under lower limits ends with a message and an exit status below 128, never a
hang (OpenBLAS retries forever when it cannot map its 128 MiB per-thread buffer, so tilestream checks
first). Known gap, not tested: below about 160000 KiB on a 2-core machine OpenBLAS's own worker thread,
started when the library loads, cannot map its buffer and spins, and exit waits for it.

usage: address_space_limit.py CLI
"""
import resource
import subprocess
import sys

ARGS = ['gemm', '--m', '256', '--n', '256', '--k', '256', '--check']


def run(cli, kib):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (kib * 1024, kib * 1024))
    try:
        return subprocess.run([cli] + ARGS, preexec_fn=limit, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        print('FAILED: hangs under ulimit -v %d' % kib, file=sys.stderr)
        sys.exit(1)


def main():
    cli = sys.argv[1]
    p = run(cli, 600000)
    if p.returncode != 0:
        print('FAILED: under ulimit -v 600000: exit %d\n%s' % (p.returncode, p.stderr), file=sys.stderr)
        sys.exit(1)
    for kib in (450000, 350000, 300000, 250000, 200000):
        p = run(cli, kib)
        if p.returncode == 0:
            continue  # fits after all
        if not (0 < p.returncode < 128) or 'error' not in p.stderr:
            print('FAILED: under ulimit -v %d: exit %d without a message:\n%s' % (kib, p.returncode, p.stderr),
                  file=sys.stderr)
            sys.exit(1)
        print('ulimit -v %d: exit %d: %s' % (kib, p.returncode, p.stderr.strip().splitlines()[-1]))
    print('runs under ulimit -v 600000; lower limits end with a message, no hang')


if __name__ == '__main__':
    main()
