"""Runs tests/blas/complex_client.c (linked with -lblas) with libtilestream_blas.so preloaded and checks
its results (the client compares each C with the system BLAS) and the drop-in's log: every complex
call (cgemm_, zgemm_, cblas_cgemm, cblas_zgemm and the 3m variants) logged once, in order, with its
shape and op characters ('C' stays 'C'), and run where the setting says.

  zero-threshold  every call on tilestream (TILESTREAM_BLAS_THRESHOLD=0), the quick returns
                  included; the CPU vendor kernel's own cblas_[cz]gemm calls go straight to OpenBLAS
  netlib          netlib's BLAS as the system BLAS, the default threshold (every call forwarded to it):
                  it has no ?gemm3m, so the drop-in forwards the 3m calls to its ?gemm (and the
                  client compares with that)
  threshold       the default threshold: the client's small calls all stay with the system BLAS
  fallback        every plan fails (1 KiB budget): the system BLAS computes each call instead

usage: run_complex_client.py SETTING CLIENT SHIM SYSTEM_BLAS WORK_DIR [NETLIB_BLAS]
"""
import os
import sys

from blas_log import check, parse, run
from run_gemm_client import client_calls, quick_return


def main():
    setting, client, shim, system_blas, work = sys.argv[1:6]
    netlib = sys.argv[6] if len(sys.argv) > 6 else ''
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, 'complex-' + setting + '.log')
    env, reference, strict = {}, system_blas, []
    if setting == 'zero-threshold':
        env, strict = {'TILESTREAM_BLAS_THRESHOLD': '0'}, ['strict']
    elif setting == 'netlib':
        if not netlib or not os.path.exists(netlib):
            print('skipped: no netlib BLAS (Debian package libblas3)')
            return
        env, reference = {'TILESTREAM_BLAS_LIB': netlib}, netlib
    elif setting == 'threshold':
        pass
    elif setting == 'fallback':
        env = {'TILESTREAM_MEMORY_BUDGET': '1KiB', 'TILESTREAM_BLAS_THRESHOLD': '1'}
    else:
        check(False, 'unknown setting ' + setting)
    p = run([client, reference] + strict, env, shim, log)
    check(p.returncode == 0, 'the client failed (exit %d) with the drop-in preloaded' % p.returncode)
    # nothing to say (a system BLAS without ?gemm3m included: netlib's ?gemm answers for them)
    check(setting == 'fallback' or 'tilestream BLAS:' not in p.stderr, 'the drop-in said: ' + p.stderr)
    calls = client_calls(p.stdout)
    routines = {c['routine'] for c in calls}
    check(('all %d calls match' % len(calls)) in p.stdout and len(calls) >= 14,
          'the client made %d calls: %s' % (len(calls), p.stdout[-300:]))
    check({'cgemm_', 'zgemm_', 'cblas_cgemm', 'cblas_zgemm'} <= routines, 'routines called: %s' % sorted(routines))
    check(setting not in ('zero-threshold', 'netlib') or
          {'cgemm3m_', 'zgemm3m_', 'cblas_cgemm3m', 'cblas_zgemm3m'} <= routines,
          'the 3m routines were not called through the drop-in: %s' % sorted(routines))
    check(any(c['transa'] == 'C' for c in calls) and any(c['transb'] == 'C' for c in calls), 'no C op among the calls')
    settings, logged = parse(log)
    check(settings is not None, 'no settings line in the log')
    check(len(logged) == len(calls), '%d calls, %d log lines (each call must be logged exactly once)'
          % (len(calls), len(logged)))
    if setting == 'netlib':
        check(os.path.realpath(settings['system_blas']) == os.path.realpath(netlib), str(settings))
    for call, line in zip(calls, logged):
        for key in call:
            check(key == 'alpha' or line[key] == call[key], 'log line %s does not describe call %s' % (line, call))
        size = int(call['m']) * int(call['n']) * int(call['k'])
        if setting == 'zero-threshold':
            check(line['ran'] == 'tilestream', 'not on tilestream: %s' % line)
            if not quick_return(call) and all(d.startswith('cpu') for d in line['devices'].split(',')):
                check(int(line['internal_calls']) >= 1, 'no forwarded tilestream BLAS call in ' + str(line))
        elif setting in ('threshold', 'netlib') or size == 0:
            check(line['ran'] == 'system-blas' and line['reason'] == 'below-threshold', str(line))
        else:
            check(line['ran'] == 'system-blas' and line['reason'] == 'tilestream-error' and 'budget' in line['error'],
                  str(line))
    print('complex %s: %d calls (%s), %d on tilestream, results as the system BLAS, log as expected'
          % (setting, len(calls), ', '.join(sorted(routines)), sum(l['ran'] == 'tilestream' for l in logged)))


if __name__ == '__main__':
    main()
