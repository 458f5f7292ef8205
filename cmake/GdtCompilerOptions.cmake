# Warnings and sanitizers for the targets we own (never for generated code).
function(gdt_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
    -Wno-unused-parameter)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety)
  endif()
  if(GDT_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${GDT_SANITIZE} -fno-omit-frame-pointer
      -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=${GDT_SANITIZE})
  endif()
endfunction()

# gdt_test(NAME <name> SOURCES <files...> DEPS <targets...> [LABELS <labels...>] [TIMEOUT <s>])
# One test executable per library; every case is registered with ctest and
# gets a deadline.
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
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()

# Bakes the project version into a binary's main.cc for `--version` (only
# executables get it, so library objects stay cacheable across versions).
function(gdt_binary_version target)
  target_compile_definitions(${target} PRIVATE
    GDT_VERSION="${PROJECT_VERSION}")
endfunction()
