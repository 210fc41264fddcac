"""Reading the BLAS drop-in's log (TILESTREAM_BLAS_LOG) in the tests: one `key=value` line per call."""
import os
import re
import shlex
import subprocess
import sys

FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')


def parse(path):
    """The settings line (a dict) and the call lines (a list of dicts), in the order written."""
    settings, calls = None, []
    with open(path) as f:
        for line in f:
            fields = {k: v.strip('"') for k, v in FIELD.findall(line)}
            if line.startswith('settings '):
                settings = fields
            elif line.startswith('routine='):
                calls.append(fields)
    return settings, calls


def run(command, env_updates, preload, log_path, timeout=60):
    """Runs `command` with the drop-in preloaded (when `preload`) and a fresh log; returns the process."""
    env = dict(os.environ)
    for k in [k for k in env if k.startswith('TILESTREAM_')]:
        del env[k]  # only what the test says
    env.update(env_updates)
    if preload:
        env['LD_PRELOAD'] = preload + (':' + env['LD_PRELOAD'] if env.get('LD_PRELOAD') else '')
        env['TILESTREAM_BLAS_LOG'] = log_path
        # A fresh log: only a regular file is removed (a test may log to os.devnull, which as root
        # would otherwise be deleted and then created again as a regular file).
        if os.path.isfile(log_path) and not os.path.islink(log_path):
            os.remove(log_path)
    # Sanitizer builds: the preloaded drop-in comes before the ASan runtime the client links; and a
    # client thread that opens the context (OpenCL enumeration loads PoCL, whose LLVM installs a
    # malloc'ed alternate signal stack on that thread) makes GCC 12's ASan try to unmap that stack
    # when the thread exits (google/sanitizers#1152, fixed in llvm-project#179000). And the drop-in
    # loads its context with dlopen on the first routed call: GCC 12's ASan, on Debian 12's glibc
    # 2.36, records a wrong range for the dynamic TLS blocks of that library's threads, and
    # LeakSanitizer's exit-time tracer crashes reading it ("Tracer caught signal 11", "DTLS 9 at
    # 0x00050000007d"); intercept_tls_get_addr=0 stops recording them (leaks are still checked).
    env['ASAN_OPTIONS'] = ':'.join(filter(None, [env.get('ASAN_OPTIONS'), 'verify_asan_link_order=0',
                                                 'use_sigaltstack=0', 'intercept_tls_get_addr=0']))
    p = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        print('$', ' '.join(shlex.quote(c) for c in command), file=sys.stderr)
        print(p.stdout, p.stderr, sep='\n', file=sys.stderr)
    return p


def check(condition, message):
    if not condition:
        print('FAILED:', message, file=sys.stderr)
        sys.exit(1)
