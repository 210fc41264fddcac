"""What preloading the drop-in brings into a process. It exports exactly the rows of
src/blas/blas_routines.hpp; a process that makes no BLAS call maps no BLAS, no libtilestream and
nothing of CUDA or OpenCL; numpy routing a call to CPU devices maps libtilestream but nothing of CUDA
or OpenCL (/proc/self/maps of the process itself); nor does one routed with the default devices
`all` where the only OpenCL driver is PoCL with CPU devices (`all` never takes those: no discovery).

usage: drop_in_loading.py SHIM ROUTINES_HEADER
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

from blas_log import check, run

VENDOR = ('libcudart', 'libcublas', 'libcublasLt', 'libcuda.', 'libOpenCL', 'libclblast', 'libpocl',
          'libtilestream_cuda', 'libtilestream_opencl')
MAPS = 'print(open("/proc/self/maps").read())'


def mapped(maps_text, names):
    files = {line.split()[-1] for line in maps_text.splitlines() if '/' in line}
    return sorted({os.path.basename(f) for f in files if any(n in os.path.basename(f) for n in names)})


def table_symbols(text):
    """The symbols of the table's rows: X(symbol, ...), and a family in several precisions,
    TILESTREAM_BLAS_SD(X, stem, ...) (s and d; _CZ: c and z; _SDCZ: all four; TILESTREAM_CBLAS_*:
    cblas_ before the letter), one symbol per letter."""
    rows = re.findall(r'^\s*X\((\w+),', text, re.M)
    for cblas, letters, stem in re.findall(r'^\s*TILESTREAM_(C?)BLAS_([SDCZ]+)\(X, *(\w+),', text, re.M):
        rows += [('cblas_' if cblas else '') + letter.lower() + stem for letter in letters]
    return rows


def main():
    shim, header = sys.argv[1:3]
    rows = table_symbols(open(header).read())
    nm = subprocess.run(['nm', '-D', '--defined-only', shim], capture_output=True, text=True, check=True)
    exported = sorted(line.split()[-1] for line in nm.stdout.splitlines() if line.split()[1:2] == ['T'])
    check(exported == sorted(rows), 'exports %s, the table has %s' % (exported, sorted(rows)))

    p = run([sys.executable, '-c', MAPS], {}, shim, os.devnull)
    check(p.returncode == 0, 'python with the drop-in preloaded failed')
    extra = mapped(p.stdout, ('libtilestream.', 'libtilestream_blas_context', 'openblas', 'libblas', 'liblapack',
                              'libgfortran') + VENDOR)
    check(not extra, 'a process that makes no BLAS call maps %s with the drop-in preloaded' % extra)

    if subprocess.run([sys.executable, '-c', 'import numpy'], capture_output=True).returncode == 0:
        code = ('import numpy as np\n'
                'a = np.random.rand(64, 48); b = np.random.rand(48, 32)\n'
                'assert np.allclose(a @ b, np.einsum("ik,kj->ij", a, b))\n' + MAPS)
        p = run([sys.executable, '-c', code], {'TILESTREAM_BLAS_THRESHOLD': '1', 'TILESTREAM_DEVICES': 'cpu'},
                shim, os.devnull)
        check(p.returncode == 0, 'numpy with the drop-in failed')
        check(mapped(p.stdout, ('libtilestream.',)), 'the routed call did not load libtilestream')
        check(not mapped(p.stdout, VENDOR), 'a call routed to CPU devices mapped %s' % mapped(p.stdout, VENDOR))
        pocl = sorted(glob.glob('/usr/lib/*-linux-gnu/libpocl.so.*') + glob.glob('/usr/lib64/libpocl.so.*'), key=len)
        if pocl:
            with tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, 'pocl.icd'), 'w') as f:
                    f.write(pocl[0] + '\n')
                p = run([sys.executable, '-c', code], {'TILESTREAM_BLAS_THRESHOLD': '1', 'OCL_ICD_VENDORS': folder,
                                                       'POCL_DEVICES': 'pthread'}, shim, os.devnull)
            check(p.returncode == 0, 'numpy with the drop-in (devices all) failed')
            opencl = mapped(p.stdout, ('libOpenCL', 'libclblast', 'libpocl', 'libtilestream_opencl'))
            check(not opencl, 'a call routed to devices all, PoCL CPU devices only, mapped %s' % opencl)
    print('drop-in: exports %s; maps nothing until a call needs it; CPU calls map no CUDA or OpenCL library'
          % ', '.join(rows))


if __name__ == '__main__':
    main()
