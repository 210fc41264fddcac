"""`tilestream gemm --m 256 --n 256 --k 256 --check` under address-space limits (ulimit -v): it runs
under 600000 KiB, and under lower limits ends with a message and an exit status below 128, never a
hang (OpenBLAS retries forever when it cannot map its 128 MiB per-thread buffer, so tilestream checks
first, and under a limit the tool starts OpenBLAS without the worker threads it would start at load:
apps/openblas_workers.cpp). The lowest limits fail in the dynamic loader (exit 127, its message).
Run four at once to get the races of a loaded machine: a worker's buffer once lost to the tool's
own mappings under 200000 KiB and hung.

usage: address_space_limit.py CLI
"""
import resource
import subprocess
import sys

ARGS = ['gemm', '--devices', 'cpu', '--m', '256', '--n', '256', '--k', '256', '--check']


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
    if len(sys.argv) == 2:  # four sweeps at once
        runs = [subprocess.Popen([sys.executable, __file__, cli, 'one']) for _ in range(4)]
        sys.exit(max(r.wait() for r in runs))
    p = run(cli, 600000)
    if p.returncode != 0:
        print('FAILED: under ulimit -v 600000: exit %d\n%s' % (p.returncode, p.stderr), file=sys.stderr)
        sys.exit(1)
    for kib in (450000, 350000, 300000, 250000, 200000, 160000, 130000, 100000, 80000, 60000, 40000):
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
