"""Runs tests/blas/lapack_client.c (linked with -llapack) twice: without the drop-in, where the system
LAPACK computes every result (stored), then with libtilestream_blas.so preloaded, where each result is
compared with the stored one. Checks the drop-in's log: every call of the client (each ?potrf_ ?potrs_
?posv_ ?getrf_ ?getrs_ ?gesv_ in s, d, c, z, the illegal ones included) logged in order with its
shape, run where the setting says, LAPACK's info passed through, and the argument number the
drop-in's own checks found equal to the one the program's xerbla_ saw.

  zero-threshold  every call on tilestream (TILESTREAM_BLAS_THRESHOLD=0), the quick returns
                  included, and nothing else logged (no call reached the system LAPACK but the
                  illegal ones, which go to it for xerbla_)
  threshold       the default threshold, by flops (potrf n^3/3, getrf 2/3 n^3, solves 2 n^2 nrhs):
                  only dpotrf_ with n = 777 runs on tilestream, the rest on the system LAPACK (whose own
                  calls of the drop-in's routines, such as ?posv_'s ?potrf_, are logged too)
  fallback        every plan fails (64-byte budget, threshold 1; LU narrows its block columns to one, which
                  fits 1 KiB): the system LAPACK computes each call
                  from A, B and ipiv as they were (getrs permutes B before its first solve fails)
  tiles           as zero-threshold on three CPU devices with 32 KiB each (TILESTREAM_DEVICES=cpu:3,
                  TILESTREAM_MEMORY_BUDGET): the n = 777 dpotrf_ runs out of core as tile tasks (the
                  small calls take the context's direct path)
  opencl          as zero-threshold on the first OpenCL device (PoCL in CI): every call's tile
                  operations on it (Cholesky and LU panels on the host reference through staging)
  netlib          netlib's LAPACK and BLAS (TILESTREAM_LAPACK_LIB, TILESTREAM_BLAS_LIB), the default
                  threshold: small calls go to netlib's LAPACK

usage: run_lapack_client.py SETTING CLIENT SHIM WORK_DIR [NETLIB_LAPACK NETLIB_BLAS]
"""
import os
import sys

from blas_log import check, parse, run

DEFAULT_THRESHOLD = 512 ** 3


def flops(call):
    """The drop-in's size of a call (blas_front.cpp's call_size)."""
    kind = call['routine'][1:-1]
    m, n, nrhs = float(call['m']), float(call['n']), float(call['nrhs'])
    k = min(m, n)
    potrf, getrf, solve = n ** 3 / 3, 2 * (m * n * k - (m + n) * k * k / 2 + k ** 3 / 3), 2 * n * n * nrhs
    return {'potrf': potrf, 'getrf': getrf, 'potrs': solve, 'getrs': solve, 'posv': potrf + solve,
            'gesv': getrf + solve}[kind]


def client_calls(stdout):
    """The client's calls in order: dicts of the log's fields, 'illegal' set for the illegal ones."""
    calls = []
    for line in stdout.splitlines():
        w = line.split()
        if w[:1] == ['call']:
            calls.append({'routine': w[1], 'uplo': w[2], 'trans': w[3], 'm': w[4], 'n': w[5], 'nrhs': w[6],
                          'info': w[7]})
        elif w[:1] == ['illegal']:
            check(w[-1] == 'ok', 'xerbla_ did not see what LAPACK reports: ' + line)
            calls.append({'routine': w[1], 'illegal': w[2]})
    return calls


def same_call(call, line):
    if line.get('routine') != call['routine']:
        return False
    if 'illegal' in call:
        return line.get('illegal') == call['illegal']
    return 'illegal' not in line and all(line.get(k) == call[k] for k in ('uplo', 'trans', 'm', 'n', 'nrhs'))


def main():
    setting, client, shim, work = sys.argv[1:5]
    netlib_lapack = sys.argv[5] if len(sys.argv) > 5 else ''
    netlib_blas = sys.argv[6] if len(sys.argv) > 6 else ''
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, 'lapack-' + setting + '.log')
    stored = os.path.join(work, 'lapack-' + setting + '.results')
    env = {}
    if setting == 'zero-threshold':
        env = {'TILESTREAM_BLAS_THRESHOLD': '0'}
    elif setting == 'threshold':
        pass
    elif setting == 'opencl':
        env = {'TILESTREAM_BLAS_THRESHOLD': '0', 'TILESTREAM_DEVICES': 'opencl:0'}
    elif setting == 'tiles':
        env = {'TILESTREAM_BLAS_THRESHOLD': '0', 'TILESTREAM_DEVICES': 'cpu:3', 'TILESTREAM_MEMORY_BUDGET': '32KiB'}
    elif setting == 'fallback':
        env = {'TILESTREAM_MEMORY_BUDGET': '64', 'TILESTREAM_BLAS_THRESHOLD': '1'}
    elif setting == 'netlib':
        if not (netlib_lapack and os.path.exists(netlib_lapack) and netlib_blas and os.path.exists(netlib_blas)):
            print('skipped: no netlib LAPACK and BLAS (Debian packages liblapack3, libblas3)')
            return
        env = {'TILESTREAM_LAPACK_LIB': netlib_lapack, 'TILESTREAM_BLAS_LIB': netlib_blas}
    else:
        check(False, 'unknown setting ' + setting)

    p = run([client, 'write', stored], {}, None, log)
    check(p.returncode == 0, 'the client failed (exit %d) on the system LAPACK alone' % p.returncode)
    p = run([client, 'compare', stored], env, shim, log, timeout=300)
    check(p.returncode == 0, 'the client failed (exit %d) with the drop-in preloaded' % p.returncode)
    check(setting == 'fallback' or 'tilestream BLAS:' not in p.stderr, 'the drop-in said: ' + p.stderr)
    calls = client_calls(p.stdout)
    routines = {c['routine'] for c in calls}
    check(len(routines) == 24 and 'all %d calls match' % sum('illegal' not in c for c in calls) in p.stdout,
          'the client made calls of %d routines: %s' % (len(routines), p.stdout[-500:]))
    settings, logged = parse(log)
    check(settings is not None, 'no settings line in the log')
    if setting == 'netlib':
        check(settings['system_lapack'] == netlib_lapack, str(settings))
    # Each client call is one line, in order; the system LAPACK's own calls of exported routines (a
    # ?posv_ calls ?potrf_) may come between them where it computes.
    at = 0
    routed = 0
    for line in logged:
        if at < len(calls) and same_call(calls[at], line):
            call = calls[at]
            at += 1
            if 'illegal' in call:
                check(line['ran'] == 'system-lapack' and line['reason'] == 'invalid-arguments', str(line))
                continue
            size = flops(call)
            if setting in ('zero-threshold', 'tiles', 'opencl') or (setting in ('threshold', 'netlib') and size >= DEFAULT_THRESHOLD):
                check(line['ran'] == 'tilestream', 'not on tilestream: %s' % line)
                check(line['info'] == call['info'], 'the log says info %s, the client got %s: %s'
                      % (line['info'], call['info'], line))
                routed += 1
                if setting == 'opencl':
                    check(line['devices'] == 'opencl:0', 'not on the OpenCL device: %s' % line)
                if setting == 'tiles' and call['n'] == '777':
                    check(len(line['devices'].split(',')) == 3 and int(line['internal_calls']) > 100,
                          'the n = 777 dpotrf_ did not run as tile tasks on three devices: %s' % line)
            elif setting == 'fallback' and size >= 1:
                check(line['ran'] == 'system-lapack' and line['reason'] == 'tilestream-error' and
                      'budget' in line['error'], str(line))
            else:
                check(line['ran'] == 'system-lapack' and line['reason'] == 'below-threshold', str(line))
        else:
            check(setting not in ('zero-threshold', 'tiles', 'opencl'), 'a line no client call explains: %s' % line)
    check(at == len(calls), 'call %d of %d (%s) is not in the log' % (at, len(calls), calls[at] if at < len(calls) else ''))
    if setting in ('threshold', 'netlib'):
        check(routed == 1, '%d calls on tilestream, expected only the n = 777 dpotrf_' % routed)
    print('lapack %s: %d calls of %d routines, %d on tilestream; %s; log as expected'
          % (setting, len(calls), len(routines), routed,
             [l for l in p.stdout.splitlines() if 'equal bitwise' in l][0]))


if __name__ == '__main__':
    main()
