# Registers one ctest test per GoogleTest suite of a test executable (run after each build): a
# suite's cases run in one process, so the suite pays for one start of the library, OpenBLAS and
# PoCL instead of one per case (about 1700 starts, a large share of the sanitizer stages' time).
# A suite whose every case was skipped (GPU tests without a GPU) shows as Skipped; gtest's output
# names each failing case.
# SHARD="i/N" with SHARDED=<regex>: the suites whose names match run GoogleTest's shard i of N
# (GTEST_TOTAL_SHARDS, GTEST_SHARD_INDEX: every N-th case), the others whole.
#   -DTEST_EXECUTABLE=... -DCTEST_FILE=... -DENVIRONMENT="A=1|B=2" -DTIMEOUT=... [-DSHARD=i/N -DSHARDED=regex]
execute_process(COMMAND ${TEST_EXECUTABLE} --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${rc}):\n${listing}")
endif()
string(REPLACE "|" ";" environment "${ENVIRONMENT}")
set(shard_environment "")
if(SHARD)
  string(REGEX MATCH "^([0-9]+)/([0-9]+)$" shard_ok "${SHARD}")
  set(shard_index "${CMAKE_MATCH_1}")
  set(shard_count "${CMAKE_MATCH_2}")
  if(NOT shard_ok OR NOT shard_index LESS shard_count)
    message(FATAL_ERROR "SHARD must be i/N with i < N, not '${SHARD}'")
  endif()
  set(shard_environment "GTEST_TOTAL_SHARDS=${shard_count};GTEST_SHARD_INDEX=${shard_index}")
endif()
set(script "")
string(REPLACE "\n" ";" lines "${listing}")
foreach(line IN LISTS lines)
  # Suite lines start in column 0 and end with '.' (a "  # TypeParam = ..." comment may follow).
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    set(suite_environment "${environment}")
    if(shard_environment AND suite MATCHES "${SHARDED}")
      list(APPEND suite_environment ${shard_environment})
    endif()
    string(APPEND script "add_test([=[${suite}]=] [=[${TEST_EXECUTABLE}]=] [=[--gtest_filter=${suite}.*]=])\n")
    string(APPEND script "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT ${TIMEOUT} "
                         "SKIP_REGULAR_EXPRESSION [=[\\[  PASSED  \\] 0 tests]=] ENVIRONMENT [=[${suite_environment}]=])\n")
  endif()
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
