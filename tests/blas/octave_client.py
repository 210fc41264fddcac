"""GNU Octave as a client of the BLAS drop-in: `A*B` (dgemm_, Fortran ABI) in double and single, with
transposed operands, and complex products (zgemm_, cgemm_) with conjugate-transposed (`'`, which
Octave passes as 'C') and transposed (`.'`) operands, computed by Octave without the drop-in and saved, then recomputed with
libtilestream_blas.so preloaded; the log must show each product on tilestream and the results must
match.

usage: octave_client.py OCTAVE_CLI SHIM WORK_DIR
"""
import os
import sys

from blas_log import check, parse, run

PRODUCTS = ['A*B', "At'*B", "A*Bt'", 'single(A)*single(B)', "single(At)'*single(B)", "single(A)*single(Bt)'",
            'Z*W', "Zt'*W", "Z*Wt.'", "single(Z)*single(Wt)'"]
ROUTINES = ['dgemm_', 'dgemm_', 'dgemm_', 'sgemm_', 'sgemm_', 'sgemm_', 'zgemm_', 'zgemm_', 'zgemm_', 'cgemm_']
TRANS = [('N', 'N'), ('T', 'N'), ('N', 'T'), ('N', 'N'), ('T', 'N'), ('N', 'T'), ('N', 'N'), ('C', 'N'), ('N', 'T'),
         ('N', 'C')]


def main():
    octave, shim, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, 'octave-products.bin')
    log = os.path.join(work, 'octave.log')
    make = ("rand('state', 7); A = rand(203,157)-0.5; B = rand(157,181)-0.5; At = rand(157,203)-0.5; "
            "Bt = rand(181,157)-0.5; Z = A + 1i*(rand(203,157)-0.5); W = B - 1i*(rand(157,181)-0.5); "
            "Zt = At + 1i*(rand(157,203)-0.5); Wt = Bt - 1i*(rand(181,157)-0.5); " +
            ' '.join('C%d = %s;' % (i, p) for i, p in enumerate(PRODUCTS)) +
            " save('-binary', '%s', 'A', 'B', 'At', 'Bt', 'Z', 'W', 'Zt', 'Wt', %s);" % (
                data, ', '.join("'C%d'" % i for i in range(len(PRODUCTS)))))
    p = run([octave, '--no-gui', '--norc', '--eval', make], {}, None, log)
    check(p.returncode == 0, 'octave without the drop-in failed')
    again = ("load('%s'); bad = 0; " % data +
             ' '.join("D = %s; e = norm(double(D - C%d), 'fro') / norm(double(C%d), 'fro'); "
                      "u = eps(class(D)); tol = max(16, 8 * sqrt(157)) * u; "
                      "printf('%%s: relative error %%g (tolerance %%g)\\n', '%s', e, tol); "
                      "bad = bad + !(e <= tol && norm(double(C%d), 'fro') > 0 && isa(D, class(C%d)));"
                      % (prod, i, i, prod.replace("'", "''"), i, i) for i, prod in enumerate(PRODUCTS)) +
             " exit(bad > 0);")
    p = run([octave, '--no-gui', '--norc', '--eval', again], {'TILESTREAM_BLAS_THRESHOLD': '1000'}, shim, log)
    print(p.stdout)
    check(p.returncode == 0, 'octave with the drop-in: results differ (or octave failed)')
    _, logged = parse(log)
    check(len(logged) == len(PRODUCTS), '%d products, %d GEMM calls logged: %s' % (len(PRODUCTS), len(logged), logged))
    for prod, routine, (ta, tb), line in zip(PRODUCTS, ROUTINES, TRANS, logged):
        check(line['routine'] == routine and line['ran'] == 'tilestream', '%s: %s' % (prod, line))
        check((line['transa'], line['transb']) == (ta, tb), '%s: transposes %s' % (prod, line))
        print('%-26s %s transa=%s transb=%s m=%s n=%s k=%s on %s' % (prod, routine, ta, tb, line['m'], line['n'],
                                                                    line['k'], line['devices']))


if __name__ == '__main__':
    main()
