"""Backends' libraries are loaded only when their devices are asked for (/proc/self/maps at exit,
through the maps_at_exit preload): a CPU gemm maps nothing of CUDA or OpenCL; `devices` keeps no CUDA
library mapped where it finds no GPU and no OpenCL library where it finds no platform; `import
tilestream` and a CPU matmul in Python map none either.

usage: backend_loading.py CLI MAPS_AT_EXIT WORK_DIR [PYTHON PYTHONPATH]
"""
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


def run_tool(cli, preload, work, args, env_updates=None):
    out = os.path.join(work, 'maps.txt')
    env = dict(os.environ, LD_PRELOAD=preload, TILESTREAM_TEST_MAPS_OUT=out, **(env_updates or {}))
    p = subprocess.run([cli] + args, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail('%s failed (%d): %s' % (' '.join(args), p.returncode, p.stderr))
    with open(out) as f:
        return p.stdout, f.read()


def main():
    cli, preload, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    _, maps = run_tool(cli, preload, work, ['gemm', '--m', '301', '--n', '203', '--k', '157', '--check'])
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
    print('backends load on demand: CPU runs and Python map no CUDA or OpenCL library, '
          'discovery that finds none unloads them')


if __name__ == '__main__':
    main()
