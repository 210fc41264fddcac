# Registers one ctest test per GoogleTest suite of a test executable (run after each build): a
# suite's cases run in one process, so the suite pays for one start of the library, OpenBLAS and
# PoCL instead of one per case (about 1700 starts, a large share of the sanitizer stages' time).
# A suite whose every case was skipped (GPU tests without a GPU) shows as Skipped; gtest's output
# names each failing case.
#   -DTEST_EXECUTABLE=... -DCTEST_FILE=... -DENVIRONMENT="A=1|B=2" -DTIMEOUT=...
execute_process(COMMAND ${TEST_EXECUTABLE} --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${rc}):\n${listing}")
endif()
string(REPLACE "|" ";" environment "${ENVIRONMENT}")
set(script "")
string(REPLACE "\n" ";" lines "${listing}")
foreach(line IN LISTS lines)
  # Suite lines start in column 0 and end with '.' (a "  # TypeParam = ..." comment may follow).
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND script "add_test([=[${suite}]=] [=[${TEST_EXECUTABLE}]=] [=[--gtest_filter=${suite}.*]=])\n")
    string(APPEND script "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT ${TIMEOUT} "
                         "SKIP_REGULAR_EXPRESSION [=[\\[  PASSED  \\] 0 tests]=] ENVIRONMENT [=[${environment}]=])\n")
  endif()
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
