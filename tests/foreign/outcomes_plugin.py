"""A pytest plugin that records each test's outcome, one JSON line per test, in the file named by
FOREIGN_SUITE_OUTCOMES (under pytest-xdist, each worker in FOREIGN_SUITE_OUTCOMES.<worker>). The
foreign-suite harness (suites.py) loads it with `-p outcomes_plugin`; it only observes. Line: {"id":
the test's file and its name within it, as pytest takes it on a command line and the same whatever
the rootdir, "outcome": passed | failed | error | skipped | xfailed | xpassed}."""
import json
import os

_phases = {}  # node id -> {phase: outcome}
_files = {}  # node id -> the test's file


def pytest_itemcollected(item):
    _files[item.nodeid] = str(item.path)


def pytest_collectreport(report):
    if report.failed:  # a module that cannot be imported: one error in its place
        _phases.setdefault(report.nodeid, {})['collect'] = 'error'


def pytest_runtest_logreport(report):
    phases = _phases.setdefault(report.nodeid, {})
    if hasattr(report, 'wasxfail'):
        phases[report.when] = 'xpassed' if report.passed else 'xfailed'
    else:
        phases[report.when] = report.outcome


def _outcome(phases):
    if 'failed' in (phases.get('setup'), phases.get('teardown')) or phases.get('collect') == 'error':
        return 'error'
    for when in ('setup', 'call'):
        if phases.get(when) in ('failed', 'skipped', 'xfailed', 'xpassed'):
            return phases[when]
    return 'passed'


def pytest_sessionfinish(session):
    out = os.environ.get('FOREIGN_SUITE_OUTCOMES')
    if not out:
        return
    # Under pytest-xdist (-n) each worker collects and runs its share and writes its own file
    # (OUT.gw0, OUT.gw1, ...); the controller, which sees reports but no collected items, writes none.
    worker = os.environ.get('PYTEST_XDIST_WORKER')
    if worker:
        out += '.' + worker
    elif getattr(session.config.option, 'numprocesses', None):
        return
    with open(out, 'w') as f:
        for nodeid, phases in _phases.items():
            file = _files.get(nodeid)
            test = file + '::' + nodeid.split('::', 1)[1] if file and '::' in nodeid else nodeid
            f.write(json.dumps({'id': test, 'outcome': _outcome(phases)}) + '\n')
