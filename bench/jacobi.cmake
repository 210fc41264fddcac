# The Jacobi benchmark (included from bench/CMakeLists.txt): GLUP/s and GB/s of the solver on CPU
# device lists beside a stencil-shaped copy measured in the same run (the roofline).
add_executable(jacobi_bench ${CMAKE_CURRENT_LIST_DIR}/jacobi_bench.cpp)
target_link_libraries(jacobi_bench PRIVATE tilestream::tilestream ${BLAS_LIBRARIES} Threads::Threads
                      nlohmann_json::nlohmann_json)
# The anchor runs on the CPU backend's thread pool (a private header of the library), compiled for
# the same instruction set as the library's kernels.
target_include_directories(jacobi_bench PRIVATE ${PROJECT_SOURCE_DIR}/src ${TILESTREAM_CBLAS_INCLUDE})
if(TILESTREAM_NATIVE)
  target_compile_options(jacobi_bench PRIVATE -march=native)
endif()
