# The pip route (README): a virtual environment with the system's site packages (Debian's numpy and
# meson-python), `pip install --no-build-isolation --no-index ./python` into it with nothing
# downloaded, then tilestream imported from the environment (not the build tree) and used.
# TILESTREAM_CMAKE_BUILD_DIR hands pip's build this CMake build (already built: nothing is
# rebuilt), so the test costs seconds; the packaging (meson-python, the RPATH, the libraries copied
# beside the extension, the metadata) is the same as a fresh `pip install ./python`. meson-python
# 0.12 works in a temporary python/.mesonpy-* folder (removed after) and keeps its native file
# there; a `builddir` setting is not used, as 0.12 then reconfigures a folder that may not exist.
execute_process(COMMAND ${PYTHON} -c "import mesonpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "meson-python is missing for ${PYTHON} (Debian: python3-mesonpy; scripts/ensure-deps.sh installs it)")
endif()
set(work ${BUILD_DIR}/test-pip-install)
file(REMOVE_RECURSE ${work})
file(MAKE_DIRECTORY ${work})
execute_process(COMMAND ${PYTHON} -m venv --system-site-packages ${work}/venv RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PYTHON} -m venv failed (${rc}): Debian's python3-venv is needed")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH TILESTREAM_CMAKE_BUILD_DIR=${BUILD_DIR}
          ${work}/venv/bin/python -m pip install --no-build-isolation --no-deps --no-index ${SOURCE_DIR}/python
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pip install ./python failed (${rc})")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=LD_LIBRARY_PATH ${work}/venv/bin/python -c
    "import importlib.metadata as md, numpy as np, sys, tilestream as t
assert t.__file__.startswith(sys.prefix) and sys.prefix.startswith('${work}'), (t.__file__, sys.prefix)
assert t.__version__ == md.version('tilestream') == '${VERSION}', (t.__version__, md.version('tilestream'))
rng = np.random.default_rng(15)
a, b = rng.uniform(-1, 1, (37, 29)), rng.uniform(-1, 1, (29, 23)).astype(np.float32)
c = t.matmul(a, b, devices='cpu')
assert c.dtype == np.float64 and np.abs(c - a @ b).max() < 1e-12
z = (a + 1j * rng.uniform(-1, 1, a.shape)).astype(np.complex64)  # complex64 x float32 -> complex64
c = t.matmul(z, b, devices='cpu', alpha=1.5 - 2j)
assert c.dtype == np.complex64 and np.abs(c - (1.5 - 2j) * (z @ b)).max() < 1e-4
import os
if os.path.exists('${BUILD_DIR}/libtilestream_opencl.so'):  # the OpenCL module ships in the package too
    c = t.matmul(a, b, devices='opencl:0')
    assert np.abs(c - a @ b).max() < 1e-12
    assert os.path.exists(os.path.join(os.path.dirname(t.__file__), 'backends', 'libtilestream_opencl.so'))
print('pip-installed', t.__file__, t.__version__)"
  WORKING_DIRECTORY ${work}  # not the source or build tree
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "importing the pip-installed tilestream failed (${rc})")
endif()
