#!/usr/bin/env bash
# Installs the Debian packages tilestream needs to build and test (as root), or prints the exact
# apt-get line and stops (otherwise). CUDA is optional and comes from /usr/local/cuda, not apt.
set -euo pipefail
packages=(g++ make cmake ninja-build git libopenblas-dev libgtest-dev zlib1g-dev
          clang libclang-rt-14-dev  # scripts/fuzz.sh
          ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers pocl-opencl-icd libclblast-dev clinfo
          libcli11-dev nlohmann-json3-dev                        # command line and JSON
          python3-dev python3-numpy python3-pytest pybind11-dev  # the Python module and its tests
          python3-hypothesis                                     # numpy's own tests need it (run under the BLAS drop-in)
          python3-mesonpy python3-venv                           # pip install ./python, offline
          octave                                                 # a real client of the BLAS drop-in
          libopenmpi-dev openmpi-bin libscalapack-openmpi-dev     # ranks, and ScaLAPACK to compare with
          scalapack-mpi-test scalapack-test-common)              # ScaLAPACK's PBLAS tester and drivers (.ci/run)
packages+=(libblas-test python3-scipy python3-typing-extensions python3-pytest-xdist)  # foreign suites under the BLAS drop-in (.ci/run; xdist: numpy and SciPy on every core)
packages+=(liblapack-test)  # LAPACK's own testers (xlintst[sdcz]) under the drop-in's LAPACK routines (.ci/run)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "tilestream needs these Debian packages: ${missing[*]}" >&2
  echo "run as root:  apt-get update && $line" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
