# Turns OpenCL C files into a C++ header of raw string constants (run at build time with -P):
#   cmake -DOUTPUT=<header> -DSOURCES=<a.cl|b.cl> -P embed_opencl_sources.cmake
# Each file <name>.cl becomes `inline constexpr std::string_view <name>_cl = R"tsocl(...)tsocl";`.
set(text "// Generated from src/backends/opencl/kernels/*.cl by cmake/embed_opencl_sources.cmake.\n#pragma once\n#include <string_view>\nnamespace tilestream::opencl::sources {\n")
string(REPLACE "|" ";" SOURCES "${SOURCES}")
foreach(src IN LISTS SOURCES)
  get_filename_component(name "${src}" NAME_WE)
  file(READ "${src}" body)
  string(FIND "${body}" ")tsocl\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${src} contains the raw string delimiter )tsocl\"")
  endif()
  string(APPEND text "inline constexpr std::string_view ${name}_cl = R\"tsocl(${body})tsocl\";\n")
endforeach()
string(APPEND text "}  // namespace tilestream::opencl::sources\n")
file(WRITE "${OUTPUT}.tmp" "${text}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
