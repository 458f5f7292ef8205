#include "agent/teardown_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gdt::agent {
namespace {

// Environments are read up to this size; the variables that matter are
// set by the launcher and come early.
constexpr size_t kMaxEnvironBytes = 1 << 20;

std::string ReadBounded(const std::string& path, size_t limit) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buffer[8192];
  while (text.size() < limit) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

}  // namespace

std::vector<GroupProcess> SnapshotProcessGroup(pid_t pgid) {
  std::vector<GroupProcess> group;
  std::error_code ignored;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc", ignored)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::string stat =
        ReadBounded(absl::StrCat("/proc/", pid, "/stat"), 4096);
    const size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    // Index 0 is field 3 (state), so field N is at index N - 3.
    const std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close_paren + 1), ' ', absl::SkipEmpty());
    if (fields.size() < 20 || fields[0] == "Z") continue;
    GroupProcess process;
    process.pid = pid;
    pid_t group_id = 0;
    if (!absl::SimpleAtoi(fields[5 - 3], &group_id) || group_id != pgid ||
        !absl::SimpleAtoi(fields[4 - 3], &process.parent) ||
        !absl::SimpleAtoi(fields[22 - 3], &process.start)) {
      continue;
    }
    const std::string environ =
        ReadBounded(absl::StrCat("/proc/", pid, "/environ"), kMaxEnvironBytes);
    const std::vector<std::string> variables =
        absl::StrSplit(environ, '\0', absl::SkipEmpty());
    for (const std::string& variable : variables) {
      if (variable.compare(0, 11, "LOCAL_RANK=") == 0) {
        process.has_local_rank = true;
      } else if (variable.compare(0, 5, "RANK=") == 0) {
        int rank = 0;
        if (absl::SimpleAtoi(variable.substr(5), &rank)) process.rank = rank;
      }
    }
    group.push_back(process);
  }
  return group;
}

TeardownWatch::TeardownWatch(std::chrono::milliseconds bound) : bound_(bound) {}

void TeardownWatch::OnOutput(TimePoint now) { last_activity_ = now; }

std::optional<std::string> TeardownWatch::Observe(
    const std::vector<GroupProcess>& group, TimePoint now) {
  std::set<pid_t> with_local_rank;
  for (const GroupProcess& process : group) {
    if (process.has_local_rank) with_local_rank.insert(process.pid);
  }
  std::map<Identity, Seen> alive;
  bool new_rank = false;
  bool new_other = false;
  for (const GroupProcess& process : group) {
    const Identity id{process.pid, process.start};
    Seen seen;
    seen.is_rank =
        process.has_local_rank && with_local_rank.count(process.parent) == 0;
    seen.rank = process.rank;
    auto before = alive_.find(id);
    if (before == alive_.end()) {
      (seen.is_rank ? new_rank : new_other) = true;
    } else if (before->second.is_rank) {
      // A rank stays one: the environment of a process that is exiting
      // (or between fork and exec) may not be readable.
      seen.is_rank = true;
      if (!seen.rank.has_value()) seen.rank = before->second.rank;
    }
    alive.emplace(id, seen);
  }
  int ended = 0;
  for (const auto& [id, seen] : alive_) {
    if (seen.is_rank && alive.count(id) == 0) ++ended;
  }
  alive_ = std::move(alive);

  if (new_rank) {
    // The launcher started (new) ranks: whatever ended before is history.
    ranks_ended_ = 0;
    first_rank_ended_.reset();
    disarmed_ = false;
    last_activity_ = now;
  }
  if (ended > 0 && !new_rank) {
    ranks_ended_ += ended;
    if (!first_rank_ended_.has_value()) first_rank_ended_ = now;
    last_activity_ = now;
  }
  if (!first_rank_ended_.has_value() || disarmed_) return std::nullopt;
  if (new_other && !new_rank) {
    // The script went on to other work after its ranks: not a teardown.
    disarmed_ = true;
    return std::nullopt;
  }
  if (now - last_activity_ < bound_) return std::nullopt;

  const auto stuck_for = std::chrono::duration_cast<std::chrono::seconds>(
      now - *first_rank_ended_);
  std::vector<std::string> stuck;
  for (const auto& [id, seen] : alive_) {
    if (!seen.is_rank) continue;
    stuck.push_back(seen.rank.has_value()
                        ? absl::StrCat(*seen.rank)
                        : absl::StrCat("(pid ", id.first, ")"));
  }
  if (stuck.empty()) {
    return absl::StrCat("all ", ranks_ended_,
                        " ranks finished; their launcher was still running ",
                        stuck_for.count(),
                        " s later (stuck in teardown); ended");
  }
  return absl::StrCat(stuck.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(stuck, ", "), " stuck in teardown for ",
                      stuck_for.count(), " s after finishing; ended");
}

}  // namespace gdt::agent
