"""Backends' libraries are loaded only when their devices are asked for (/proc/self/maps at exit,
through the maps_at_exit preload): a CPU gemm maps nothing of CUDA or OpenCL; `devices` keeps no CUDA
library mapped where it finds no GPU and no OpenCL library where it finds no platform; `import
tilestream` and a CPU matmul in Python map none either. Where every OpenCL driver is PoCL with CPU
devices only (a vendors folder of PoCL alone, POCL_DEVICES=pthread), `all` (the CLI's --devices all,
Python's default) maps no OpenCL library either, while `devices` still lists PoCL's device; one more
driver listed and `all` discovers OpenCL again. Where no CUDA driver (libcuda.so.1) can be loaded,
`all` does not even open the CUDA module (the runtime and cuBLAS, ~200 MiB for a moment): the
loader's own trace (LD_DEBUG=files) shows no such file opened.

usage: backend_loading.py CLI MAPS_AT_EXIT WORK_DIR [PYTHON PYTHONPATH]
"""
import ctypes
import glob
import json
import os
import subprocess
import sys

CUDA = ('libcudart', 'libcublas', 'libcublasLt', 'libcuda.', 'libtilestream_cuda')
OPENCL = ('libOpenCL', 'libclblast', 'libpocl', 'libtilestream_opencl')


def fail(message):
    print('FAILED:', message, file=sys.stderr)
    sys.exit(1)


def mapped(maps_text, names):
    files = {line.split()[-1] for line in maps_text.splitlines() if '/' in line}
    return sorted({os.path.basename(f) for f in files if any(n in os.path.basename(f) for n in names)})


def pocl_library():
    """The system's PoCL library (what its .icd names), or None."""
    for pattern in ('/usr/lib/*-linux-gnu/libpocl.so.*', '/usr/lib64/libpocl.so.*', '/usr/lib/libpocl.so.*',
                    '/usr/local/lib/libpocl.so.*'):
        found = sorted(glob.glob(pattern), key=len)
        if found:
            return found[0]
    return None


def vendors(work, name, libraries):
    """A vendors folder listing `libraries`, one .icd each."""
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    for i, lib in enumerate(libraries):
        with open(os.path.join(folder, 'driver%d.icd' % i), 'w') as f:
            f.write(lib + '\n')
    return folder


def run_tool(cli, preload, work, args, env_updates=None):
    out = os.path.join(work, 'maps.txt')
    env = dict(os.environ, LD_PRELOAD=preload, TILESTREAM_TEST_MAPS_OUT=out, **(env_updates or {}))
    env = {k: v for k, v in env.items() if v is not None}  # None: unset
    p = subprocess.run([cli] + args, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail('%s failed (%d): %s' % (' '.join(args), p.returncode, p.stderr))
    with open(out) as f:
        return p.stdout, f.read()


def main():
    cli, preload, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    _, maps = run_tool(cli, preload, work, ['gemm', '--devices', 'cpu', '--m', '301', '--n', '203', '--k', '157', '--check'])
    if mapped(maps, CUDA + OPENCL):
        fail('a CPU gemm mapped %s' % mapped(maps, CUDA + OPENCL))

    no_icd = os.path.join(work, 'no-opencl-vendors')
    os.makedirs(no_icd, exist_ok=True)
    out, maps = run_tool(cli, preload, work, ['devices'], {'OCL_ICD_VENDORS': no_icd})
    if 'cuda:0' not in out and mapped(maps, CUDA):
        fail('`devices` found no GPU but kept %s mapped' % mapped(maps, CUDA))
    if 'opencl:0' not in out and mapped(maps, OPENCL):
        fail('`devices` found no OpenCL platform but kept %s mapped' % mapped(maps, OPENCL))
    if 'opencl:0' in out:
        fail('OCL_ICD_VENDORS=%s (empty) still listed an OpenCL device:\n%s' % (no_icd, out))

    # `all` where no CUDA driver can be loaded: the CUDA module is not opened to find none.
    try:
        ctypes.CDLL('libcuda.so.1')
        cuda_driver = True
    except OSError:
        cuda_driver = False
    # The same for the default devices (auto), which looks for GPUs as `all` does.
    for spec in (['--devices', 'all'], []) if not cuda_driver else ():
        p = subprocess.run([cli, 'gemm'] + spec + ['--m', '64', '--n', '48', '--k', '32'],
                           env=dict(os.environ, LD_DEBUG='files'), capture_output=True, text=True, timeout=300)
        opened = sorted({line.split('file=')[1].split()[0] for line in p.stderr.splitlines()
                         if 'file=' in line and any(n in line for n in ('libtilestream_cuda', 'libcudart', 'libcublas'))})
        if p.returncode != 0 or opened:
            fail('gemm %s without a CUDA driver opened %s (exit %d)' % (' '.join(spec) or '(default devices)', opened,
                                                                         p.returncode))

    # `all` where the only OpenCL driver is PoCL with CPU devices: no OpenCL discovery.
    pocl = pocl_library()
    pocl_only = None
    if pocl:
        # OCL_ICD_FILENAMES (which a CUDA image may set) would add its drivers to the folder's.
        pocl_only = {'OCL_ICD_VENDORS': vendors(work, 'vendors-pocl-only', [pocl]), 'POCL_DEVICES': 'pthread',
                     'OCL_ICD_FILENAMES': None}
        out, _ = run_tool(cli, preload, work, ['devices', '--json'], pocl_only)
        listing = json.loads(out)
        if 'only PoCL CPU devices' not in listing.get('opencl_under_all', ''):
            fail('a vendors folder of PoCL alone (pthread) did not skip OpenCL under all (%s): %r'
                 % (listing.get('opencl_under_all_decision'), listing))
        if listing['opencl_devices']:  # the OpenCL backend is built and PoCL works: the skip shows in the maps
            gemm = ['gemm', '--devices', 'all', '--m', '301', '--n', '203', '--k', '157', '--check']
            _, maps = run_tool(cli, preload, work, gemm, pocl_only)
            if mapped(maps, OPENCL):
                fail('gemm --devices all with PoCL CPU devices only mapped %s' % mapped(maps, OPENCL))
            another = dict(pocl_only, OCL_ICD_VENDORS=vendors(work, 'vendors-pocl-and-another', [pocl, 'libnot-a-driver.so']))
            _, maps = run_tool(cli, preload, work, gemm, another)
            if not mapped(maps, ('libOpenCL', 'libpocl')):
                fail('gemm --devices all with a second OpenCL driver listed did not discover OpenCL')

    if len(sys.argv) > 5:
        python, path = sys.argv[4:6]
        code = ('import numpy as np, tilestream\n'
                'a = np.random.rand(67, 45); b = np.random.rand(45, 31)\n'
                'assert np.allclose(tilestream.matmul(a, b, devices="cpu"), a @ b)\n'
                'print(open("/proc/self/maps").read())\n')
        p = subprocess.run([python, '-c', code], env=dict(os.environ, PYTHONPATH=path), capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:
            fail('python: %s' % p.stderr)
        if mapped(p.stdout, CUDA + OPENCL):
            fail('import tilestream and a CPU matmul mapped %s' % mapped(p.stdout, CUDA + OPENCL))
        if pocl_only:
            default = code.replace(', devices="cpu"', '')  # the default devices (auto)
            env = {k: v for k, v in dict(os.environ, PYTHONPATH=path, **pocl_only).items() if v is not None}
            p = subprocess.run([python, '-c', default], env=env,
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                fail('python: %s' % p.stderr)
            if mapped(p.stdout, OPENCL):
                fail('tilestream.matmul (default devices) with PoCL CPU devices only mapped %s' % mapped(p.stdout, OPENCL))
    print('backends load on demand: CPU runs and Python map no CUDA or OpenCL library, '
          'discovery that finds none unloads them' +
          (', all skips PoCL CPU devices' if pocl else ' (no PoCL: the skip under all not checked)'))


if __name__ == '__main__':
    main()
