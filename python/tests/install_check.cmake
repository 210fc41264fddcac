# Installs the build into a scratch prefix and imports tilestream from its site-packages with no
# build tree on any path: the installed module must find libtilestream through its RPATH.
set(prefix ${BUILD_DIR}/test-install-python/prefix)
file(REMOVE_RECURSE ${BUILD_DIR}/test-install-python)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} OUTPUT_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${prefix} failed (${rc})")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH PYTHONPATH=${prefix}/${SITE} ${PYTHON} -c
    "import numpy as np, tilestream as t; a = np.arange(6.0).reshape(2, 3); b = np.ones((3, 4)); assert t.__file__.startswith('${prefix}'), t.__file__; assert (t.matmul(a, b) == a @ b).all(); print('installed', t.__file__)"
  WORKING_DIRECTORY ${prefix}  # not the build tree: python -c puts the working directory on sys.path
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "importing tilestream from ${prefix}/${SITE} failed (${rc})")
endif()
