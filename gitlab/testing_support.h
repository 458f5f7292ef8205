#ifndef GDT_GITLAB_TESTING_SUPPORT_H_
#define GDT_GITLAB_TESTING_SUPPORT_H_

// Test-only helpers shared by the gitlab tests: a self-removing temp dir and
// a fake custom executor written in bash that records what it was given.

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace gdt::gitlab::testing_support {

// A fresh directory under testing::TempDir(), removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/gdt-gitlab-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code error;
    if (!path_.empty()) std::filesystem::remove_all(path_, error);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteTextFile(const std::string& path, const std::string& text,
                          mode_t mode = 0644) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fake custom executor. Every call appends "<exec> <stage>" to
// $FAKE_REC/calls and saves its environment as $FAKE_REC/env.<n>.<exec>[.
// <stage>] and the response file's mode as $FAKE_REC/mode.<n>. Behaviour:
//   config:  prints $FAKE_CONFIG_JSON (or, with $FAKE_BUILDS_ROOT, a
//            builds_dir unique to the job), exits $FAKE_CONFIG_EXIT (default
//            0).
//   prepare: exits $FAKE_PREPARE_EXIT (default 0).
//   run:     when the stage is $FAKE_HANG_STAGE, notes SIGTERMs in
//            $FAKE_REC/signals, ignores them and never ends; otherwise runs
//            the script and maps a failure to BUILD_EXIT_CODE_FILE + 1.
//   cleanup: prints to stdout and stderr, exits 0.
inline std::string WriteFakeExecutor(const std::string& dir) {
  const std::string path = dir + "/fake-executor";
  WriteTextFile(path, R"(#!/usr/bin/env bash
set -u
kind="$1"; shift
stage=""
if [ "$kind" = run ]; then script="${@: -2:1}"; stage="${@: -1}"; fi
n=0
[ -f "$FAKE_REC/calls" ] && n=$(wc -l < "$FAKE_REC/calls")
echo "$kind $stage" >> "$FAKE_REC/calls"
env > "$FAKE_REC/env.$n.$kind${stage:+.$stage}"
stat -c %a "$JOB_RESPONSE_FILE" > "$FAKE_REC/mode.$n"
case "$kind" in
  config)
    if [ -n "${FAKE_CONFIG_JSON:-}" ]; then printf '%s\n' "$FAKE_CONFIG_JSON"; fi
    if [ -n "${FAKE_BUILDS_ROOT:-}" ]; then
      printf '{"builds_dir": "%s/%s"}\n' "$FAKE_BUILDS_ROOT" "$CUSTOM_ENV_CI_JOB_ID"
    fi
    echo "config on stderr" >&2
    exit "${FAKE_CONFIG_EXIT:-0}" ;;
  prepare)
    echo "preparing member"
    exit "${FAKE_PREPARE_EXIT:-0}" ;;
  cleanup)
    echo "cleanup stdout"
    echo "cleanup stderr" >&2
    exit 0 ;;
  run)
    stat -c %a "$script" > "$FAKE_REC/script_mode.$n"
    if [ "$stage" = "${FAKE_HANG_STAGE:-}" ]; then
      trap 'echo term >> "$FAKE_REC/signals"' TERM
      echo started > "$FAKE_REC/hang_started"
      while true; do sleep 0.05; done
    fi
    bash "$script"
    rc=$?
    if [ "$rc" -ne 0 ]; then
      echo "$rc" > "$BUILD_EXIT_CODE_FILE"
      exit "$BUILD_FAILURE_EXIT_CODE"
    fi
    exit 0 ;;
esac
exit 2
)",
                0755);
  return path;
}

}  // namespace gdt::gitlab::testing_support

#endif  // GDT_GITLAB_TESTING_SUPPORT_H_
