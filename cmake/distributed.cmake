# The distributed layer (src/distributed/, include/tilestream/distributed.hpp): built when MPI is
# found (TILESTREAM_WITH_MPI=AUTO) or required (ON). The core library stays MPI-free; the layer
# is its own library, tilestream::distributed, and the ScaLAPACK-compatible psgemm_/pdgemm_ live
# in a third, tilestream_scalapack, so linking tilestream never clashes with ScaLAPACK.
set(TILESTREAM_WITH_MPI "AUTO" CACHE STRING "Build the MPI layer: AUTO (when MPI is found), ON, OFF")
set_property(CACHE TILESTREAM_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(TILESTREAM_HAVE_MPI OFF)
if(NOT TILESTREAM_WITH_MPI STREQUAL "OFF")
  enable_language(C)  # FindMPI looks for the C bindings with the C compiler
  find_package(MPI COMPONENTS C)
  if(MPI_C_FOUND)
    set(TILESTREAM_HAVE_MPI ON)
  elseif(TILESTREAM_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "TILESTREAM_WITH_MPI=ON but no MPI was found (apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()
# ScaLAPACK (Debian's libscalapack-openmpi-dev): the BLACS the psgemm_/pdgemm_ front reads its
# grids from, and the PDGEMM the tests and the benchmark compare with.
if(TILESTREAM_HAVE_MPI)
  find_library(TILESTREAM_SCALAPACK_LIBRARY NAMES scalapack-openmpi scalapack)
endif()
message(STATUS "tilestream: MPI layer ${TILESTREAM_HAVE_MPI} (ScaLAPACK: ${TILESTREAM_SCALAPACK_LIBRARY})")

if(TILESTREAM_HAVE_MPI)
  file(GLOB TILESTREAM_DISTRIBUTED_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/../src/distributed/*.cpp)
  list(FILTER TILESTREAM_DISTRIBUTED_SOURCES EXCLUDE REGEX "scalapack_front\\.cpp$")
  add_library(tilestream_distributed SHARED ${TILESTREAM_DISTRIBUTED_SOURCES})
  add_library(tilestream::distributed ALIAS tilestream_distributed)
  target_include_directories(tilestream_distributed PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(tilestream_distributed PUBLIC tilestream MPI::MPI_C)
  # <mpi.h> from C++ without the deprecated C++ bindings (which need libmpi_cxx).
  target_compile_definitions(tilestream_distributed PUBLIC OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  target_compile_options(tilestream_distributed PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
  set_target_properties(tilestream_distributed PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 0)
  install(TARGETS tilestream_distributed EXPORT tilestreamTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  if(TILESTREAM_SCALAPACK_LIBRARY)
    add_library(tilestream_scalapack SHARED ${PROJECT_SOURCE_DIR}/src/distributed/scalapack_front.cpp)
    add_library(tilestream::scalapack ALIAS tilestream_scalapack)
    target_include_directories(tilestream_scalapack PRIVATE ${PROJECT_SOURCE_DIR}/src)
    # BLACS (inside ScaLAPACK) maps a context to its grid; PDGEMM itself is not used from there.
    target_link_libraries(tilestream_scalapack PUBLIC tilestream_distributed PRIVATE ${TILESTREAM_SCALAPACK_LIBRARY} ${CMAKE_DL_LIBS})
    target_compile_options(tilestream_scalapack PRIVATE -Wall -Wextra)
    set_target_properties(tilestream_scalapack PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION 0)
    install(TARGETS tilestream_scalapack EXPORT tilestreamTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endif()
