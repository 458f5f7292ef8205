#include "common/open_files.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/subprocess.h"
#include "spdlog/spdlog.h"

namespace gdt {

void RaiseOpenFilesLimit(const std::string& who_connects) {
  // The first call's figure: a second daemon in one process (tests) must
  // not hand its children the raised limit.
  static const rlim_t started_with = [] {
    rlimit limit{};
    return getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 0;
  }();
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("event=open_files_limit_unknown error={}",
                 LogValue(std::strerror(errno)));
    return;
  }
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    } else {
      spdlog::warn("event=open_files_limit_not_raised soft={} hard={} error={}",
                   static_cast<uint64_t>(limit.rlim_cur),
                   static_cast<uint64_t>(limit.rlim_max),
                   LogValue(std::strerror(errno)));
    }
  }
  if (started_with != 0) Subprocess::SetChildOpenFilesLimit(started_with);
  if (limit.rlim_cur < kLowOpenFilesLimit) {
    spdlog::warn(
        "event=open_files_limit soft={} hard={} children={} reason={}",
        static_cast<uint64_t>(limit.rlim_cur),
        static_cast<uint64_t>(limit.rlim_max),
        static_cast<uint64_t>(started_with),
        LogValue(absl::StrCat(
            "below ", kLowOpenFilesLimit, ": ", who_connects,
            " can use up this process's descriptors with idle connections; "
            "raise the hard limit (LimitNOFILE= in the systemd unit)")));
  } else {
    spdlog::info("event=open_files_limit soft={} hard={} children={}",
                 static_cast<uint64_t>(limit.rlim_cur),
                 static_cast<uint64_t>(limit.rlim_max),
                 static_cast<uint64_t>(started_with));
  }
}

namespace {

// This process's open descriptors, or -1 when /proc cannot be read (errno
// says why).
int64_t CountOpenFiles() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count > 0 ? count - 1 : 0;  // Less the directory's own.
}

}  // namespace

std::string OpenFilesSummary() {
  rlimit limit{};
  const std::string of =
      getrlimit(RLIMIT_NOFILE, &limit) == 0
          ? absl::StrCat(" of ", static_cast<uint64_t>(limit.rlim_cur))
          : "";
  const int64_t count = CountOpenFiles();
  if (count < 0) {
    return absl::StrCat("open files: cannot count (", std::strerror(errno), ")",
                        of.empty() ? "" : absl::StrCat("; limit", of));
  }
  return absl::StrCat("open files ", count, of);
}

int64_t SpareOpenFiles() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  const int64_t count = CountOpenFiles();
  if (count < 0) return -1;
  if (limit.rlim_cur == RLIM_INFINITY) return INT64_MAX;
  return static_cast<int64_t>(limit.rlim_cur) - count;
}

}  // namespace gdt
