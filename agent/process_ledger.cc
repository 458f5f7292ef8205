#include "agent/process_ledger.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;

// The fields of /proc/<pid>/stat after the command name: index 0 is field 3
// (state), so field N is at index N - 3.
std::optional<std::vector<std::string>> StatFields(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
  if (fields.size() < 20) return std::nullopt;
  return fields;
}

struct GroupMember {
  pid_t pid = 0;
  uint64_t start = 0;
};

// Every live process whose process group is `pgid`.
std::vector<GroupMember> GroupMembers(pid_t pgid) {
  std::vector<GroupMember> members;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/proc", ignored)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::optional<std::vector<std::string>> fields = StatFields(pid);
    if (!fields.has_value() || (*fields)[0] == "Z") continue;
    pid_t group = 0;
    uint64_t start = 0;
    if (!absl::SimpleAtoi((*fields)[5 - 3], &group) || group != pgid ||
        !absl::SimpleAtoi((*fields)[22 - 3], &start)) {
      continue;
    }
    members.push_back(GroupMember{pid, start});
  }
  return members;
}

}  // namespace

std::optional<uint64_t> ProcessStartTime(pid_t pid) {
  std::optional<std::vector<std::string>> fields = StatFields(pid);
  uint64_t start = 0;
  if (!fields.has_value() || !absl::SimpleAtoi((*fields)[22 - 3], &start)) {
    return std::nullopt;
  }
  return start;
}

std::string ProcessLedger::PathOf(pid_t pgid) const {
  return (fs::path(dir_) / std::to_string(pgid)).string();
}

absl::Status ProcessLedger::Record(pid_t pgid) const {
  const std::optional<uint64_t> start = ProcessStartTime(pgid);
  if (!start.has_value()) {
    return absl::NotFoundError(absl::StrCat("process ", pgid, " is gone"));
  }
  std::error_code error;
  fs::create_directories(dir_, error);
  return WriteFileAtomically(PathOf(pgid), absl::StrCat(*start, "\n"));
}

void ProcessLedger::Forget(pid_t pgid) const {
  std::error_code ignored;
  fs::remove(PathOf(pgid), ignored);
}

std::vector<ProcessLedger::Reaped> ProcessLedger::ReapLeftovers(
    std::chrono::milliseconds grace) const {
  std::vector<Reaped> reaped;
  std::error_code ignored;
  std::vector<std::pair<pid_t, uint64_t>> recorded;
  for (const auto& entry : fs::directory_iterator(dir_, ignored)) {
    pid_t pgid = 0;
    uint64_t start = 0;
    std::ifstream in(entry.path());
    std::string line;
    std::getline(in, line);
    if (absl::SimpleAtoi(entry.path().filename().string(), &pgid) && pgid > 1 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &start)) {
      recorded.emplace_back(pgid, start);
    }
    fs::remove(entry.path(), ignored);
  }
  for (const auto& [pgid, start] : recorded) {
    const std::vector<GroupMember> members = GroupMembers(pgid);
    if (members.empty()) continue;
    bool ours = true;
    for (const GroupMember& member : members) {
      if (member.pid == pgid ? member.start != start : member.start < start) {
        ours = false;
      }
    }
    if (!ours) continue;
    Reaped group{pgid, members.size(), false};
    kill(-pgid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!GroupMembers(pgid).empty() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!GroupMembers(pgid).empty()) {
      kill(-pgid, SIGKILL);
      group.killed = true;
    }
    reaped.push_back(group);
  }
  return reaped;
}

}  // namespace gdt::agent
