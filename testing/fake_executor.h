#ifndef GDT_TESTING_FAKE_EXECUTOR_H_
#define GDT_TESTING_FAKE_EXECUTOR_H_

// A fake custom executor written in bash that records what gitlab-runner (or
// its emulation) gave it. Test-only.

#include <string>

#include "testing/temp_dir.h"

namespace gdt::test {

// A fake custom executor. Every call appends "<exec> <stage>" to
// $FAKE_REC/calls and saves its environment (the exported variables, one
// NAME=value each) as $FAKE_REC/env.<n>.<exec>[.<stage>]; with
// $FAKE_RECORD_MODES set it also saves the response file's mode as
// $FAKE_REC/mode.<n> and a run's script's as $FAKE_REC/script_mode.<n>.
// Apart from those two `stat`s and a run's `bash "$script"`, it starts no
// process: the runner tests call it thousands of times. Behaviour:
//   config:  prints $FAKE_CONFIG_JSON (or, with $FAKE_BUILDS_ROOT, a
//            builds_dir unique to the job), exits $FAKE_CONFIG_EXIT (default
//            0).
//   prepare: exits $FAKE_PREPARE_EXIT (default 0).
//   run:     when the stage is $FAKE_HANG_STAGE, notes SIGTERMs in
//            $FAKE_REC/signals, ignores them and never ends; otherwise runs
//            the script and maps a failure to BUILD_EXIT_CODE_FILE + 1.
//   cleanup: prints to stdout and stderr, exits $FAKE_CLEANUP_EXIT (default
//            0).
inline std::string WriteFakeExecutor(const std::string& dir) {
  const std::string path = dir + "/fake-executor";
  WriteTextFile(path, R"sh(#!/bin/bash
set -u
kind="$1"; shift
stage=""
if [ "$kind" = run ]; then script="${@: -2:1}"; stage="${@: -1}"; fi
n=0
if [ -f "$FAKE_REC/calls" ]; then
  mapfile -t recorded < "$FAKE_REC/calls"
  n=${#recorded[@]}
fi
echo "$kind $stage" >> "$FAKE_REC/calls"
# The exported variables, as env(1) would list them, without starting it:
# every variable name by its first character, kept where it is exported
# (without -u: bash's own empty arrays count as unset).
set +u
for first in {A..Z} {a..z} _; do
  eval "names=(\"\${!$first@}\")"
  for name in "${names[@]}"; do
    eval "attributes=\${$name@a}"
    if [[ $attributes == *x* && -v $name ]]; then
      printf '%s=%s\n' "$name" "${!name}"
    fi
  done
done > "$FAKE_REC/env.$n.$kind${stage:+.$stage}"
set -u
if [ -n "${FAKE_RECORD_MODES:-}" ]; then
  stat -c %a "$JOB_RESPONSE_FILE" > "$FAKE_REC/mode.$n"
fi
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
    exit "${FAKE_CLEANUP_EXIT:-0}" ;;
  run)
    if [ -n "${FAKE_RECORD_MODES:-}" ]; then
      stat -c %a "$script" > "$FAKE_REC/script_mode.$n"
    fi
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
)sh",
                0755);
  return path;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_FAKE_EXECUTOR_H_
