# Installs tilestream into a staging prefix, builds examples/ against the installed package with
# find_package(tilestream), and runs the example.
set(prefix ${BUILD_DIR}/test-install/prefix)
set(example_build ${BUILD_DIR}/test-install/example-build)
file(REMOVE_RECURSE ${BUILD_DIR}/test-install)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${example_build} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${example_build})
run(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib:${prefix}/lib64 ${example_build}/gemm_example)
