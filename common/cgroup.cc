#include "common/cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace gdt {
namespace {

namespace fs = std::filesystem;

// How often Destroy() looks whether the cgroup is empty yet.
constexpr std::chrono::milliseconds kPoll(10);

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  if (!file) return false;
  file << text;
  file.flush();
  return static_cast<bool>(file);
}

std::vector<pid_t> PidsIn(const std::string& dir) {
  std::vector<pid_t> pids;
  for (absl::string_view line :
       absl::StrSplit(ReadAll(dir + "/cgroup.procs"), '\n')) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

}  // namespace

absl::StatusOr<std::string> OwnCgroupDir() {
  std::string own;
  for (absl::string_view line :
       absl::StrSplit(ReadAll("/proc/self/cgroup"), '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) own = std::string(line);
  }
  if (own.empty()) {
    return absl::NotFoundError("this process is in no cgroup v2 hierarchy");
  }
  for (absl::string_view line :
       absl::StrSplit(ReadAll("/proc/self/mountinfo"), '\n')) {
    const std::vector<std::string> fields = absl::StrSplit(line, ' ');
    // id parent dev root mountpoint options [optional...] - type source ...
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash + 1 >= fields.size() || fields[dash + 1] != "cgroup2" ||
        fields.size() < 5) {
      continue;
    }
    const std::string& root = fields[3];
    absl::string_view relative = own;
    if (root != "/" && !absl::ConsumePrefix(&relative, root)) continue;
    if (root == "/" && relative == "/") relative = "";
    return fields[4] + std::string(relative);
  }
  return absl::NotFoundError("no cgroup2 file system is mounted");
}

absl::StatusOr<std::unique_ptr<CgroupTree>> CgroupTree::Open(
    const std::string& parent) {
  std::error_code error;
  fs::create_directories(parent, error);
  const std::string probe = parent + "/.probe";
  if (!error) fs::create_directory(probe, error);
  if (error || access((probe + "/cgroup.procs").c_str(), W_OK) != 0) {
    const std::string why =
        error ? error.message()
              : absl::StrCat("cannot write ", probe,
                             "/cgroup.procs: ", std::strerror(errno));
    rmdir(probe.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup v2 is not writable at ", parent, ": ", why));
  }
  rmdir(probe.c_str());
  return std::unique_ptr<CgroupTree>(new CgroupTree(parent));
}

std::string CgroupTree::PathOf(const std::string& name) const {
  return absl::StrCat(parent_, "/", name);
}

absl::Status CgroupTree::EnableController(const std::string& controller) const {
  auto has = [&controller](const std::string& file) {
    for (absl::string_view word : absl::StrSplit(
             ReadAll(file), absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      if (word == controller) return true;
    }
    return false;
  };
  // The parent and its ancestors up to the nearest that has the controller
  // (each level's cgroup.controllers lists what its parent passes on).
  std::vector<fs::path> levels;
  bool found = false;
  std::string top;
  for (fs::path level = fs::path(parent_).lexically_normal();;
       level = level.parent_path()) {
    const std::string controllers = (level / "cgroup.controllers").string();
    if (access(controllers.c_str(), R_OK) != 0) break;  // Left the mount.
    top = controllers;
    levels.push_back(level);
    if (has(controllers)) {
      found = true;
      break;
    }
    if (level == level.parent_path()) break;
  }
  if (!found) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", controller,
        " controller is not available in this cgroup v2 hierarchy (",
        top.empty() ? parent_ : top,
        " does not list it; is it bound to a cgroup v1 hierarchy?)"));
  }
  // From the top down: each level passes it on to the next.
  for (auto level = levels.rbegin(); level != levels.rend(); ++level) {
    const std::string control = (*level / "cgroup.subtree_control").string();
    if (has(control)) continue;
    if (!WriteText(control, "+" + controller)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot enable the ", controller, " controller in ",
                       control, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status CgroupTree::LimitPids(uint64_t max) {
  pids_max_ = 0;
  if (max == 0) return absl::OkStatus();
  GDT_RETURN_IF_ERROR(EnableController("pids"));
  pids_max_ = max;
  return absl::OkStatus();
}

absl::Status CgroupTree::LimitMemory(uint64_t max) {
  memory_max_ = 0;
  if (max == 0) return absl::OkStatus();
  GDT_RETURN_IF_ERROR(EnableController("memory"));
  memory_max_ = max;
  return absl::OkStatus();
}

absl::StatusOr<std::string> CgroupTree::Create(const std::string& name) const {
  const std::string dir = PathOf(name);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create cgroup ", dir, ": ", std::strerror(errno)));
  }
  if (pids_max_ > 0 && !WriteText(dir + "/pids.max", absl::StrCat(pids_max_))) {
    return absl::InternalError(absl::StrCat(
        "cannot write ", dir, "/pids.max: ", std::strerror(errno)));
  }
  if (memory_max_ > 0) {
    for (const auto& [file, text] :
         {std::pair<std::string, std::string>{"memory.max",
                                              absl::StrCat(memory_max_)},
          {"memory.oom.group", "1"}}) {
      if (!WriteText(dir + "/" + file, text)) {
        return absl::InternalError(absl::StrCat("cannot write ", dir, "/", file,
                                                ": ", std::strerror(errno)));
      }
    }
    // Absent where the kernel has no swap accounting: nothing to dodge.
    if (access((dir + "/memory.swap.max").c_str(), F_OK) == 0 &&
        !WriteText(dir + "/memory.swap.max", "0")) {
      return absl::InternalError(absl::StrCat(
          "cannot write ", dir, "/memory.swap.max: ", std::strerror(errno)));
    }
  }
  return dir;
}

absl::StatusOr<size_t> CgroupTree::Destroy(
    const std::string& name,
    std::chrono::steady_clock::time_point deadline) const {
  const std::string dir = PathOf(name);
  if (access(dir.c_str(), F_OK) != 0) return 0;
  const size_t found = PidsIn(dir).size();
  // cgroup.kill reaches every process, including ones forked while it runs;
  // older kernels lack it, and SIGKILL to each pid until none is left does
  // the same in rounds.
  const bool kill_file = WriteText(dir + "/cgroup.kill", "1");
  while (true) {
    const std::vector<pid_t> pids = PidsIn(dir);
    if (pids.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "cgroup ", dir, " still holds ", pids.size(), " processes (e.g. pid ",
          pids.front(), ") after SIGKILL"));
    }
    if (!kill_file) {
      for (pid_t pid : pids) kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(kPoll);
  }
  // A cgroup whose last process just died may still count it as populated
  // for a moment; rmdir then answers EBUSY.
  while (rmdir(dir.c_str()) != 0 && errno == EBUSY &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(kPoll);
  }
  return found;
}

std::vector<std::string> CgroupTree::Children() const {
  std::vector<std::string> names;
  std::error_code error;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(parent_, error)) {
    if (entry.is_directory(error) && !error) {
      names.push_back(entry.path().filename().string());
    }
  }
  return names;
}

void CgroupTree::RemoveParent() const { rmdir(parent_.c_str()); }

}  // namespace gdt
