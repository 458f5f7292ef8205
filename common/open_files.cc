#include "common/open_files.h"

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

}  // namespace gdt
