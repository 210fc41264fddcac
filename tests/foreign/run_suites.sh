#!/bin/sh
# Other projects' own test suites, unchanged, with the BLAS drop-in of BUILD_DIR preloaded and every
# call of its routines routed to tilestream: netlib's Level 3 BLAS testers (Fortran and CBLAS), LAPACK's
# linear-equation testers (GE and PO paths), numpy's test suite, SciPy's scipy.linalg tests and Octave's
# linear-algebra tests (tests/foreign/suites.py says what each checks). Work files go to
# BUILD_DIR/foreign. Run by .ci/run on the Release build.
# usage: run_suites.sh BUILD_DIR [SUITE ...]     (SUITE: netlib lapack numpy scipy octave; all by default)
set -eu
build=$1
shift
exec /usr/bin/python3 "$(dirname "$0")/suites.py" "$build/src/blas/libtilestream_blas.so" "$build/foreign" "$@"
