// Runs one of gdt's command-line tools as a user does, through /bin/sh, and
// keeps one of its output streams: for tests of a binary's output and exit
// code.
#ifndef GDT_TESTING_CLI_RUN_H_
#define GDT_TESTING_CLI_RUN_H_

#include <chrono>
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace gdt::test {

struct CliRun {
  int code = -1;       // The exit code; -1 when it did not exit in time.
  std::string output;  // What the command printed on the kept stream.
};

// Runs `binary` with `args` (each single-quoted; none may hold a quote);
// `stream` "stdout" or "stderr" is kept, the other discarded.
inline CliRun RunCli(const std::string& binary,
                     const std::vector<std::string>& args,
                     const std::string& stream,
                     std::chrono::seconds deadline = std::chrono::seconds(30)) {
  std::string command = binary;
  for (const std::string& arg : args) command += " '" + arg + "'";
  command += stream == "stdout" ? " 2>/dev/null" : " 2>&1 >/dev/null";
  CliRun run;
  absl::StatusOr<ExitStatus> status =
      RunCommand({"/bin/sh", "-c", command}, deadline, &run.output);
  if (status.ok()) run.code = status->code();
  return run;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_CLI_RUN_H_
