"""Runs tests/blas/gemm_client.c (linked with -lblas) with libtilestream_blas.so preloaded, in one of
several settings, and checks its results (the client compares each C with the system BLAS) and the
drop-in's log: every call logged once, in order, where the settings say it must run.

usage: run_gemm_client.py SETTING CLIENT SHIM SYSTEM_BLAS WORK_DIR [NETLIB_BLAS]
"""
import os
import sys

from blas_log import check, parse, run


def client_calls(stdout):
    calls = []
    for line in stdout.splitlines():
        if line.startswith('call '):
            _, routine, order, ta, tb, m, n, k, alpha = line.split()
            calls.append(dict(routine=routine, order=order, transa=ta, transb=tb, m=m, n=n, k=k, alpha=alpha))
    return calls


def quick_return(call):
    """A call the BLAS answers without a multiply: an empty C, k == 0 or alpha == 0."""
    return int(call['m']) * int(call['n']) * int(call['k']) == 0 or float(call['alpha']) == 0


def config_special(client, shim, system_blas, work, log):
    """Each is refused with a message naming it, and the client runs with the defaults: no hang on
    the FIFO (nobody writes it), no endless read of /dev/zero, no 1 GiB read into memory."""
    fifo, huge = os.path.join(work, 'settings.fifo'), os.path.join(work, 'settings-huge.conf')
    for path in (fifo, huge):
        if os.path.lexists(path):
            os.remove(path)
    os.mkfifo(fifo)
    with open(huge, 'wb') as f:
        f.truncate(1 << 30)  # sparse
    for path, said in ((fifo, 'is a FIFO'), ('/dev/zero', 'is a device'), (huge, 'larger than 64 KiB')):
        p = run([client, system_blas, '1'], {'TILESTREAM_BLAS_CONFIG': path}, shim, log, timeout=60)
        check(p.returncode == 0, 'the client failed with TILESTREAM_BLAS_CONFIG=' + path)
        check(said in p.stderr and '(ignored)' in p.stderr,
              'TILESTREAM_BLAS_CONFIG=%s: stderr does not say %r: %s' % (path, said, p.stderr))
    os.remove(huge)
    print('config-special: a FIFO, /dev/zero and a 1 GiB file as the settings file refused, defaults kept')


def main():
    setting, client, shim, system_blas, work = sys.argv[1:6]
    netlib = sys.argv[6] if len(sys.argv) > 6 else ''
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, setting + '.log')
    env = {}
    if setting == 'threshold':  # defaults: the built-in threshold decides, devices "all"
        pass
    elif setting == 'pool-threads':  # two CPU devices: OpenBLAS called from tilestream's pool threads
        env = {'TILESTREAM_DEVICES': 'cpu:2', 'TILESTREAM_BLAS_THRESHOLD': '1'}
    elif setting == 'config-file':  # file values, environment over file, a netlib system BLAS
        config = os.path.join(work, 'tilestream-blas.conf')
        with open(config, 'w') as f:
            f.write('# tilestream BLAS settings\n'
                    'TILESTREAM_BLAS_THRESHOLD = 47^3\n'
                    '  TILESTREAM_DEVICES=cpu  \n'
                    'TILESTREAM_MEMORY_BUDGET = lots\n'
                    'TILESTREAM_BOGUS = 1\n'
                    'just words\n')
        env = {'TILESTREAM_BLAS_CONFIG': config, 'TILESTREAM_DEVICES': 'cpu:2'}
        if netlib and os.path.exists(netlib):
            env['TILESTREAM_BLAS_LIB'] = netlib  # its cblas_dgemm calls dgemm_ through the PLT
    elif setting == 'fallback':  # every plan fails (1 KiB budget): the system BLAS computes instead
        env = {'TILESTREAM_MEMORY_BUDGET': '1KiB', 'TILESTREAM_BLAS_THRESHOLD': '1'}
    elif setting == 'threads':  # three client threads at once, from the context's lazy opening on
        env = {'TILESTREAM_BLAS_THRESHOLD': '1'}
    elif setting == 'zero-threshold':  # every call on tilestream, the quick returns included
        env = {'TILESTREAM_BLAS_THRESHOLD': '0'}
    elif setting == 'config-special':  # a FIFO, a device and a huge file as the settings file
        return config_special(client, shim, system_blas, work, log)
    elif setting == 'bad-devices':  # the context cannot open: every call stays with the system BLAS,
        # which is the build's own since the one asked for does not exist
        env = {'TILESTREAM_DEVICES': 'cuda:7', 'TILESTREAM_BLAS_THRESHOLD': '1',
               'TILESTREAM_BLAS_LIB': os.path.join(work, 'no-such-libblas.so')}
    else:
        check(False, 'unknown setting ' + setting)

    threads = 3 if setting == 'threads' else 1
    p = run([client, system_blas, str(threads)] + (['strict'] if setting == 'zero-threshold' else []), env, shim, log)
    check(p.returncode == 0, 'the client failed (exit %d) with the drop-in preloaded' % p.returncode)
    calls = client_calls(p.stdout)
    settings, logged = parse(log)
    check(settings is not None, 'no settings line in the log')
    cases = len(calls) // threads
    check(('all %d calls match' % len(calls)) in p.stdout and cases >= 20,
          'the client made %d calls: %s' % (len(calls), p.stdout[-300:]))
    if setting == 'threads':  # the calls of the threads interleave: compare them as sets
        def key(c):
            return tuple(c[k] for k in ('routine', 'order', 'transa', 'transb', 'm', 'n', 'k'))
        check(sorted(map(key, calls)) == sorted(map(key, logged)),
              '%d calls, %d log lines, or they differ' % (len(calls), len(logged)))
        for call, line in zip(sorted(calls, key=key), sorted(logged, key=key)):
            size = int(call['m']) * int(call['n']) * int(call['k'])
            check(line['ran'] == ('tilestream' if size >= 1 else 'system-blas'), 'ran where? %s' % line)
        print('threads: 3 x %d calls at once, all but the empty ones on tilestream, results as the system BLAS'
              % cases)
        return
    check(len(logged) == len(calls), '%d calls, %d log lines (each call must be logged exactly once)'
          % (len(calls), len(logged)))
    threshold = int(settings['threshold'])
    for call, line in zip(calls, logged):
        for key in call:
            check(key == 'alpha' or line[key] == call[key], 'log line %s does not describe call %s' % (line, call))
        size = int(call['m']) * int(call['n']) * int(call['k'])
        where = line['ran']
        if setting in ('threshold', 'pool-threads', 'config-file', 'zero-threshold'):
            want = 'tilestream' if size >= threshold else 'system-blas'
            check(where == want, '%s ran on %s, expected %s (threshold %d)' % (call, where, want, threshold))
            if where == 'tilestream' and quick_return(call):
                pass  # C = beta C or nothing: no multiply, on any device
            elif where == 'tilestream':
                if all(d.startswith('cpu') for d in line['devices'].split(',')) and line.get('kernel') == 'vendor':
                    # tilestream's own OpenBLAS calls came back through the drop-in and went straight on
                    # (on a machine with a GPU, `all` may run a call without any; the measured choice
                    # may be the tiled kernel, which calls no BLAS). A single row or column of C runs
                    # as OpenBLAS's ?gemv, which the drop-in does not take: that call goes straight there.
                    single_line = int(call['m']) == 1 or int(call['n']) == 1
                    check(single_line or int(line['internal_calls']) >= 1,
                          'no forwarded tilestream BLAS call in ' + str(line))
            else:
                check(line['reason'] == 'below-threshold', str(line))
        elif size == 0:  # below the threshold of 1
            check(where == 'system-blas' and line['reason'] == 'below-threshold', str(line))
        elif setting == 'fallback':
            check(where == 'system-blas' and line['reason'] == 'tilestream-error' and 'budget' in line['error'],
                  str(line))
        else:
            check(where == 'system-blas' and line['reason'] == 'no-context', str(line))

    if setting == 'threshold':
        check(threshold == 512 ** 3, 'default threshold %d (src/blas/settings.hpp says 512^3)' % threshold)
        check(any(l['ran'] == 'tilestream' for l in logged), 'no call reached tilestream')
    if setting == 'zero-threshold':
        check(all(l['ran'] == 'tilestream' for l in logged), 'not every call ran on tilestream')
        check(sum(map(quick_return, calls)) >= 7, 'the client made fewer quick-return calls than it has')
    if setting == 'pool-threads':
        check(all(l['devices'] == 'cpu:0,cpu:1' for l in logged if l['ran'] == 'tilestream'), 'not on two devices')
        # The large calls are cut into several units, whose OpenBLAS calls come from the devices'
        # threads (a small one may be a single unit on one device).
        large = [l for l in logged if int(l['m']) * int(l['n']) * int(l['k']) >= 512 ** 3]
        check(len(large) == 2 and all(int(l['internal_calls']) >= 2 for l in large if l['kernel'] == 'vendor'),
              'the large calls made fewer than 2 OpenBLAS calls each: %s' % large)
    if setting == 'config-file':
        check(threshold == 47 ** 3, 'threshold %d, the file says 47^3' % threshold)
        check(settings['memory_budget'] == 'device', 'a bad budget must be ignored: ' + str(settings))
        for said in ("unknown key 'TILESTREAM_BOGUS'", "TILESTREAM_MEMORY_BUDGET: ", 'lots',
                     "tilestream-blas.conf:6: expected 'key = value', got 'just words'"):
            check(said in p.stderr, 'stderr does not say %r: %s' % (said, p.stderr))
        check(all(l['devices'] == 'cpu:0,cpu:1' for l in logged if l['ran'] == 'tilestream'),
              'the environment (cpu:2) must win over the file (cpu)')
        if 'TILESTREAM_BLAS_LIB' in env:
            check(os.path.realpath(settings['system_blas']) == os.path.realpath(netlib),
                  'system BLAS %s, expected %s' % (settings['system_blas'], netlib))
    if setting == 'fallback':
        printed = [l for l in p.stderr.splitlines() if 'failed on tilestream' in l]
        check(1 <= len(printed) <= 5, '%d error lines on stderr (1 to 5 expected)' % len(printed))
        check('further errors are only logged' in p.stderr, 'no word that later errors are only logged')
    if setting == 'bad-devices':
        check(p.stderr.count("cannot open TILESTREAM_DEVICES 'cuda:7'") == 1, 'one line on stderr: ' + p.stderr)
        check("cannot open the system BLAS '%s'" % env['TILESTREAM_BLAS_LIB'] in p.stderr, p.stderr)
        check(os.path.realpath(settings['system_blas']) == os.path.realpath(system_blas), str(settings))
    print('%s: %d calls, %d on tilestream, log and results as expected'
          % (setting, len(calls), sum(l['ran'] == 'tilestream' for l in logged)))


if __name__ == '__main__':
    main()
