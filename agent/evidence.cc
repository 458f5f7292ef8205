#include "agent/evidence.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/subprocess.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;
constexpr std::chrono::seconds kCommandTimeout(10);
constexpr size_t kTailLines = 100;

absl::Status Write(const fs::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::trunc);
  out << content;
  out.close();
  if (!out) {
    return absl::InternalError(
        absl::StrCat("cannot write evidence file ", path.string()));
  }
  return absl::OkStatus();
}

// The first executable `name` on `path` (colon-separated), or "".
std::string FindOnPath(const std::string& name, const std::string& path) {
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct ListedProcess {
  std::string pid;
  std::string line;  // As ps printed it.
  bool python = false;
};

// The processes of `group`, as `ps` lists them in tree order.
std::vector<ListedProcess> ListGroup(pid_t group, std::string* error) {
  std::string output;
  absl::StatusOr<ExitStatus> status = RunCommand(
      {"ps", "-e", "--forest", "-o", "pid=,ppid=,pgid=,stat=,etime=,args="},
      kCommandTimeout, &output);
  if (!status.ok() || !status->success()) {
    *error = status.ok() ? output : status.status().ToString();
    return {};
  }
  std::vector<ListedProcess> processes;
  const std::string wanted = std::to_string(group);
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string pid, ppid, pgid;
    if (!(fields >> pid >> ppid >> pgid) || pgid != wanted) continue;
    ListedProcess process;
    process.pid = pid;
    process.line = line;
    // By its executable's name (/proc/PID/comm), not its arguments.
    std::ifstream comm("/proc/" + pid + "/comm");
    std::string name;
    std::getline(comm, name);
    process.python = name.rfind("python", 0) == 0;
    processes.push_back(std::move(process));
  }
  return processes;
}

}  // namespace

std::string LastLines(const std::string& text, size_t lines) {
  if (lines == 0 || text.empty()) return "";
  // `pos` is where the line being counted ends; a trailing newline ends the
  // last line rather than starting another.
  size_t pos = text.back() == '\n' ? text.size() - 1 : text.size();
  size_t count = 0;
  while (pos > 0) {
    const size_t newline = text.rfind('\n', pos - 1);
    if (newline == std::string::npos) return text;
    if (++count == lines) return text.substr(newline + 1);
    pos = newline;
  }
  return text;
}

absl::StatusOr<std::vector<std::string>> CollectEvidence(
    const EvidenceRequest& request) {
  std::error_code error;
  fs::create_directories(request.dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot create evidence dir ", request.dir, ": ", error.message()));
  }
  const fs::path dir(request.dir);
  std::vector<std::string> written;

  std::string ps_error;
  const std::vector<ListedProcess> processes =
      ListGroup(request.process_group, &ps_error);
  std::string tree = "PID PPID PGID STAT ELAPSED COMMAND\n";
  for (const ListedProcess& process : processes) {
    absl::StrAppend(&tree, process.line, "\n");
  }
  if (!ps_error.empty()) absl::StrAppend(&tree, "ps failed: ", ps_error, "\n");
  if (absl::Status status = Write(dir / "processes.txt", tree); !status.ok()) {
    return status;
  }
  written.push_back("processes.txt");

  if (absl::Status status = Write(dir / "last-lines.txt",
                                  LastLines(request.output_tail, kTailLines));
      !status.ok()) {
    return status;
  }
  written.push_back("last-lines.txt");

  const std::string py_spy = FindOnPath("py-spy", request.path);
  std::string stacks;
  if (py_spy.empty()) {
    stacks =
        "py-spy: not installed on this host, so no Python stacks (it is "
        "not in Debian; install it to get `py-spy dump` here)";
  } else {
    int dumped = 0;
    for (const ListedProcess& process : processes) {
      if (!process.python) continue;
      std::string output;
      absl::StatusOr<ExitStatus> status = RunCommand(
          {py_spy, "dump", "--pid", process.pid}, kCommandTimeout, &output);
      if (!status.ok()) output += "\n" + status.status().ToString();
      const std::string name = absl::StrCat("py-spy-", process.pid, ".txt");
      if (absl::Status wrote = Write(dir / name, output); !wrote.ok()) {
        return wrote;
      }
      written.push_back(name);
      ++dumped;
    }
    stacks = absl::StrCat("py-spy: ", py_spy, " dumped ", dumped,
                          " Python process(es)");
  }

  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  if (absl::Status status = Write(
          dir / "summary.txt",
          absl::StrCat("why: ", request.why, "\nwhen: ", when,
                       "\nprocess group: ", request.process_group,
                       "\nprocesses: ", processes.size(), "\n", stacks, "\n"));
      !status.ok()) {
    return status;
  }
  written.push_back("summary.txt");
  return written;
}

}  // namespace gdt::agent
