# Run after a unit-test executable is built (gdt_test without LABELS): lists
# its googletest cases and writes CTEST_FILE, which registers one ctest
# test per googletest suite, named <executable>:<suite>. A suite runs in one
# process: most unit cases take milliseconds, and starting the sanitized
# executable once per case cost more than the cases themselves.
#
# Inputs: TEST_EXECUTABLE, TEST_NAME (the executable's target name),
# CTEST_FILE, WORKING_DIR, CASE_TIMEOUT (seconds a case may take; a suite
# gets that per case, at most SUITE_TIMEOUT_MAX). A suite's COST is its
# number of cases, so that ctest starts the long suites first instead of
# leaving one for the end of a parallel run.
execute_process(
  COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  WORKING_DIRECTORY "${WORKING_DIR}"
  TIMEOUT 60
  OUTPUT_VARIABLE listing
  ERROR_VARIABLE listing_error
  RESULT_VARIABLE listed)
if(NOT listed EQUAL 0)
  message(FATAL_ERROR
    "${TEST_NAME}: --gtest_list_tests failed (${listed}): ${listing_error}")
endif()

string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  # "Suite." (perhaps "  # TypeParam = ...") starts a suite, "  Case" is
  # one of its cases.
  if(line MATCHES "^([^ #][^ ]*)\\.")
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set(cases_${suite} 0)
  elseif(line MATCHES "^  [^ ]" AND NOT suite STREQUAL "")
    math(EXPR cases_${suite} "${cases_${suite}} + 1")
  endif()
endforeach()

set(script "")
foreach(suite IN LISTS suites)
  math(EXPR timeout "${CASE_TIMEOUT} * ${cases_${suite}}")
  if(timeout GREATER SUITE_TIMEOUT_MAX)
    set(timeout ${SUITE_TIMEOUT_MAX})
  endif()
  set(name "${TEST_NAME}:${suite}")
  string(APPEND script
    "add_test([==[${name}]==] [==[${TEST_EXECUTABLE}]==] "
    "[==[--gtest_filter=${suite}.*]==])\n"
    "set_tests_properties([==[${name}]==] PROPERTIES TIMEOUT ${timeout} "
    "COST ${cases_${suite}} WORKING_DIRECTORY [==[${WORKING_DIR}]==])\n")
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
