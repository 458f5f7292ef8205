# Warnings and sanitizers for the targets we own (never for generated code).
function(gdt_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
    -Wno-unused-parameter)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety)
  endif()
  if(GDT_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${GDT_SANITIZE} -fno-omit-frame-pointer
      -fno-sanitize-recover=undefined -fsanitize-recover=vptr)
    target_link_options(${target} PRIVATE -fsanitize=${GDT_SANITIZE})
    # halt_on_error=1 keeps vptr findings fatal too (see the file).
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE" AND GDT_SANITIZE MATCHES "undefined")
      target_sources(${target} PRIVATE
        ${PROJECT_SOURCE_DIR}/cmake/sanitizer_defaults.cc)
    endif()
  endif()
endfunction()

# The headers nearly every test includes, parsed once per test executable
# rather than once per file (GDT_PRECOMPILED_HEADERS=OFF turns it off). The
# header costs about as much as two files save (~6 s against ~2.5 s a file
# with the sanitizers), so only executables of 4 or more files get it.
function(gdt_precompiled_headers target)
  get_target_property(sources ${target} SOURCES)
  list(LENGTH sources count)
  if(NOT GDT_PRECOMPILED_HEADERS OR count LESS 4)
    return()
  endif()
  # C++ files only (a test may compile a C file too).
  foreach(header
      algorithm chrono filesystem functional map memory optional string
      vector absl/status/statusor.h absl/strings/str_cat.h gmock/gmock.h
      gtest/gtest.h grpcpp/grpcpp.h nlohmann/json.hpp)
    target_precompile_headers(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:<${header}$<ANGLE-R>>")
  endforeach()
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Xclang -fno-pch-timestamp)
  endif()
endfunction()

# gdt_test(NAME <name> SOURCES <files...> DEPS <targets...> [LABELS <labels...>] [TIMEOUT <s>])
# One test executable per library. Without LABELS (unit tests) each
# googletest suite is one ctest test, with TIMEOUT per case; with LABELS
# each case is one, with TIMEOUT as its deadline.
function(gdt_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT GDT_BUILD_TESTS)
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  gdt_target_defaults(${ARG_NAME})
  gdt_precompiled_headers(${ARG_NAME})
  if(NOT ARG_LABELS)
    # Unit tests: one ctest test per googletest suite (GdtSuiteTests.cmake).
    set(ctest_file "${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}_suites.cmake")
    add_custom_command(TARGET ${ARG_NAME} POST_BUILD
      COMMAND ${CMAKE_COMMAND}
        -D TEST_EXECUTABLE=$<TARGET_FILE:${ARG_NAME}>
        -D TEST_NAME=${ARG_NAME}
        -D CTEST_FILE=${ctest_file}
        -D WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}
        -D CASE_TIMEOUT=${ARG_TIMEOUT}
        -D SUITE_TIMEOUT_MAX=600
        -P ${PROJECT_SOURCE_DIR}/cmake/GdtSuiteTests.cmake
      BYPRODUCTS ${ctest_file}
      VERBATIM)
    # Read by ctest; until the executable is built it is one failing test.
    set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}_include.cmake")
    file(WRITE "${include_file}"
      "if(EXISTS \"${ctest_file}\")\n"
      "  include(\"${ctest_file}\")\n"
      "else()\n"
      "  add_test(${ARG_NAME}_NOT_BUILT ${ARG_NAME}_NOT_BUILT)\n"
      "endif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
    return()
  endif()
  # Integration tests: one ctest test per case, so that ctest runs them
  # side by side.
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  # Labels are set by a script ctest reads after the discovered tests: a
  # list of several labels does not survive gtest_discover_tests' PROPERTIES
  # (every label after the first would be read as a property name).
  if(ARG_LABELS)
    set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}_labels.cmake")
    file(WRITE "${labels_file}"
      "if(DEFINED ${ARG_NAME}_TESTS)\n"
      "  set_tests_properties(\${${ARG_NAME}_TESTS} PROPERTIES LABELS \"${ARG_LABELS}\")\n"
      "endif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
  endif()
endfunction()

# Bakes the project version into a binary's main.cc for `--version` (only
# executables get it, so library objects stay cacheable across versions).
function(gdt_binary_version target)
  target_compile_definitions(${target} PRIVATE
    GDT_VERSION="${PROJECT_VERSION}")
endfunction()

# gdt_fuzzer(NAME <name> SOURCES <files...> DEPS <targets...> CORPUS <dir>
#            [SECONDS <s>])
# A libFuzzer target, built only with GDT_BUILD_TESTS and a
# compiler that has libFuzzer (GDT_HAVE_LIBFUZZER, checked in
# gitlab/CMakeLists.txt). SOURCES are the fuzz entry point plus the parser's
# own .cc files, compiled again with coverage; DEPS provide the rest. ctest
# runs <name>_smoke for SECONDS (default 8) seeded with the committed
# CORPUS; what it learns and any crashing input stay under
# <build>/fuzz/<name>/.
function(gdt_fuzzer)
  cmake_parse_arguments(F "" "NAME;CORPUS;SECONDS" "SOURCES;DEPS" ${ARGN})
  if(NOT GDT_BUILD_TESTS OR NOT GDT_HAVE_LIBFUZZER)
    return()
  endif()
  if(NOT F_SECONDS)
    set(F_SECONDS 8)
  endif()
  add_executable(${F_NAME} ${F_SOURCES})
  target_link_libraries(${F_NAME} PRIVATE ${F_DEPS})
  # In a unity build a parser's file stays an object of its own in its
  # library too: an object bundling it with other files, pulled in for
  # those, would define the parser a second time.
  set(parsers ${F_SOURCES})
  list(POP_FRONT parsers)
  foreach(source IN LISTS parsers)
    get_filename_component(path ${source} ABSOLUTE
      BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    get_filename_component(source_dir ${path} DIRECTORY)
    set_source_files_properties(${path} DIRECTORY ${source_dir}
      PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endforeach()
  gdt_target_defaults(${F_NAME})
  target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  set(dir ${CMAKE_BINARY_DIR}/fuzz/${F_NAME})
  file(MAKE_DIRECTORY ${dir}/corpus)
  # libFuzzer adds new inputs to the first corpus directory: the scratch one
  # in the build tree; the committed corpus is only read.
  add_test(NAME ${F_NAME}_smoke
    COMMAND ${F_NAME} -max_total_time=${F_SECONDS} -timeout=10
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=${dir}/
      ${dir}/corpus ${F_CORPUS})
  set_tests_properties(${F_NAME}_smoke PROPERTIES TIMEOUT 120 LABELS fuzz)
endfunction()
