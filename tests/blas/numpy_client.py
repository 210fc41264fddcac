"""numpy as a client of the BLAS drop-in: `a @ b` for float32/float64/complex64/complex128 in C and
Fortran order, on transposed views and on slices (leading dimension above the row), run in a
subprocess with libtilestream_blas.so preloaded and in one without it. The log must show every
product on tilestream through cblas_[sdcz]gemm, and the results must match numpy's own.

usage: numpy_client.py SHIM WORK_DIR          (the test)
       numpy_client.py --compute OUT_DIR       (one run of the products, saved as .npy)
"""
import os
import sys

import numpy as np

from blas_log import check, parse, run


def products():
    """(name, a, b) with odd shapes; each a and b distinct arrays (a @ a.T would be a SYRK)."""
    rng = np.random.default_rng(20261123)
    out = []
    for dt in (np.float32, np.float64, np.complex64, np.complex128):
        def r(*shape):
            x = rng.uniform(-1, 1, shape)
            if np.dtype(dt).kind == 'c':
                x = x + 1j * rng.uniform(-1, 1, shape)
            return x.astype(dt)
        t = np.dtype(dt).name
        out.append((t + '-c', r(203, 157), r(157, 181)))
        out.append((t + '-fortran', np.asfortranarray(r(211, 149)), np.asfortranarray(r(149, 167))))
        out.append((t + '-a-transposed', r(157, 203).T, r(157, 181)))
        out.append((t + '-b-transposed', r(197, 163), r(179, 163).T))
        out.append((t + '-mixed-order', np.asfortranarray(r(187, 151)), r(151, 173)))
        out.append((t + '-sliced', r(215, 170)[3:206, 5:162], r(180, 190)[:157, 7:188]))
    return out


def compute(out_dir):
    for name, a, b in products():
        np.save(os.path.join(out_dir, name + '.npy'), a @ b)


def main():
    shim, work = sys.argv[1:3]
    plain, shimmed = os.path.join(work, 'plain'), os.path.join(work, 'shimmed')
    for d in (plain, shimmed):
        os.makedirs(d, exist_ok=True)
    log = os.path.join(work, 'numpy.log')
    me = os.path.abspath(__file__)
    p = run([sys.executable, me, '--compute', plain], {}, None, log)
    check(p.returncode == 0, 'numpy without the drop-in failed')
    p = run([sys.executable, me, '--compute', shimmed], {'TILESTREAM_BLAS_THRESHOLD': '1000'}, shim, log)
    check(p.returncode == 0, 'numpy with the drop-in failed')

    _, logged = parse(log)
    cases = products()
    check(len(logged) == len(cases), '%d products, %d GEMM calls logged: %s' % (len(cases), len(logged), logged))
    for (name, a, b), line in zip(cases, logged):
        routine = 'cblas_%sgemm' % {'float32': 's', 'float64': 'd', 'complex64': 'c', 'complex128': 'z'}[a.dtype.name]
        check(line['routine'] == routine, '%s: numpy called %s, expected %s' % (name, line['routine'], routine))
        check(line['ran'] == 'tilestream', '%s ran on %s' % (name, line))
        m, k = a.shape
        n = b.shape[1]
        check({line['m'], line['n']} == {str(m), str(n)} and line['k'] == str(k), '%s: shape %s' % (name, line))
        if name.endswith('sliced'):  # the slices' rows are 170 and 190 elements apart: no copy
            check({line['lda'], line['ldb']} == {'170', '190'}, '%s: leading dimensions %s' % (name, line))
        want = np.load(os.path.join(plain, name + '.npy'))
        got = np.load(os.path.join(shimmed, name + '.npy'))
        check(got.shape == want.shape and got.dtype == want.dtype, name + ': shape or dtype differs')
        wide = np.complex128 if a.dtype.kind == 'c' else np.float64
        norm = np.linalg.norm(want.astype(wide))
        check(norm > 0, name + ': numpy computed a zero product')
        rel = np.linalg.norm((got.astype(wide) - want)) / norm
        u = np.finfo(a.dtype).eps / (1 if a.dtype.kind == 'c' else 2)
        check(rel <= max(16, 8 * np.sqrt(k)) * u, '%s: relative error %.3g' % (name, rel))
        print('%-24s %-11s transa=%s transb=%s order=%s rel.err %.2g' % (name, routine, line['transa'],
                                                                     line['transb'], line['order'], rel))


if __name__ == '__main__':
    if sys.argv[1] == '--compute':
        compute(sys.argv[2])
    else:
        main()
