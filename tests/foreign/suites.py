#!/usr/bin/python3
"""Other projects' own test suites, run unchanged with the BLAS drop-in (libtilestream_blas.so)
preloaded, every call of an exported routine routed to tilestream (TILESTREAM_BLAS_THRESHOLD=0) and
checked from the drop-in's log (TILESTREAM_BLAS_LOG): a suite whose calls bypass the drop-in fails.

  netlib  netlib's Level 3 BLAS testers from Debian's libblas-test, Fortran (xblat3[sdcz]) and CBLAS
          (x[sdcz]cblat3): no FAIL anywhere; for every routine the drop-in exports, PASSED for its
          error exits and computational tests, and exactly as many calls routed to tilestream as the
          tester reports making (its error-exit calls reach the system BLAS, as they must: they go
          to the xerbla_ the program has).
  lapack  LAPACK's linear-equation testers from Debian's liblapack-test (xlintst[sdcz]) on their own
          input files restricted to the GE and PO paths (?getrf ?getrs ?gesv, ?potrf ?potrs ?posv, the
          routines the drop-in exports, and the other routines of those paths on the system LAPACK):
          every summary passed, no failure, and for each of the six routines calls on tilestream and
          error-exit calls through the drop-in (reported to the tester's XERBLA by the system LAPACK).
  numpy   numpy's own test suite (pytest --pyargs numpy: numpy.test()'s selection, less numpy.f2py),
  scipy   SciPy's scipy.linalg tests (not marked slow),
  octave  GNU Octave's own tests of its linear algebra (octave_files() lists them).
          numpy and SciPy run with the drop-in on every core (pytest-xdist, where installed), then
          every test that did not pass runs again without it: the same outcome for each (a test
          that fails, errs, skips or x-fails with the drop-in must do so without it); Octave runs
          without and with the drop-in at the same time, the same counts for every test file. And
          for each suite every call of the drop-in's routines on tilestream, its LAPACK
          routines included (numpy's solve/inv/cholesky/det, SciPy's lu_factor/lu_solve/cho_factor/
          cho_solve/solve, Octave's chol/lu/mldivide): those each suite calls must each be there.

A test whose outcome differs is run again, alone, both ways: a difference that stays is a failure; one
that goes away in both reruns is reported as unstable (the suites have tests on random data).

usage: suites.py SHIM WORK_DIR [--quick] [SUITE ...]   (SUITE: netlib lapack numpy scipy octave; all by default)
  --quick: the short versions ctest runs (netlib and lapack: double precision, real and complex (d and z);
  numpy: its matmul, dot and linalg tests)
Exit status: 0 all passed, 1 a suite failed, 2 a suite could not run (missing package, bad usage).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = '/usr/bin/python3'  # Debian's, with Debian's numpy and SciPy (python3 on PATH may be another)
NETLIB = '/usr/lib/x86_64-linux-gnu/blas'
OCTAVE_TESTS = '/usr/share/octave/%s/etc/tests'
OCTAVE_M = '/usr/share/octave/%s/m'


class SuiteFailed(Exception):
    pass


class CannotRun(Exception):
    pass


def say(*words):
    print(*words, flush=True)


def run_measured(command, timeout, **popen_args):
    """subprocess.run, plus the CPU seconds (user + system) of the child and of the descendants it
    waited for: on a loaded machine, the closer figure to what it costs on an idle one."""
    p = subprocess.Popen(command, **popen_args)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_utime + usage.ru_stime


def exported_routines(shim):
    """The symbols the drop-in exports (its routines)."""
    out = subprocess.run(['nm', '-D', '--defined-only', shim], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[1:2] == ['T']}


def environment(shim=None, log=None, extra=None):
    """The caller's environment without tilestream's settings; with `shim`, the drop-in preloaded,
    every call routed (threshold 0) and logged to `log`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('TILESTREAM_') and k != 'LD_PRELOAD'}
    if shim:
        env.update(LD_PRELOAD=shim, TILESTREAM_BLAS_THRESHOLD='0', TILESTREAM_BLAS_LOG=log)
        if os.path.exists(log):
            os.remove(log)
    env.update(extra or {})
    return env


FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')
LAPACK_ROUTINES = ('potrf_', 'potrs_', 'posv_', 'getrf_', 'getrs_', 'gesv_')  # the drop-in's, less the precision


def read_log(path):
    """Counts of (routine, where it ran: 'tilestream' or the system BLAS's reason) and the number of
    processes (settings lines); fails on a line that is not understood or an error line."""
    calls, processes = Counter(), 0
    if not os.path.exists(path):  # opened on the first call of an exported routine
        return calls, processes
    with open(path) as f:
        for line in f:
            fields = dict(FIELD.findall(line))
            if line.startswith('settings '):
                processes += 1
                if fields.get('threshold') != '0':
                    raise SuiteFailed('a process ran with threshold %s: %s' % (fields.get('threshold'), line))
            elif line.startswith('routine='):
                where = 'tilestream' if fields.get('ran') == 'tilestream' else fields.get('reason', '?')
                calls[(fields['routine'], where)] += 1
            else:
                raise SuiteFailed('the drop-in logged: ' + line.strip())
    return calls, processes


def check_routed(calls, what):
    """Every call on tilestream, but those whose arguments break a BLAS rule; at least one call."""
    elsewhere = {k: n for k, n in calls.items() if k[1] not in ('tilestream', 'invalid-arguments')}
    if elsewhere:
        raise SuiteFailed('%s: calls not routed to tilestream: %s' % (what, elsewhere))
    routed = sum(n for (r, w), n in calls.items() if w == 'tilestream')
    if routed == 0:
        raise SuiteFailed('%s: no call reached tilestream (the suite bypassed the drop-in)' % what)
    return routed


def lapack_seconds(path):
    """Calls of the drop-in's LAPACK routines in a log, and the seconds the client spent in them."""
    calls, seconds = 0, 0.0
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                fields = dict(FIELD.findall(line))
                if fields.get('routine', '')[1:] in LAPACK_ROUTINES:
                    calls += 1
                    seconds += float(fields.get('seconds', 0))
    return calls, seconds


def check_lapack(calls, what, required, lapack_time):
    """Each of `required` (LAPACK symbols the suite calls) ran on tilestream at least once; says how
    many LAPACK calls ran there and the seconds the client spent in them."""
    missing = [s for s in required if calls[(s, 'tilestream')] == 0]
    if missing:
        raise SuiteFailed('%s: no call of %s ran on tilestream' % (what, ', '.join(missing)))
    say('    LAPACK on tilestream: %d calls (%d of them checked present: %s), %.1f s in them' % (
        lapack_time[0], len(required), ' '.join(required), lapack_time[1]))


def summary(calls):
    by = Counter()
    for (routine, where), n in calls.items():
        by[routine + ('' if where == 'tilestream' else ' (%s)' % where)] += n
    return ', '.join('%s %d' % kv for kv in sorted(by.items()))


# ---------------------------------------------------------------------------------------------- netlib

COMPUTATIONAL = re.compile(r'^\s*(\w+)\s+PASSED THE (?:(?:COLUMN|ROW)-MAJOR\s+)?COMPUTATIONAL TESTS \(\s*(\d+) CALLS\)')
ERROR_EXITS = re.compile(r'^\s*(\w+)\s+PASSED THE TESTS OF ERROR-EXITS')
TESTED = re.compile(r'^\s*(\w+)\s+(?:PASSED|FAILED|COMPLETED)')


def netlib_tester(shim, work, exports, precision, api):
    """One tester; returns (routine symbol, calls routed) for the routines the drop-in exports."""
    if api == 'fortran':
        program, given = '%s/xblat3%s' % (NETLIB, precision), '%s/%sblat3.in' % (NETLIB, precision)
        symbol = lambda name: name.lower() + '_'  # DGEMM -> dgemm_
        extra = {}
    else:
        # The reference CBLAS's error exits need its RowMajorStrg and cblas_xerbla: the CBLAS testers
        # run on the netlib BLAS (its libblas.so.3 has CBLAS), so the drop-in's system BLAS is that one.
        program, given = '%s/x%scblat3' % (NETLIB, precision), '%s/%sin3' % (NETLIB, precision)
        symbol = lambda name: name
        extra = {'LD_LIBRARY_PATH': NETLIB, 'TILESTREAM_BLAS_LIB': NETLIB + '/libblas.so.3'}
    name = os.path.basename(program)
    if not os.access(program, os.X_OK) or not os.path.exists(given):
        raise CannotRun('%s is missing (Debian package libblas-test)' % program)
    here = os.path.join(work, name)
    shutil.rmtree(here, ignore_errors=True)
    os.makedirs(here)
    log, out = os.path.join(here, 'blas.log'), os.path.join(here, 'output.txt')
    with open(given) as stdin, open(out, 'w') as stdout:
        status, cpu = run_measured([program], 900, stdin=stdin, stdout=stdout, stderr=subprocess.STDOUT, cwd=here,
                                   env=environment(shim, log, extra))
    text = open(out).read()
    if api == 'fortran':  # the summary goes to the file named on the input's first line
        summary_file = os.path.join(here, open(given).readline().split("'")[1])
        text = (open(summary_file).read() if os.path.exists(summary_file) else '') + text
    failures = [l.strip() for l in text.splitlines() if 'FAIL' in l or '******' in l]
    if status != 0 or 'END OF TESTS' not in text or failures:
        raise SuiteFailed('%s: exit %d, %s\n%s' % (name, status, failures or 'no END OF TESTS', text[-3000:]))
    passed_calls, error_exits = Counter(), set()
    tested = set()
    for line in text.splitlines():
        if m := COMPUTATIONAL.match(line):
            passed_calls[m.group(1)] += int(m.group(2))
        if m := ERROR_EXITS.match(line):
            error_exits.add(m.group(1))
        if m := TESTED.match(line):
            tested.add(m.group(1))
    calls, _ = read_log(log)
    routed = []
    for routine in sorted(tested):
        s = symbol(routine)
        if s not in exports:
            continue
        if routine not in error_exits or routine not in passed_calls:
            raise SuiteFailed('%s: %s did not pass both its error exits and its computational tests' % (name, routine))
        n = calls[(s, 'tilestream')]
        if n != passed_calls[routine]:
            raise SuiteFailed('%s: %s made %d computational calls, the drop-in routed %d to tilestream'
                              % (name, routine, passed_calls[routine], n))
        if calls[(s, 'invalid-arguments')] == 0:
            raise SuiteFailed('%s: none of the error-exit calls of %s passed through the drop-in' % (name, routine))
        routed.append((s, n, calls[(s, 'invalid-arguments')]))
    if routed:
        check_routed(calls, name)
    others = {r for (r, _) in calls} - {s for s, _, _ in routed}
    if others:
        raise SuiteFailed('%s: the log has calls of %s, which the tester does not report' % (name, sorted(others)))
    return routed, cpu


def netlib(shim, work, quick):
    exports = exported_routines(shim)
    total = 0
    for precision in 'dz' if quick else 'sdcz':
        for api in ('fortran', 'cblas'):
            start = time.monotonic()
            routed, cpu = netlib_tester(shim, work, exports, precision, api)
            total += len(routed)
            say('  %-9s %5.1f s (%4.1f s CPU)  %s' % ('xblat3' + precision if api == 'fortran' else 'x%scblat3' % precision,
                                       time.monotonic() - start, cpu,
                                       '; '.join('%s: %d calls on tilestream, %d error exits' % r for r in routed)
                                       or 'no routine the drop-in exports'))
    if total == 0:
        raise SuiteFailed('the testers cover no routine the drop-in exports')


# ---------------------------------------------------------------------------------------------- lapack

LAPACK_TESTING = '/usr/lib/x86_64-linux-gnu/lapack'
LAPACK_SUMMARY = re.compile(r'^\s*All tests for (\w\w\w) (routines|drivers)\s+passed the threshold \(\s*(\d+) tests run\)')
LAPACK_ERROR_EXITS = re.compile(r'^\s*(\w\w\w) (routines|drivers) passed the tests of the error exits')


def lapack_tester(shim, work, exports, precision):
    """LAPACK's linear-equation tester (xlintst[sdcz], Debian liblapack-test) on its own input file
    restricted to the paths of the routines the drop-in exports: GE (getrf, getrs; gesv among the
    drivers) and PO (potrf, potrs; posv). Returns the tests run and, per routine, (calls routed, error exits)."""
    program, given = '%s/xlintst%s' % (LAPACK_TESTING, precision), '%s/%stest.in' % (LAPACK_TESTING, precision)
    name = os.path.basename(program)
    if not os.access(program, os.X_OK) or not os.path.exists(given):
        raise CannotRun('%s is missing (Debian package liblapack-test)' % program)
    symbols = [precision + r for r in LAPACK_ROUTINES]
    if not set(symbols) <= exports:
        raise SuiteFailed('the drop-in does not export %s' % sorted(set(symbols) - exports))
    lines = open(given).read().splitlines()
    # The parameter lines (sizes, block sizes, threshold), then the path lines: only GE and PO kept.
    first_path = next(i for i, l in enumerate(lines) if re.match(r'^[SDCZ][A-Z0-9]{2}\b', l))
    paths = [precision.upper() + p for p in ('GE', 'PO')]
    kept = [l for l in lines[first_path:] if l[:3] in paths]
    if len(kept) != 2:
        raise CannotRun('%s has no %s lines' % (given, ' and '.join(paths)))
    here = os.path.join(work, name)
    shutil.rmtree(here, ignore_errors=True)
    os.makedirs(here)
    stdin_file, log, out = os.path.join(here, 'input.in'), os.path.join(here, 'blas.log'), os.path.join(here, 'output.txt')
    with open(stdin_file, 'w') as f:
        f.write('\n'.join(lines[:first_path] + kept) + '\n')
    with open(stdin_file) as stdin, open(out, 'w') as stdout:
        status, cpu = run_measured([program], 900, stdin=stdin, stdout=stdout, stderr=subprocess.STDOUT, cwd=here,
                                   env=environment(shim, log))
    text = open(out).read()
    failures = [l.strip() for l in text.splitlines() if 'fail' in l.lower()]
    passed = {(m.group(1), m.group(2)): int(m.group(3)) for m in map(LAPACK_SUMMARY.match, text.splitlines()) if m}
    exits = {(m.group(1), m.group(2)) for m in map(LAPACK_ERROR_EXITS.match, text.splitlines()) if m}
    expected = {(p, kind) for p in paths for kind in ('routines', 'drivers')}
    if status != 0 or 'End of tests' not in text or failures or set(passed) != expected or exits != expected:
        raise SuiteFailed('%s: exit %d, %s\n%s' % (name, status, failures or 'not every GE/PO summary passed',
                                                   text[-3000:]))
    calls, _ = read_log(log)
    check_routed(calls, name)
    routed = []
    for s in symbols:
        n, bad = calls[(s, 'tilestream')], calls[(s, 'invalid-arguments')]
        if n == 0:
            raise SuiteFailed('%s: no %s call ran on tilestream' % (name, s))
        if bad == 0:
            raise SuiteFailed('%s: none of the error-exit calls of %s passed through the drop-in' % (name, s))
        routed.append((s, n, bad))
    return sum(passed.values()), routed, calls, cpu


def lapack(shim, work, quick):
    exports = exported_routines(shim)
    for precision in 'dz' if quick else 'sdcz':
        start = time.monotonic()
        tests, routed, calls, cpu = lapack_tester(shim, work, exports, precision)
        others = sum(n for (r, w), n in calls.items() if w == 'tilestream') - sum(n for _, n, _ in routed)
        say('  %-9s %5.1f s (%4.1f s CPU)  %d tests passed; %s; %d calls of other routines (BLAS) on tilestream'
            % ('xlintst' + precision, time.monotonic() - start, cpu, tests,
               ', '.join('%s %d (+%d error exits)' % r for r in routed), others))


# --------------------------------------------------------------------------------------- pytest suites

def xdist_workers():
    """Processes for one pytest run: one per core where pytest-xdist is installed (Debian:
    python3-pytest-xdist), else 1."""
    if subprocess.run([PYTHON, '-c', 'import xdist'], capture_output=True).returncode != 0:
        return 1
    return max(1, os.cpu_count() or 1)


def run_pytest(args, work, tag, shim=None, workers=1):
    """Runs pytest on `args` in a fresh folder (in `workers` processes through pytest-xdist when
    more than 1); returns {test id: outcome}, the drop-in's log and the CPU seconds."""
    here = os.path.join(work, tag)
    shutil.rmtree(here, ignore_errors=True)
    os.makedirs(here)
    outcomes, log = os.path.join(here, 'outcomes.jsonl'), os.path.join(here, 'blas.log')
    extra = {'FOREIGN_SUITE_OUTCOMES': outcomes,
             'PYTHONPATH': HERE + (':' + os.environ['PYTHONPATH'] if os.environ.get('PYTHONPATH') else ''),
             # numpy's tests that need more memory than this skip (one allocates 16 GiB otherwise);
             # both runs see the same value
             'NPY_AVAILABLE_MEM': '4 GB'}
    command = [PYTHON, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-p', 'outcomes_plugin']
    if workers > 1:
        command += ['-p', 'xdist', '-n', str(workers)]
    command += args
    with open(os.path.join(here, 'pytest.txt'), 'w') as out:
        status, cpu = run_measured(command, 3600, cwd=here, stdout=out, stderr=subprocess.STDOUT,
                                   env=environment(shim, log, extra))
    files = sorted(os.path.join(here, f) for f in os.listdir(here) if f.startswith('outcomes.jsonl'))
    if status not in (0, 1) or not files:  # 1: some tests failed
        raise SuiteFailed('pytest %s exited %d (%s)' % (' '.join(args), status, os.path.join(here, 'pytest.txt')))
    result = {}
    for path in files:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                result[r['id']] = r['outcome']
    return result, log, cpu


def differences(plain, shimmed):
    return sorted(t for t in set(plain) | set(shimmed) if plain.get(t) != shimmed.get(t))


def both_ways(run, shim):
    """run(None) and run(shim) at once, without and with the drop-in (each keeps about one core busy;
    CI's machine has two): ((plain result, seconds), (shimmed result, seconds))."""
    def timed(preload):
        start = time.monotonic()
        result = run(preload)
        return result, time.monotonic() - start
    with ThreadPoolExecutor(2) as pool:
        plain, shimmed = pool.submit(timed, None), pool.submit(timed, shim)
        return plain.result(), shimmed.result()


def pytest_suite(shim, work, label, runs, lapack_required=()):
    """`runs`: the pytest arguments of each run, made one after the other with the drop-in, each on
    every core (pytest-xdist); every test that did not pass is then run again without the drop-in,
    and its outcome must be the same (a test that passes with the drop-in passes; one that fails,
    errs, skips or x-fails must do so without it too). `lapack_required`: the drop-in's LAPACK
    symbols the suite must have called."""
    workers = xdist_workers()
    shimmed, calls, processes, cpu_shim, lapack_time = {}, Counter(), 0, 0.0, [0, 0.0]
    start = time.monotonic()
    for i, args in enumerate(runs):
        result, log, seconds = run_pytest(args, work, '%s-shim%d' % (label, i), shim, workers)
        shimmed.update(result)
        cpu_shim += seconds
        c, p = read_log(log)
        calls.update(c)
        processes += p
        n, t = lapack_seconds(log)
        lapack_time = [lapack_time[0] + n, lapack_time[1] + t]
    t_shim = time.monotonic() - start
    routed = check_routed(calls, label)
    others = sorted(t for t, o in shimmed.items() if o != 'passed')
    if len(others) > 2000:
        raise SuiteFailed('%s: %d tests did not pass with the drop-in, e.g. %s' % (label, len(others), others[:20]))
    start = time.monotonic()
    plain, cpu_plain = {}, 0.0
    if others:
        plain, _, cpu_plain = run_pytest(others, work, label + '-plain', None, workers)
    t_plain = time.monotonic() - start
    differ = [t for t in others if plain.get(t) != shimmed.get(t)]
    unstable = []
    if differ:
        if len(differ) > 200:
            raise SuiteFailed('%s: %d tests differ, e.g. %s' % (label, len(differ), differ[:20]))
        ((again_plain, _, _), _), ((again_shim, _, _), _) = both_ways(
            lambda preload: run_pytest(differ, work, label + ('-again-shim' if preload else '-again-plain'), preload),
            shim)
        stays = [t for t in differ if again_plain.get(t) != again_shim.get(t)]
        if stays:
            raise SuiteFailed('%s: outcomes differ with the drop-in: %s' % (label, '; '.join(
                '%s: %s without, %s with' % (t, again_plain.get(t), again_shim.get(t)) for t in stays[:30])))
        unstable = differ
    counts = Counter(shimmed.values())
    say('  %s: %d tests with the drop-in (%s) in %.0f s (%.0f s CPU, %d pytest-xdist worker%s); the %d that did '
        'not pass, without it: the same outcomes, %.0f s (%.0f s CPU); %d calls routed to tilestream from %d '
        'processes' % (label, len(shimmed), ', '.join('%d %s' % (n, o) for o, n in sorted(counts.items())), t_shim,
                       cpu_shim, workers, '' if workers == 1 else 's', len(others), t_plain, cpu_plain, routed,
                       processes))
    say('    routed: ' + summary(calls))
    check_lapack(calls, label, lapack_required, lapack_time)
    if unstable:
        say('    unstable (differed once, the same when rerun both ways): ' + ', '.join(unstable))


def numpy_suite(shim, work, quick):
    if subprocess.run([PYTHON, '-c', 'import numpy, pytest, hypothesis, typing_extensions'],
                      capture_output=True).returncode != 0:
        raise CannotRun('%s lacks numpy, pytest, hypothesis or typing_extensions (Debian: python3-numpy '
                        'python3-pytest python3-hypothesis python3-typing-extensions)' % PYTHON)
    if quick:
        runs = [['--pyargs', 'numpy.linalg', 'numpy.core.tests.test_multiarray', '-m', 'not slow', '-k',
                 'linalg or matmul or Matmul or dot or Dot']]
    else:
        # numpy.test()'s default selection (tests marked slow left out) without numpy.f2py, whose tests
        # compile Fortran extension modules with gfortran to test numpy's wrapper generator, call no
        # BLAS, and take a quarter of the time (98 of 385 s on the loaded 2-core VM); then all of
        # numpy.linalg, slow tests included: its stacked-matrix cases make some 200,000 GEMM calls
        # (about 35 s without the drop-in there).
        where = subprocess.run([PYTHON, '-c', 'import numpy, os; print(os.path.dirname(numpy.__file__))'],
                               capture_output=True, text=True).stdout.strip()
        runs = [['--pyargs', 'numpy', '-m', 'not slow', '--ignore=' + os.path.join(where, 'f2py'),
                 '--ignore=' + os.path.join(where, 'linalg')],
                ['--pyargs', 'numpy.linalg']]
    # numpy.linalg computes in double precision (float32 input too): solve and inv call ?gesv_,
    # cholesky ?potrf_, det and slogdet ?getrf_.
    pytest_suite(shim, work, 'numpy', runs, [p + r for p in 'dz' for r in ('gesv_', 'getrf_', 'potrf_')])


def scipy_suite(shim, work, quick):
    if subprocess.run([PYTHON, '-c', 'import scipy.linalg, pytest'], capture_output=True).returncode != 0:
        raise CannotRun('%s lacks SciPy or pytest (Debian: python3-scipy python3-pytest)' % PYTHON)
    # lu_factor/lu_solve, cho_factor/cho_solve, solve and scipy.linalg.lapack's own tests: all six.
    pytest_suite(shim, work, 'scipy', [['--pyargs', 'scipy.linalg', '-m', 'not slow']],
                 [p + r for p in 'dz' for r in LAPACK_ROUTINES])


# ---------------------------------------------------------------------------------------------- octave

# Octave's tests of its linear algebra: the built-in functions (their tests are shipped as .cc-tst
# files), the matrix classes of liboctave, the interpreter's tests of products, left division and
# transposes, and every function of its m/linear-algebra folder.
OCTAVE_BUILTINS = ['chol', 'det', 'dot', 'eig', 'hess', 'inv', 'lu', 'qr', 'schur', 'svd', 'sylvester', 'pinv',
                   'rcond', 'kron', 'mgorth', 'sqrtm', 'gsvd', 'ordschur', 'qz', 'ordqz', 'matrix_type',
                   'givens', '__eigs__']


def octave_files():
    out = subprocess.run(['octave-cli', '--no-gui', '--norc', '--no-window-system', '--eval', 'disp(OCTAVE_VERSION)'],
                         capture_output=True, text=True)
    version = out.stdout.strip()
    tests, m = OCTAVE_TESTS % version, OCTAVE_M % version
    files = ['%s/libinterp/corefcn/%s.cc-tst' % (tests, f) for f in OCTAVE_BUILTINS]
    files += ['%s/liboctave/array/%s.cc-tst' % (tests, f) for f in ('dMatrix', 'fMatrix', 'CMatrix', 'fCMatrix')]
    files += ['%s/fixed/%s.tst' % (tests, f) for f in ('diag-perm', 'leftdiv', 'complex', 'transpose')]
    files += sorted(os.path.join(m, 'linear-algebra', f) for f in os.listdir(os.path.join(m, 'linear-algebra'))
                    if f.endswith('.m'))
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        raise CannotRun('Octave %s lacks test files: %s' % (version, missing))
    return files


def run_octave(files, work, tag, shim=None):
    """{file: (passed, tests, expected failures, known bugs, skipped, run-time skips, regressions)}."""
    here = os.path.join(work, tag)
    shutil.rmtree(here, ignore_errors=True)
    os.makedirs(here)
    log = os.path.join(here, 'blas.log')
    script = os.path.join(here, 'run_tests.m')
    with open(script, 'w') as f:
        f.write("fid = fopen('%s', 'w');\n" % os.path.join(here, 'tests.txt'))
        for file in files:
            f.write("[r{1:7}] = test('%s', 'quiet', fid);\n" % file)
            f.write("printf('RESULT %%s%%s\\n', '%s', sprintf(' %%d', r{:}));\n" % file)
        f.write('fclose(fid);\n')
    out = os.path.join(here, 'octave.txt')
    with open(out, 'w') as f:
        status, cpu = run_measured(['octave-cli', '--no-gui', '--norc', '--no-window-system', script], 1800, cwd=here,
                                   stdout=f, stderr=subprocess.STDOUT, env=environment(shim, log))
    result = {}
    for line in open(out).read().splitlines():
        if line.startswith('RESULT '):
            words = line.split()
            result[words[1]] = tuple(int(w) for w in words[2:])
    if status != 0 or len(result) != len(files):
        raise SuiteFailed('octave exited %d after %d of %d test files (%s)' % (status, len(result), len(files), out))
    return result, log, cpu


def octave_suite(shim, work, quick):
    if not shutil.which('octave-cli'):
        raise CannotRun('no octave-cli (Debian package octave)')
    files = octave_files()
    ((plain, _, cpu_plain), t_plain), ((shimmed, log, cpu_shim), t_shim) = both_ways(
        lambda preload: run_octave(files, work, 'octave-shim' if preload else 'octave-plain', preload), shim)
    calls, _ = read_log(log)
    routed = check_routed(calls, 'octave')
    differ = differences(plain, shimmed)
    if differ:
        ((again_plain, _, _), _), ((again_shim, _, _), _) = both_ways(
            lambda preload: run_octave(differ, work, 'octave-again-shim' if preload else 'octave-again-plain',
                                       preload), shim)
        stays = [f for f in differ if again_plain[f] != again_shim[f]]
        if stays:
            raise SuiteFailed('octave: results differ with the drop-in: %s' % '; '.join(
                '%s: %s without, %s with' % (f, again_plain[f], again_shim[f]) for f in stays))
    passed = sum(r[0] for r in shimmed.values())
    total = sum(r[1] for r in shimmed.values())
    say('  octave: %d test files, %d of %d tests passed, the same counts for every file with and without the '
        'drop-in; %.0f s without (%.0f s CPU), %.0f s with (%.0f s CPU), at once; %d calls routed to tilestream' % (
            len(files), passed, total, t_plain, cpu_plain, t_shim, cpu_shim, routed))
    say('    routed: ' + summary(calls))
    # chol (?potrf_ in every precision), lu (?getrf_) and left division (?getrf_ + ?getrs_, or
    # ?potrf_ + ?potrs_ for a matrix it finds positive definite)
    check_lapack(calls, 'octave', [p + 'potrf_' for p in 'sdcz'] + [p + 'getrf_' for p in 'sdcz'] +
                 ['dgetrs_', 'zgetrs_', 'dpotrs_'], lapack_seconds(log))
    if differ:
        say('    unstable (differed once, the same when rerun both ways): ' + ', '.join(differ))


SUITES = {'netlib': netlib, 'lapack': lapack, 'numpy': numpy_suite, 'scipy': scipy_suite, 'octave': octave_suite}


def main():
    args = sys.argv[1:]
    quick = '--quick' in args
    args = [a for a in args if a != '--quick']
    if len(args) < 2 or any(a not in SUITES for a in args[2:]):
        print(__doc__, file=sys.stderr)
        return 2
    shim, work = os.path.abspath(args[0]), os.path.abspath(args[1])
    if not os.path.exists(shim):
        print('suites.py: no drop-in at %s' % shim, file=sys.stderr)
        return 2
    os.makedirs(work, exist_ok=True)
    status = 0
    for name in args[2:] or list(SUITES):
        start = time.monotonic()
        say('%s%s:' % (name, ' (quick)' if quick else ''))
        try:
            SUITES[name](shim, work, quick)
            say('  %s passed in %.0f s' % (name, time.monotonic() - start))
        except CannotRun as e:
            say('  %s cannot run: %s' % (name, e))
            status = max(status, 2)
        except SuiteFailed as e:
            say('  %s FAILED after %.0f s: %s' % (name, time.monotonic() - start, e))
            status = max(status, 1) if status != 2 else 2
    return status


if __name__ == '__main__':
    sys.exit(main())
