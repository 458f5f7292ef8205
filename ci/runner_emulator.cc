#include "ci/runner_emulator.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ci/dotenv.h"
#include "ci/go_duration.h"
#include "ci/go_quote.h"
#include "ci/log_masking.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/secret.h"
#include "common/sha256.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace gdt::ci {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;
using TimePoint = SteadyClock::time_point;

constexpr milliseconds kDefaultExecTimeout{3600 * 1000};
constexpr milliseconds kDefaultGracefulKill{600 * 1000};
constexpr milliseconds kDefaultForceKill{10 * 1000};
constexpr int64_t kDefaultJobTimeoutSeconds = 7200;
constexpr milliseconds kDefaultAfterScriptTimeout{5 * 60 * 1000};
constexpr int kPreparationAttempts = 3;
constexpr int kBuildFailureExitCode = 1;
constexpr int kSystemFailureExitCode = 2;
// The runner release whose behaviour run-local follows
// (docs/gitlab-runner-protocol.md); the revision says it is not a build of
// gitlab-runner.
constexpr char kRunnerVersion[] = "19.3.0";
constexpr char kRunnerRevision[] = "gdtlocal";
// The runner's operating system and architecture as Go names them: those
// of a runner built for the machine run-local was built for.
constexpr char kRunnerArch[] =
#if defined(__x86_64__)
    "linux/amd64";
#elif defined(__aarch64__)
    "linux/arm64";
#elif defined(__i386__)
    "linux/386";
#elif defined(__arm__)
    "linux/arm";
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
    "linux/ppc64le";
#elif defined(__s390x__)
    "linux/s390x";
#elif defined(__riscv) && __riscv_xlen == 64
    "linux/riscv64";
#else
    "linux/unknown";
#endif

// The runner's feature flags, in its order, with their defaults: every job
// gets each one as a variable.
struct FeatureFlag {
  const char* name;
  bool default_value;
};
constexpr FeatureFlag kFeatureFlags[] = {
    {"FF_TEST_FEATURE", false},
    {"FF_NETWORK_PER_BUILD", false},
    {"FF_USE_LEGACY_KUBERNETES_EXECUTION_STRATEGY", false},
    {"FF_USE_DIRECT_DOWNLOAD", true},
    {"FF_USE_FASTZIP", false},
    {"FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR", false},
    {"FF_ENABLE_BASH_EXIT_CODE_CHECK", false},
    {"FF_USE_WINDOWS_LEGACY_PROCESS_STRATEGY", false},
    {"FF_USE_LEGACY_BASH_EVAL", false},
    {"FF_USE_POWERSHELL_PATH_RESOLVER", false},
    {"FF_USE_DYNAMIC_TRACE_FORCE_SEND_INTERVAL", false},
    {"FF_SCRIPT_SECTIONS", false},
    {"FF_ENABLE_JOB_CLEANUP", false},
    {"FF_KUBERNETES_HONOR_ENTRYPOINT", false},
    {"FF_POSIXLY_CORRECT_ESCAPES", false},
    {"FF_RESOLVE_FULL_TLS_CHAIN", false},
    {"FF_DISABLE_POWERSHELL_STDIN", false},
    {"FF_USE_POD_ACTIVE_DEADLINE_SECONDS", true},
    {"FF_USE_ADVANCED_POD_SPEC_CONFIGURATION", false},
    {"FF_SECRET_RESOLVING_FAILS_IF_MISSING", true},
    {"FF_PRINT_POD_EVENTS", false},
    {"FF_USE_GIT_BUNDLE_URIS", true},
    {"FF_USE_GIT_NATIVE_CLONE", false},
    {"FF_USE_DUMB_INIT_WITH_KUBERNETES_EXECUTOR", false},
    {"FF_USE_INIT_WITH_DOCKER_EXECUTOR", false},
    {"FF_LOG_IMAGES_CONFIGURED_FOR_JOB", false},
    {"FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO", true},
    {"FF_CLEAN_UP_FAILED_CACHE_EXTRACT", false},
    {"FF_USE_WINDOWS_JOB_OBJECT", false},
    {"FF_TIMESTAMPS", true},
    {"FF_DISABLE_AUTOMATIC_TOKEN_ROTATION", false},
    {"FF_USE_LEGACY_GCS_CACHE_ADAPTER", false},
    {"FF_DISABLE_UMASK_FOR_KUBERNETES_EXECUTOR", false},
    {"FF_USE_LEGACY_S3_CACHE_ADAPTER", false},
    {"FF_GIT_URLS_WITHOUT_TOKENS", false},
    {"FF_WAIT_FOR_POD_TO_BE_REACHABLE", false},
    {"FF_MASK_ALL_DEFAULT_TOKENS", true},
    {"FF_EXPORT_HIGH_CARDINALITY_METRICS", false},
    {"FF_USE_FLEETING_ACQUIRE_HEARTBEATS", false},
    {"FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY", true},
    {"FF_USE_ADAPTIVE_REQUEST_CONCURRENCY", true},
    {"FF_USE_GITALY_CORRELATION_ID", true},
    {"FF_USE_GIT_PROACTIVE_AUTH", false},
    {"FF_HASH_CACHE_KEYS", false},
    {"FF_ENABLE_JOB_INPUTS_INTERPOLATION", true},
    {"FF_USE_JOB_ROUTER", false},
    {"FF_SCRIPT_TO_STEP_MIGRATION", false},
    {"FF_USE_PARALLEL_CACHE_TRANSFER", false},
    {"FF_USE_PARALLEL_ARTIFACT_TRANSFER", false},
    {"FF_CONCRETE", false},
    {"FF_SUSPENDABLE_ENVIRONMENTS", false},
    {"FF_USE_NATIVE_CONTAINER_STOP", false},
};

bool IsFeatureFlag(std::string_view key) {
  return std::any_of(std::begin(kFeatureFlags), std::end(kFeatureFlags),
                     [key](const FeatureFlag& f) { return key == f.name; });
}

// Go's strconv.ParseBool.
std::optional<bool> ParseGoBool(std::string_view text) {
  if (text == "1" || text == "t" || text == "T" || text == "true" ||
      text == "TRUE" || text == "True") {
    return true;
  }
  if (text == "0" || text == "f" || text == "F" || text == "false" ||
      text == "FALSE" || text == "False") {
    return false;
  }
  return std::nullopt;
}

milliseconds OrDefault(milliseconds value, milliseconds fallback) {
  return value.count() > 0 ? value : fallback;
}

TimePoint Earlier(TimePoint a, TimePoint b) { return std::min(a, b); }

// A duration the way gitlab-runner prints one (Go's time.Duration):
// "90s" is "1m30s", "1.5s" stays "1.5s".
std::string FormatSeconds(SteadyClock::duration d) {
  const int64_t ms = std::chrono::duration_cast<milliseconds>(d).count();
  // Go's Duration.String: under a second in milliseconds ("250ms").
  if (ms > 0 && ms < 1000) return absl::StrCat(ms, "ms");
  const int64_t hours = ms / 3600000;
  const int64_t minutes = (ms / 60000) % 60;
  const int64_t millis = ms % 60000;
  std::string out;
  if (hours > 0) absl::StrAppend(&out, hours, "h");
  if (hours > 0 || minutes > 0) absl::StrAppend(&out, minutes, "m");
  if (millis % 1000 == 0) {
    absl::StrAppend(&out, millis / 1000, "s");
  } else {
    std::string frac = absl::StrFormat("%03d", millis % 1000);
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    absl::StrAppend(&out, millis / 1000, ".", frac, "s");
  }
  return out;
}

// Splits a byte stream into complete lines.
class LineSplitter {
 public:
  template <typename Sink>
  void Feed(std::string_view data, const Sink& sink) {
    buffer_.append(data.data(), data.size());
    size_t start = 0;
    for (size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos;
         start = nl + 1) {
      sink(std::string_view(buffer_).substr(start, nl - start));
    }
    buffer_.erase(0, start);
  }
  template <typename Sink>
  void Flush(const Sink& sink) {
    if (!buffer_.empty()) sink(std::string_view(buffer_));
    buffer_.clear();
  }

 private:
  std::string buffer_;
};

struct Variable {
  std::string key;
  std::string value;
  bool file = false;
  bool raw = false;  // Kept as it is by the expansion.
};

// Go's os.Expand: the name after '$', as getShellName reads it. Returns the
// name and how many bytes after the '$' it spans; an empty name with a
// non-zero width is bad syntax, eaten whole.
std::pair<std::string_view, size_t> ShellNameAt(std::string_view s) {
  const auto special = [](char c) {
    return std::string_view("*#$@!?-0123456789").find(c) !=
           std::string_view::npos;
  };
  if (s[0] == '{') {
    if (s.size() > 2 && special(s[1]) && s[2] == '}')
      return {s.substr(1, 1), 3};
    for (size_t i = 1; i < s.size(); ++i) {
      if (s[i] == '}') {
        if (i == 1) return {"", 2};  // "${}"
        return {s.substr(1, i - 1), i + 1};
      }
    }
    return {"", 1};  // "${" never closed: only "${" goes.
  }
  if (special(s[0])) return {s.substr(0, 1), 1};
  size_t i = 0;
  while (i < s.size() &&
         (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) {
    ++i;
  }
  return {s.substr(0, i), i};
}

// The runner's Variables.Get: the last definition wins; a file variable
// stands for the path of its file under RUNNER_TEMP_PROJECT_DIR.
std::string LookupVariable(const std::vector<Variable>& vars,
                           std::string_view key) {
  if (key == "$") return "$";
  if (key.size() == 1 && std::string_view("*#@!?0123456789").find(key[0]) !=
                             std::string_view::npos) {
    return "";
  }
  for (auto it = vars.rbegin(); it != vars.rend(); ++it) {
    if (it->key != key) continue;
    if (!it->file) return it->value;
    std::string dir;
    for (auto d = vars.rbegin(); d != vars.rend(); ++d) {
      if (d->key == "RUNNER_TEMP_PROJECT_DIR") {
        dir = d->value;
        break;
      }
    }
    return dir.empty() ? it->key : absl::StrCat(dir, "/", it->key);
  }
  return "";
}

bool IsShellName(std::string_view key) {
  if (key.empty() || std::isdigit(static_cast<unsigned char>(key[0]))) {
    return false;
  }
  return std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Why an exec was stopped by the emulator.
enum class StopReason { kNone, kDeadline, kPrepareDeadline, kCancel };

// What became of one exec.
struct ExecOutcome {
  ExitStatus exit;
  StopReason stopped = StopReason::kNone;
  std::string error;  // Could not start it, or could not kill it.
};

// How a stage or preparation step failed (docs/gitlab-runner-protocol.md).
enum class FailureKind {
  kNone,
  kBuild,    // BuildError: script_failure with `exit_code`.
  kSystem,   // runner_system_failure; retried in preparation.
  kConfig,   // ConfigurationError: no retry.
  kTimeout,  // The job's deadline (or a script timeout).
  kCancel,   // Cancelled from outside.
};

struct Failure {
  FailureKind kind = FailureKind::kNone;
  int exit_code = 0;
  std::string message;
  bool ok() const { return kind == FailureKind::kNone; }
};

// The runner's check of a cache entry's (expanded) policy: empty, pull-push,
// pull or push; anything else fails the job as a system failure.
Failure CheckCachePolicy(const std::string& policy,
                         const std::string& human_key) {
  if (policy.empty() || policy == "pull-push" || policy == "pull" ||
      policy == "push") {
    return {};
  }
  return {FailureKind::kSystem, 0,
          absl::StrCat("unknown cache policy ", policy, " for ", human_key)};
}

// The first line as Go's bufio.ScanLines gives it: up to '\n', one '\r'
// before it (or at the end of the file) dropped.
std::string ReadFirstLine(const std::string& path, bool* exists) {
  std::ifstream in(path);
  *exists = static_cast<bool>(in);
  std::string line;
  if (in) std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// Go's strconv.Atoi: an optional sign, then decimal digits only, in range.
std::optional<int64_t> ParseGoInt(std::string_view text) {
  std::string_view digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    digits.remove_prefix(1);
  }
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return std::nullopt;
  }
  // from_chars takes a '-' but no '+'.
  const std::string number =
      std::string(negative ? "-" : "") + std::string(digits);
  int64_t value = 0;
  const auto [end, ec] =
      std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size()) {
    return std::nullopt;
  }
  return value;
}

absl::Status WriteFile(const std::string& path, std::string_view content,
                       mode_t mode) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return absl::InternalError(
          absl::StrCat("cannot write ", path, ": ", std::strerror(error)));
    }
    done += static_cast<size_t>(n);
  }
  fchmod(fd, mode);  // Not subject to the umask.
  close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeTempDir(const std::string& pattern) {
  std::string path = pattern;
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create ", pattern, ": ", std::strerror(errno)));
  }
  return path;
}

// Finishes the kill sequence of an exec the runner stopped waiting for, like
// the runner's killer goroutine that outlives WaitForBuildFinishTimeout.
// Waits for `child` until `until`, in short slices: SIGKILLs its group
// once `force_kill()` says so. Returns its status, or nothing at `until`.
std::optional<ExitStatus> WaitForcible(
    Subprocess& child, TimePoint until, const std::function<bool()>& force_kill,
    const Subprocess::OutputCallback& on_output) {
  bool killed = false;
  while (true) {
    if (!killed && force_kill()) {
      killed = true;
      child.SignalGroup(SIGKILL);
    }
    const TimePoint slice =
        Earlier(until, SteadyClock::now() + milliseconds(20));
    std::optional<ExitStatus> status = child.WaitUntil(slice, on_output);
    if (status.has_value() || SteadyClock::now() >= until) return status;
  }
}

void FinishKillInBackground(std::unique_ptr<Subprocess> child,
                            TimePoint sigkill_at, milliseconds force,
                            std::function<bool()> force_kill) {
  std::thread([child = std::move(child), sigkill_at, force,
               force_kill = std::move(force_kill)]() mutable {
    if (!WaitForcible(*child, sigkill_at, force_kill, nullptr).has_value()) {
      child->SignalGroup(SIGKILL);
      if (!child->WaitUntil(SteadyClock::now() + force).has_value()) {
        spdlog::warn("event=kill_failed pid={} reason={}", child->pid(),
                     LogValue("likely process is dormant"));
      }
    }
    child.reset();  // Reaps it (blocks for a dormant process).
  }).detach();
}

// The system ID a runner on this machine gives itself: "s_" and the first
// 12 hex digits of the HMAC-SHA256 of "gitlab-runner" under the machine ID
// (D-Bus's file first, then systemd's); without one, "r_" and 12 random
// letters and digits.
std::string MachineSystemId() {
  for (const char* path : {"/var/lib/dbus/machine-id", "/etc/machine-id"}) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string id(absl::StripAsciiWhitespace(text.str()));
    if (in && !id.empty()) {
      return "s_" + HmacSha256Hex(id, "gitlab-runner").substr(0, 12);
    }
  }
  static constexpr char kCharset[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "r_";
  const absl::StatusOr<std::string> random = NewSecretToken();
  for (size_t i = 0; i < 12; ++i) {
    const unsigned value =
        random.ok() ? std::stoul(random->substr(2 * i, 2), nullptr, 16) : i;
    id.push_back(kCharset[value % (sizeof(kCharset) - 1)]);
  }
  return id;
}

// A URL as the runner's git helpers take it apart (Go's net/url, for the
// plain URLs GitLab and config.toml hold): the scheme (lower case), the
// user info, the host (with its port) and the rest (path, query, fragment).
struct GitUrl {
  std::string scheme;
  std::optional<std::string> user;
  std::string host;
  std::string rest;

  static GitUrl Parse(std::string_view text) {
    GitUrl url;
    const size_t colon = text.find("://");
    if (colon == std::string_view::npos) {
      url.rest = std::string(text);
      return url;
    }
    url.scheme = absl::AsciiStrToLower(std::string(text.substr(0, colon)));
    std::string_view after = text.substr(colon + 3);
    const size_t end = std::min(after.find_first_of("/?#"), after.size());
    std::string_view authority = after.substr(0, end);
    const size_t at = authority.rfind('@');
    if (at != std::string_view::npos) {
      url.user = std::string(authority.substr(0, at));
      authority.remove_prefix(at + 1);
    }
    url.host = std::string(authority);
    url.rest = std::string(after.substr(end));
    return url;
  }
  bool IsHttp() const { return scheme == "http" || scheme == "https"; }
  std::string String() const {
    if (scheme.empty()) return rest;
    return absl::StrCat(scheme, "://", user ? *user + "@" : "", host, rest);
  }
  // Without the '/'s at its end, as the runner writes base URLs.
  std::string Trimmed() const {
    std::string text = String();
    while (!text.empty() && text.back() == '/') text.pop_back();
    return text;
  }
};

// The file GIT_CONFIG_GLOBAL names with FF_GIT_URLS_WITHOUT_TOKENS.
std::string GlobalGitConfigSeedFile(const std::string& project_dir) {
  return project_dir + ".tmp/.glr.gconf";
}

// Go's regexp.QuoteMeta.
std::string QuoteMeta(std::string_view text) {
  std::string quoted;
  for (char c : text) {
    if (std::string_view("\\.+*?()|[]{}^$").find(c) != std::string_view::npos) {
      quoted += '\\';
    }
    quoted += c;
  }
  return quoted;
}

// The runner's cache key sanitizer (cachekey.Sanitize): %2f, %2e and '\\'
// read as '/' and '.', the path cleaned below '/', white space at the end
// of the last parts and empty last parts dropped. nullopt when nothing is
// left of a key that was not empty.
std::optional<std::string> SanitizeCacheKey(const std::string& key) {
  if (key.empty()) return std::string();
  std::string normal;
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] == '%' && i + 2 < key.size()) {
      const char a = key[i + 1];
      const char b = static_cast<char>(
          std::tolower(static_cast<unsigned char>(key[i + 2])));
      if (a == '2' && (b == 'f' || b == 'e')) {
        normal += b == 'f' ? '/' : '.';
        i += 2;
        continue;
      }
    }
    normal += key[i] == '\\' ? '/' : key[i];
  }
  // Go's path.Clean of "/" + normal.
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(normal, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  while (!parts.empty()) {
    std::string& last = parts.back();
    while (!last.empty() &&
           absl::ascii_isspace(static_cast<unsigned char>(last.back()))) {
      last.pop_back();
    }
    if (!last.empty()) break;
    parts.pop_back();
  }
  if (parts.empty()) return std::nullopt;
  return absl::StrJoin(parts, "/");
}
}  // namespace

std::string_view JobStatusName(JobStatus status) {
  switch (status) {
    case JobStatus::kSuccess:
      return "success";
    case JobStatus::kCanceled:
      return "canceled";
    case JobStatus::kFailed:
      break;
  }
  return "failed";
}

std::string ExpandVariableValue(
    std::string_view value,
    const std::function<std::string(std::string_view name)>& lookup) {
  std::string out;
  size_t copied = 0;  // value[copied, j) is still to be copied.
  for (size_t j = 0; j + 1 < value.size(); ++j) {
    if (value[j] != '$') continue;
    out.append(value.substr(copied, j - copied));
    const auto [name, width] = ShellNameAt(value.substr(j + 1));
    if (name.empty() && width == 0) {
      out.push_back('$');  // "$" before no name stays.
    } else if (!name.empty()) {
      out.append(lookup(name));
    }
    j += width;
    copied = j + 1;
  }
  if (copied == 0) return std::string(value);
  if (copied < value.size()) out.append(value.substr(copied));
  return out;
}

std::string SectionMarker(std::string_view kind, std::string_view name) {
  const int64_t now = SystemClock().UnixMillis() / 1000;
  return absl::StrCat("section_", std::string(kind), ":", now, ":",
                      std::string(name), "\r\x1b[0K");
}

std::string_view WithoutSectionMarkers(std::string_view line) {
  constexpr std::string_view kClear = "\r\x1b[0K";
  const auto starts_with = [&line](std::string_view prefix) {
    return line.substr(0, prefix.size()) == prefix;
  };
  while (starts_with("section_start:") || starts_with("section_end:")) {
    const size_t end = line.find(kClear);
    if (end == std::string_view::npos) break;
    line.remove_prefix(end + kClear.size());
  }
  return line;
}

std::string ShellQuote(std::string_view text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('\'');
  return quoted;
}

// The shell line that warns of an artifact pattern outside the project
// directory (empty, absolute or with ".."), which is skipped; "" for a
// pattern inside it.
std::string OutsideProjectWarning(const std::string& pattern) {
  if (!pattern.empty() && pattern[0] != '/' &&
      pattern.find("..") == std::string::npos) {
    return "";
  }
  return absl::StrCat(
      "echo ",
      ShellQuote(absl::StrCat("WARNING: ", pattern,
                              ": not a path inside the project directory")),
      "\n");
}

// Shell lines that run `action` on each file $f the artifact pattern
// matches (in the project directory) for which `test` holds, and say
// whether any did, as the runner's artifact upload does; a pattern outside
// the project only gets its warning.
std::string ForEachMatch(const std::string& pattern, const char* test,
                         const char* action) {
  if (std::string warning = OutsideProjectWarning(pattern); !warning.empty()) {
    return warning;
  }
  return absl::StrCat(
      "p=", ShellQuote(pattern), "\n", "found=\n", "for f in $p; do\n", "  if ",
      test, "; then ", action, "; found=1; fi\n", "done\n",
      "if [ -n \"$found\" ]; then echo \"$p: found matching files\"; "
      "else echo \"WARNING: $p: no matching files\"; fi\n");
}

// The state of one Run(): one job, several preparation attempts.
class RunnerEmulator::Job {
 public:
  Job(const Options& options, const std::atomic<int>& cancel,
      std::shared_ptr<const std::atomic<int>> force_kill)
      : options_(options),
        config_(options.config),
        cancel_(cancel),
        force_kill_(std::move(force_kill)) {
    config_.config_exec_timeout =
        OrDefault(config_.config_exec_timeout, kDefaultExecTimeout);
    config_.prepare_exec_timeout =
        OrDefault(config_.prepare_exec_timeout, kDefaultExecTimeout);
    config_.cleanup_exec_timeout =
        OrDefault(config_.cleanup_exec_timeout, kDefaultExecTimeout);
    config_.graceful_kill_timeout =
        OrDefault(config_.graceful_kill_timeout, kDefaultGracefulKill);
    config_.force_kill_timeout =
        OrDefault(config_.force_kill_timeout, kDefaultForceKill);
    runner_env_ = options.runner_environment.has_value()
                      ? *options.runner_environment
                      : CurrentEnvironment();
    job_timeout_seconds_ = options.job.timeout_seconds > 0
                               ? options.job.timeout_seconds
                               : kDefaultJobTimeoutSeconds;
  }

  JobResult Run();

 private:
  // Logging. Every job log line goes through the runner's masking
  // (ci/log_masking.h) first. The log stops at output_limit, as the
  // runner's trace buffer does: the line that reaches it is cut (at a
  // character boundary), the log says so, and nothing more is kept.
  void Log(std::string_view line) {
    if (!options_.job_log || log_full_) return;
    std::string text =
        masker_.has_value() ? masker_->Mask(line) : std::string(line);
    if (!section_end_.empty()) {
      text.insert(0, section_end_);
      section_end_.clear();
    }
    const int64_t limit = config_.output_limit_bytes;
    const int64_t size = static_cast<int64_t>(text.size()) + 1;
    if (limit > 0 && log_bytes_ + size >= limit) {
      size_t keep =
          static_cast<size_t>(std::max<int64_t>(0, limit - log_bytes_));
      keep = std::min(keep, text.size());
      // Not in the middle of a UTF-8 sequence.
      while (keep > 0 && keep < text.size() &&
             (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) {
        --keep;
      }
      if (keep > 0) options_.job_log(text.substr(0, keep));
      options_.job_log(
          absl::StrCat("Job's log exceeded limit of ", limit, " bytes."));
      options_.job_log(
          "Job execution will continue but no more output will be "
          "collected.");
      log_full_ = true;
      return;
    }
    log_bytes_ += size;
    options_.job_log(text);
  }
  // GitLab's collapsible sections, as the runner writes them around each
  // stage it runs (the payload's features.trace_sections is set): the
  // start marker leads the stage's header line, and the end marker, written
  // once the stage ran, leads the next line, as the runner's raw writes
  // do. A section still open when another starts, or at the job's last
  // line, ends there.
  void StartSection(std::string_view name, std::string_view header) {
    EndSection();
    open_section_ = std::string(name);
    Log(SectionMarker("start", open_section_) + std::string(header));
  }
  void EndSection() {
    if (open_section_.empty()) return;
    section_end_ += SectionMarker("end", open_section_);
    open_section_.clear();
  }
  // A [[runners]] stage timeout as the runner takes it: unset (0), or
  // longer than the job timeout, it is the job timeout, the latter with a
  // warning in the runner's own log (not the job's).
  SteadyClock::duration WithinJobTimeout(std::string_view setting,
                                         SteadyClock::duration configured) {
    const SteadyClock::duration job_timeout = job_deadline_ - start_;
    if (configured <= SteadyClock::duration::zero()) return job_timeout;
    if (configured <= job_timeout) return configured;
    Diagnose("warn",
             absl::StrCat(std::string(setting), " (", FormatSeconds(configured),
                          ") exceeds job timeout (", FormatSeconds(job_timeout),
                          "); using job timeout"));
    return job_timeout;
  }

  void Diagnose(std::string_view level, std::string_view line) {
    if (options_.diagnostics) {
      options_.diagnostics(level, line);
    } else if (level == "warn") {
      spdlog::warn("event=job_diagnostic job={} detail={}", options_.job.id,
                   LogValue(line));
    } else {
      spdlog::debug("event=job_diagnostic job={} detail={}", options_.job.id,
                    LogValue(line));
    }
  }

  // Cancellation and deadlines.
  std::optional<CancelMode> CancelRequested() const {
    const int mode = cancel_.load();
    if (mode >= 0) return static_cast<CancelMode>(mode);
    if (options_.cancel_after.has_value() &&
        SteadyClock::now() >= start_ + *options_.cancel_after) {
      return options_.cancel_after_mode;
    }
    return std::nullopt;
  }
  // Whether the job context (everything but cleanup_exec) has ended.
  StopReason JobContextStop() {
    if (SteadyClock::now() >= job_deadline_) return StopReason::kDeadline;
    if (preparing_ && SteadyClock::now() >= prepare_deadline_) {
      return StopReason::kPrepareDeadline;
    }
    const std::optional<CancelMode> cancel = CancelRequested();
    if (!cancel.has_value()) return StopReason::kNone;
    if (*cancel == CancelMode::kGraceful && graceful_handled_) {
      return StopReason::kNone;
    }
    if (*cancel == CancelMode::kGraceful && in_step_) {
      return StopReason::kNone;  // Only the step's context ends.
    }
    return StopReason::kCancel;
  }
  // The wait before attempt `attempt` (2, 3, ...) of a stage the runner
  // tries again (get_sources, restore_cache, download_artifacts): its
  // backoff doubles from a minimum to a maximum, 5 s to 5 min with
  // FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY (on by default), else 1 s to
  // 5 s. RunnerConfig::stage_retry_interval, when set, is the minimum (the
  // maximum scales with it).
  milliseconds StageRetryWait(int attempt) const {
    const auto flag =
        settings_.feature_flags.find("FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY");
    const bool exponential =
        flag == settings_.feature_flags.end() || flag->second;
    milliseconds low = exponential ? milliseconds(5000) : milliseconds(1000);
    milliseconds high = exponential ? milliseconds(300000) : milliseconds(5000);
    if (config_.stage_retry_interval.count() > 0) {
      high = config_.stage_retry_interval * (high / low);
      low = config_.stage_retry_interval;
    }
    milliseconds wait = low;
    for (int i = 2; i < attempt && wait < high; ++i) wait *= 2;
    return std::min(wait, high);
  }
  // The end of the context preparation runs in: the job's deadline, or the
  // prepare_timeout while preparing.
  TimePoint ContextDeadline() const {
    return preparing_ ? Earlier(prepare_deadline_, job_deadline_)
                      : job_deadline_;
  }
  Failure StopFailure(StopReason reason) {
    if (reason == StopReason::kPrepareDeadline) {
      return {FailureKind::kTimeout, 0,
              absl::StrCat("prepare timeout: exceeded timeout of ",
                           FormatSeconds(prepare_deadline_ - start_))};
    }
    if (reason == StopReason::kDeadline) {
      // The runner prints the timeout as a Go duration, and then "seconds".
      return {FailureKind::kTimeout, 0,
              absl::StrCat(
                  "execution took longer than ",
                  FormatSeconds(std::chrono::seconds(job_timeout_seconds_)),
                  " seconds")};
    }
    return {FailureKind::kCancel, 0, "canceled"};
  }

  // Variables and environment, as the runner builds them: the feature flags
  // as resolved (the job's own FF_ variables left out), or, for reading the
  // job's settings, the flags' defaults with every job variable after them.
  std::vector<Variable> Variables(bool for_settings = false) const;
  // The expanded value of variable `key` (a file variable's content), as the
  // runner's settings read it; nullopt when undefined.
  std::optional<std::string> Setting(std::string_view key) const;
  // The feature flags that differ from their defaults, as the header shows
  // them ("FF_X:true, FF_Y:false"); "" when none does.
  std::string FeatureFlagInfo() const;
  std::map<std::string, std::string> Environment(bool with_job_env) const;
  // CI_JOB_SERVICES as the custom executor makes it for its execs.
  std::string ServicesJson() const;

  // Runs one exec the way the runner spawns and kills it. `stop` is polled
  // while it runs.
  using StopCheck = std::function<StopReason()>;
  using OutputFn = std::function<void(std::string_view line)>;
  ExecOutcome RunExec(ExecCall call, bool with_job_env, TimePoint deadline,
                      const StopCheck& stop, const OutputFn& out,
                      const OutputFn& err);
  // Classifies an exec's outcome by its exit code.
  Failure Classify(const ExecOutcome& outcome);
  // The outcome of config_exec, prepare_exec or cleanup_exec. One stopped
  // at its own timeout (not the job's) is classified by how it then exited,
  // as the runner's kill sequence hands back its exit: a driver that exits
  // with 0 on SIGTERM succeeded, one killed by the signal failed as an
  // unknown exit code.
  Failure ClassifyOwnExec(ExecOutcome outcome) {
    if (outcome.stopped == StopReason::kDeadline &&
        SteadyClock::now() < ContextDeadline()) {
      outcome.stopped = StopReason::kNone;
    }
    return Classify(outcome);
  }

  // Preparation.
  Failure PrepareAttempt(int attempt);
  Failure RunConfigExec(int attempt);
  void RunCleanupExec(int attempt);
  void RemoveTempDir();

  // Stages.
  std::string Script(std::string_view body, bool export_variables,
                     bool cd_project) const;
  Failure RunStage(std::string_view stage, std::string_view body,
                   bool export_variables, bool cd_project, TimePoint deadline,
                   const StopCheck& stop);
  void RunStages();
  // Waits `interval` (between two attempts of a stage), or less if the job
  // is stopped meanwhile; false when it was.
  bool PauseUnlessStopped(std::chrono::milliseconds interval);
  std::string GetSourcesBody() const;
  std::string SourcesHooksBody(bool pre) const;
  std::string SubmodulesBody() const;
  std::string CheckoutBody() const;
  std::string FetchBody() const;
  std::string ExternalGitConfigBody() const;
  std::string ExternalGitConfigFile() const;
  std::string GitCleanupBody(bool clean_configs) const;
  std::string BuildDirCleanupBody() const;
  bool GitUrlsWithoutTokens() const;
  // The repository's remote as the runner's git auth helper makes it, and
  // the job token put in (or, FF_GIT_URLS_WITHOUT_TOKENS, left out of) a URL.
  GitUrl RemoteUrl() const;
  GitUrl WithAuth(GitUrl url) const;
  std::string CredentialHelperBody() const;
  std::string TokenlessGitConfigBody() const;
  std::string ClearGitCredentialsBody() const;
  std::string LfsPullBody() const;
  std::string FetchArguments() const;
  bool HasJobCommit() const;
  std::string StepBody(const gitlab::JobStep& step) const;
  std::string UploadBody(bool on_success) const;
  std::string DotenvUploadBody(const gitlab::JobArtifact& artifact) const;
  Failure CheckDotenvReport();
  Failure PrepareStore(bool on_success);
  std::string DownloadBody() const;
  // A cache stage's script: nullopt when the stage is skipped (no cache
  // entry with paths); a failure when the runner cannot write it.
  struct CacheScript {
    std::optional<std::string> body;
    Failure failure;
  };
  struct CacheConfig {
    std::string human_key;
    std::string archive;    // Relative to the project directory.
    std::string alternate;  // The other naming scheme's archive.
  };
  // The runner's newCacheConfig: the key expanded, sanitized (or hashed),
  // its archive; warning lines and a skip notice go to `body`.
  std::optional<CacheConfig> NewCacheConfig(
      const std::string& user_key, std::string* body, std::string_view action,
      const std::function<bool(const std::string&)>& check = nullptr) const;
  CacheScript RestoreCacheScript() const;
  CacheScript ArchiveCacheScript(bool on_success) const;
  std::string ExtractCacheCommands(const std::vector<CacheConfig>& configs,
                                   const std::vector<std::string>& paths,
                                   int depth) const;
  std::string ExpandJobValue(std::string_view value) const;
  std::string CleanupFileVariablesBody() const;
  // The job's GITLAB_ENV file, in the project's temporary directory.
  std::string GitlabEnvFile() const {
    return project_dir_ + ".tmp/gitlab_runner_env";
  }
  std::chrono::nanoseconds StageTimeout(std::string_view key,
                                        std::chrono::nanoseconds fallback,
                                        std::chrono::nanoseconds job_left);

  void Fail(const Failure& failure, std::string_view section);

  // The job's settings read from its variables, as the runner reads them
  // once per job: a bad value keeps the default and adds a warning.
  struct JobSettings {
    std::string git_strategy = "clone";
    int get_sources_attempts = 1;
    int artifact_download_attempts = 1;
    bool git_checkout = true;  // GIT_CHECKOUT.
    // GIT_SUBMODULE_STRATEGY: none, normal, recursive, or invalid (an
    // unknown value, which fails get_sources).
    std::string git_submodule_strategy = "none";
    int64_t git_submodule_depth = 0;  // GIT_SUBMODULE_DEPTH.
    // GIT_LFS_SKIP_SMUDGE: no `git lfs pull` after the checkout.
    bool git_lfs_skip_smudge = false;
    // GIT_SUBMODULE_FORCE_HTTPS: the GitLab server's SSH URLs are rewritten
    // to HTTPS ones (url.<https>.insteadOf).
    bool git_submodule_force_https = false;
    // GIT_CLEAN_FLAGS / GIT_FETCH_EXTRA_FLAGS split at white space ("none":
    // no flags).
    std::vector<std::string> git_clean_flags = {"-ffdx"};
    std::vector<std::string> git_fetch_flags = {"--prune", "--quiet"};
    // GIT_CLONE_EXTRA_FLAGS: only for FF_USE_GIT_NATIVE_CLONE's clone.
    std::vector<std::string> git_clone_flags;
    // GIT_SUBMODULE_PATHS and GIT_SUBMODULE_UPDATE_FLAGS, split at white
    // space.
    std::vector<std::string> git_submodule_paths;
    std::vector<std::string> git_submodule_update_flags;
    int restore_cache_attempts = 1;      // RESTORE_CACHE_ATTEMPTS.
    int64_t cache_request_timeout = 10;  // CACHE_REQUEST_TIMEOUT (minutes).
    bool debug_trace = false;            // CI_DEBUG_TRACE: the scripts trace.
    bool after_script_ignore_errors = true;
    // By name: config.toml's [runners.feature_flags], else the job's
    // variable when it is a Go bool, else the default.
    std::map<std::string, bool, std::less<>> feature_flags;
    std::vector<std::string> errors;
  };
  JobSettings ReadSettings() const;

  const Options& options_;
  RunnerConfig config_;
  const std::atomic<int>& cancel_;
  std::shared_ptr<const std::atomic<int>> force_kill_;  // See ForceKill().
  std::map<std::string, std::string> runner_env_;
  int64_t job_timeout_seconds_ = 0;
  TimePoint start_;
  TimePoint job_deadline_;
  TimePoint prepare_deadline_;
  bool preparing_ = false;  // Within the runner's prepare context.
  JobResult result_;
  bool graceful_handled_ = false;
  bool in_step_ = false;
  int attempt_ = 1;
  std::string job_status_variable_ = "running";  // CI_JOB_STATUS.
  JobSettings settings_;
  // Made from the job's variables when Run() starts, as the runner makes
  // its build logger.
  std::optional<LogMasker> masker_;
  // What the job log holds so far, and whether it reached output_limit.
  int64_t log_bytes_ = 0;
  bool log_full_ = false;
  std::string open_section_;  // Its name; empty outside a section.
  std::string section_end_;   // End markers that lead the next line.

  // Per preparation attempt.
  std::string tmp_;
  std::string exit_code_file_;
  std::string response_file_;
  std::vector<std::pair<std::string, std::string>> job_env_;
  bool config_done_ = false;
  // Kept across attempts, like the runner's build state.
  std::string builds_dir_;
  std::string cache_dir_;
  std::string project_dir_;
  std::string project_slug_;  // <namespace>/<project>, for the cache dir.
  std::string hostname_;
  std::string driver_name_;
  std::string driver_version_;
  bool builds_dir_is_shared_ = false;
};

std::vector<Variable> RunnerEmulator::Job::Variables(bool for_settings) const {
  std::vector<Variable> vars;
  const auto add = [&vars](std::string key, std::string value) {
    vars.push_back({std::move(key), std::move(value), false});
  };
  // Build.GetAllVariables: every feature flag first, as resolved.
  for (const FeatureFlag& flag : kFeatureFlags) {
    bool value = flag.default_value;
    if (!for_settings) {
      const auto it = settings_.feature_flags.find(flag.name);
      if (it != settings_.feature_flags.end()) value = it->second;
    }
    add(flag.name, value ? "true" : "false");
  }
  // The job's image, expanded (the build's container options), first of
  // the runner's own variables.
  if (!options_.job.image.empty()) add("CI_JOB_IMAGE", options_.job.image);
  add("CI_RUNNER_SHORT_TOKEN", config_.runner_short_token);
  for (const std::string& entry : config_.environment) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    add(entry.substr(0, eq), entry.substr(eq + 1));
  }
  add("CI_BUILDS_DIR",
      builds_dir_.empty() || project_dir_.empty() ? "" : builds_dir_);
  add("CI_PROJECT_DIR", project_dir_);
  add("CI_CONCURRENT_ID", std::to_string(config_.concurrent_id));
  add("CI_CONCURRENT_PROJECT_ID",
      std::to_string(config_.concurrent_project_id));
  add("CI_SERVER", "yes");
  // Expanded as "running"; the later status only replaces this value.
  const size_t job_status_index = vars.size();
  add("CI_JOB_STATUS", "running");
  add("CI_JOB_TIMEOUT", std::to_string(job_timeout_seconds_));
  for (const gitlab::JobVariable& v : options_.job.variables) {
    // The job's feature flags count only through their resolved values.
    if (!for_settings && IsFeatureFlag(v.key)) continue;
    vars.push_back({v.key, v.value, v.file, v.raw});
  }
  add("CI_SHARED_ENVIRONMENT", "true");
  add("CI_RUNNER_VERSION", kRunnerVersion);
  add("CI_RUNNER_REVISION", kRunnerRevision);
  add("CI_RUNNER_EXECUTABLE_ARCH", kRunnerArch);
  add("RUNNER_TEMP_PROJECT_DIR",
      project_dir_.empty() ? "" : project_dir_ + ".tmp");
  // Build.GetAllVariables: each value but the raw ones expanded once against
  // the unexpanded list, whatever the order of definition.
  std::vector<Variable> expanded = vars;
  const auto lookup = [&vars](std::string_view name) {
    return LookupVariable(vars, name);
  };
  for (Variable& v : expanded) {
    if (!v.raw) v.value = ExpandVariableValue(v.value, lookup);
  }
  expanded[job_status_index].value = job_status_variable_;
  return expanded;
}

std::string RunnerEmulator::Job::FeatureFlagInfo() const {
  std::vector<std::string> changed;
  for (const FeatureFlag& flag : kFeatureFlags) {
    const auto it = settings_.feature_flags.find(flag.name);
    if (it == settings_.feature_flags.end() ||
        it->second == flag.default_value) {
      continue;
    }
    changed.push_back(
        absl::StrCat(flag.name, ":", it->second ? "true" : "false"));
  }
  return absl::StrJoin(changed, ", ");
}

std::optional<std::string> RunnerEmulator::Job::Setting(
    std::string_view key) const {
  const std::vector<Variable> vars = Variables(/*for_settings=*/true);
  for (auto it = vars.rbegin(); it != vars.rend(); ++it) {
    if (it->key == key) return it->value;
  }
  return std::nullopt;
}

std::map<std::string, std::string> RunnerEmulator::Job::Environment(
    bool with_job_env) const {
  // Later assignments win, as with Go's exec and a duplicated key.
  std::map<std::string, std::string> env = runner_env_;
  env["TMPDIR"] = tmp_;
  env["BUILD_FAILURE_EXIT_CODE"] = std::to_string(kBuildFailureExitCode);
  env["SYSTEM_FAILURE_EXIT_CODE"] = std::to_string(kSystemFailureExitCode);
  env["BUILD_EXIT_CODE_FILE"] = exit_code_file_;
  env["JOB_RESPONSE_FILE"] = response_file_;
  if (with_job_env) {
    for (const auto& [key, value] : job_env_) env[key] = value;
  }
  for (const Variable& v : Variables()) env["CUSTOM_ENV_" + v.key] = v.value;
  env["CUSTOM_ENV_CI_JOB_SERVICES"] = ServicesJson();
  return env;
}

std::string RunnerEmulator::Job::ServicesJson() const {
  if (options_.job.services.empty()) return "";
  const std::vector<Variable> vars = Variables();
  const auto lookup = [&vars](std::string_view name) {
    return LookupVariable(vars, name);
  };
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const gitlab::JobService& service : options_.job.services) {
    // The build's container options: name and alias expanded; the first of
    // the aliases (split at commas and white space) is the one named.
    const std::string alias = ExpandVariableValue(service.alias, lookup);
    const std::vector<std::string> aliases = absl::StrSplit(
        alias, absl::ByAnyChar(", \t\n\v\f\r"), absl::SkipEmpty());
    nlohmann::ordered_json entry;
    entry["name"] = ExpandVariableValue(service.name, lookup);
    entry["alias"] = aliases.empty() ? "" : aliases.front();
    // Go encodes a nil list as null.
    entry["entrypoint"] = service.entrypoint.empty()
                              ? nlohmann::ordered_json(nullptr)
                              : nlohmann::ordered_json(service.entrypoint);
    entry["command"] = service.command.empty()
                           ? nlohmann::ordered_json(nullptr)
                           : nlohmann::ordered_json(service.command);
    if (!service.variables.empty()) {
      // Each expanded against the job's variables and the service's own.
      std::vector<Variable> all = vars;
      for (const auto& [key, value] : service.variables) {
        all.push_back({key, value, false});
      }
      const auto lookup_all = [&all](std::string_view name) {
        return LookupVariable(all, name);
      };
      // A Go map: encoded with its keys sorted.
      std::map<std::string, std::string> expanded;
      for (const auto& [key, value] : service.variables) {
        expanded[key] = ExpandVariableValue(value, lookup_all);
      }
      nlohmann::ordered_json variables = nlohmann::ordered_json::object();
      for (const auto& [key, value] : expanded) variables[key] = value;
      entry["variables"] = std::move(variables);
    }
    list.push_back(std::move(entry));
  }
  // Go's encoder: invalid UTF-8 replaced, and <, >, &, U+2028 and U+2029
  // escaped (only string contents can hold them).
  const std::string text = list.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xe2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
               (text[i + 2] == '\xa8' || text[i + 2] == '\xa9')) {
      out += text[i + 2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

ExecOutcome RunnerEmulator::Job::RunExec(ExecCall call, bool with_job_env,
                                         TimePoint deadline,
                                         const StopCheck& stop,
                                         const OutputFn& out,
                                         const OutputFn& err) {
  call.attempt = attempt_;
  const size_t index = result_.calls.size();
  result_.calls.push_back(call);
  ExecOutcome outcome;
  // The runner never deletes BUILD_EXIT_CODE_FILE between calls of one
  // preparation attempt: a driver that exits with the build-failure code
  // without writing it gets whatever an earlier call left there.

  SpawnOptions spawn;
  spawn.argv = call.argv;
  spawn.env = Environment(with_job_env);
  spawn.working_dir = tmp_;
  spawn.new_process_group = true;
  spawn.stdin_path = "/dev/null";
  absl::StatusOr<std::unique_ptr<Subprocess>> spawned =
      Subprocess::Spawn(spawn);
  if (!spawned.ok()) {
    outcome.error = std::string(spawned.status().message());
    outcome.exit.exit_code = 127;
    result_.calls[index].exit_code = 127;
    return outcome;
  }
  std::unique_ptr<Subprocess> child = std::move(*spawned);
  LineSplitter out_lines;
  LineSplitter err_lines;
  const auto on_output = [&](OutputSource source, std::string_view data) {
    if (source == OutputSource::kStdout) {
      out_lines.Feed(data, out);
    } else {
      err_lines.Feed(data, err);
    }
  };

  // ForceKill(): cleanup_exec only at its second level.
  const int force_level = call.exec == "cleanup" ? 2 : 1;
  const std::function<bool()> force_kill = [force = force_kill_, force_level] {
    return force->load() >= force_level;
  };
  bool force_killed = false;
  std::optional<ExitStatus> status;
  while (!status.has_value()) {
    if (!force_killed && force_kill()) {
      force_killed = true;
      child->SignalGroup(SIGKILL);
    }
    // The context's own reason first: a deadline that is the prepare or
    // job deadline is reported as that, not as the exec's timeout.
    StopReason reason = stop();
    if (reason == StopReason::kNone && SteadyClock::now() >= deadline) {
      reason = StopReason::kDeadline;
    }
    if (reason != StopReason::kNone) {
      outcome.stopped = reason;
      break;
    }
    status = child->WaitUntil(
        Earlier(deadline, SteadyClock::now() + milliseconds(50)), on_output);
  }
  if (!status.has_value()) {
    // The runner's kill sequence: SIGTERM to the group, graceful_kill_timeout,
    // SIGKILL, force_kill_timeout, give up. The wait is capped like the
    // runner's WaitForBuildFinishTimeout; the rest continues in the background.
    const TimePoint now = SteadyClock::now();
    const TimePoint give_up = now + config_.build_finish_timeout;
    const TimePoint sigkill_at = now + config_.graceful_kill_timeout;
    if (!child->SignalGroup(SIGTERM)) child->SignalGroup(SIGKILL);
    status = WaitForcible(*child, Earlier(sigkill_at, give_up), force_kill,
                          on_output);
    if (!status.has_value() && SteadyClock::now() < give_up) {
      child->SignalGroup(SIGKILL);
      status = child->WaitUntil(
          Earlier(SteadyClock::now() + config_.force_kill_timeout, give_up),
          on_output);
      if (!status.has_value()) {
        outcome.error =
            absl::StrCat("failed to kill process PID=", child->pid(),
                         ", likely process is dormant");
      }
    }
    if (!status.has_value()) {
      if (outcome.error.empty()) {
        outcome.error =
            absl::StrCat("gave up waiting for process PID=", child->pid(),
                         " after it was stopped");
      }
      FinishKillInBackground(std::move(child), sigkill_at,
                             config_.force_kill_timeout, force_kill);
    }
  }
  out_lines.Flush(out);
  err_lines.Flush(err);
  if (status.has_value()) outcome.exit = *status;
  result_.calls[index].exit_code =
      status.has_value() ? status->code() : 128 + SIGKILL;
  result_.calls[index].killed = outcome.stopped != StopReason::kNone;
  return outcome;
}

Failure RunnerEmulator::Job::Classify(const ExecOutcome& outcome) {
  if (outcome.stopped != StopReason::kNone) {
    if (!outcome.error.empty()) Log(absl::StrCat("WARNING: ", outcome.error));
    return StopFailure(outcome.stopped);
  }
  // The custom executor returns the exec's error as it is.
  if (!outcome.error.empty()) {
    return {FailureKind::kSystem, outcome.exit.code(), outcome.error};
  }
  const ExitStatus& exit = outcome.exit;
  if (exit.success()) return {};
  if (exit.signal == 0 && exit.exit_code == kBuildFailureExitCode) {
    bool exists = false;
    const std::string line = ReadFirstLine(exit_code_file_, &exists);
    if (!exists) {
      return {FailureKind::kBuild, 1, "exit status 1"};
    }
    const std::optional<int64_t> code = ParseGoInt(line);
    if (!code.has_value()) {
      // The custom executor's words for a code it cannot read: the
      // system-failure code, then how the driver exited.
      return {FailureKind::kSystem, kSystemFailureExitCode,
              absl::StrCat("unknown Custom executor executable exit code ",
                           kSystemFailureExitCode,
                           "; executable execution terminated with: exit "
                           "status ",
                           kBuildFailureExitCode)};
    }
    // The job's exit code is an int here; a code beyond it saturates.
    const int exit_code = static_cast<int>(
        std::clamp<int64_t>(*code, std::numeric_limits<int>::min(),
                            std::numeric_limits<int>::max()));
    return {FailureKind::kBuild, exit_code, absl::StrCat("exit status ", line)};
  }
  if (exit.signal == 0 && exit.exit_code == kSystemFailureExitCode) {
    return {FailureKind::kSystem, kSystemFailureExitCode,
            absl::StrCat("exit status ", kSystemFailureExitCode)};
  }
  // The custom executor's words for any other exit: the code as Go's
  // ExitCode() gives it (-1 for a signal), then Go's text for the exit.
  std::string how = absl::StrCat("exit status ", exit.exit_code);
  if (exit.signal != 0) {
    const char* const name = strsignal(exit.signal);
    how = absl::StrCat("signal: ", name != nullptr ? name : "unknown signal");
    // Go's signal names start in lower case ("terminated", "killed").
    const size_t first = std::string_view("signal: ").size();
    if (how.size() > first) {
      how[first] = static_cast<char>(
          std::tolower(static_cast<unsigned char>(how[first])));
    }
  }
  return {FailureKind::kSystem, exit.code(),
          absl::StrCat("unknown Custom executor executable exit code ",
                       exit.signal != 0 ? -1 : exit.exit_code,
                       "; executable execution terminated with: ", how)};
}

Failure RunnerEmulator::Job::RunConfigExec(int attempt) {
  ExecCall call;
  call.exec = "config";
  call.argv.push_back(config_.config_exec);
  call.argv.insert(call.argv.end(), config_.config_args.begin(),
                   config_.config_args.end());
  std::string stdout_text;
  const OutputFn capture = [&](std::string_view line) {
    stdout_text.append(line.data(), line.size());
    stdout_text.push_back('\n');
  };
  const OutputFn to_log = [this](std::string_view line) { Log(line); };
  const ExecOutcome outcome = RunExec(
      call, /*with_job_env=*/false,
      Earlier(SteadyClock::now() + config_.config_exec_timeout,
              ContextDeadline()),
      [this] { return JobContextStop(); }, capture, to_log);
  Failure failure = ClassifyOwnExec(outcome);
  if (!failure.ok()) return failure;
  (void)attempt;

  // As Go's encoding/json takes it: no output at all is no configuration,
  // white space alone is a JSON input that ends too early, and null
  // changes nothing.
  if (stdout_text.empty()) return {};
  using Json = nlohmann::json;
  const auto parse_error = [](std::string_view why) {
    return Failure{
        FailureKind::kSystem, kSystemFailureExitCode,
        absl::StrCat("error while parsing JSON output: ", std::string(why))};
  };
  if (stdout_text.find_first_not_of(" \t\r\n") == std::string::npos) {
    return parse_error("unexpected end of JSON input");
  }
  const Json doc = Json::parse(stdout_text, nullptr, false);
  if (doc.is_discarded()) return parse_error("invalid JSON");
  if (doc.is_null()) return {};
  if (!doc.is_object()) return parse_error("not a JSON object");
  // Strict like Go's encoding/json: a present key of the wrong type is an
  // error; null leaves the runner's value; unknown keys are ignored.
  const auto string_field = [&](const char* key, std::string* out,
                                bool* present) -> std::optional<Failure> {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) {
      return parse_error(absl::StrCat("'", key, "' is not a string"));
    }
    *out = it->get<std::string>();
    if (present != nullptr) *present = true;
    return std::nullopt;
  };
  std::string builds_dir;
  std::string cache_dir;
  std::string shell;
  bool has_builds = false;
  bool has_cache = false;
  bool has_shell = false;
  if (auto f = string_field("builds_dir", &builds_dir, &has_builds)) return *f;
  if (auto f = string_field("cache_dir", &cache_dir, &has_cache)) return *f;
  if (auto f = string_field("hostname", &hostname_, nullptr)) return *f;
  if (auto f = string_field("shell", &shell, &has_shell)) return *f;
  if (auto it = doc.find("builds_dir_is_shared");
      it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return parse_error("'builds_dir_is_shared' is not a boolean");
    }
    builds_dir_is_shared_ = it->get<bool>();
  }
  if (auto it = doc.find("driver"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return parse_error("'driver' is not an object");
    for (const char* key : {"name", "version"}) {
      auto field = it->find(key);
      if (field == it->end() || field->is_null()) continue;
      if (!field->is_string()) {
        return parse_error(absl::StrCat("'driver.", key, "' is not a string"));
      }
      (std::string_view(key) == "name" ? driver_name_ : driver_version_) =
          field->get<std::string>();
    }
  }
  if (auto it = doc.find("job_env"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return parse_error("'job_env' is not an object");
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) {
        return parse_error(absl::StrCat("'job_env.", key, "' is not a string"));
      }
      job_env_.emplace_back(key, value.get<std::string>());
    }
  }
  if (has_shell && shell != "bash") {
    return {FailureKind::kConfig, 0,
            absl::StrCat("shell '", shell, "' is not supported by run-local")};
  }
  if (has_builds) builds_dir_ = builds_dir;
  if (has_cache) cache_dir_ = cache_dir;
  return {};
}

Failure RunnerEmulator::Job::PrepareAttempt(int attempt) {
  // The custom executor checks its configuration first: without run_exec
  // no exec runs (config_exec neither) and no temporary dir is made.
  if (config_.run_exec.empty()) {
    tmp_.clear();
    return {FailureKind::kConfig, 0, "custom executor is missing RunExec"};
  }
  const auto tmpdir = runner_env_.find("TMPDIR");
  const std::string base =
      tmpdir != runner_env_.end() && !tmpdir->second.empty() ? tmpdir->second
                                                             : "/tmp";
  absl::StatusOr<std::string> tmp =
      MakeTempDir(base + "/custom-executorXXXXXX");
  if (!tmp.ok()) {
    return {FailureKind::kSystem, 0, std::string(tmp.status().message())};
  }
  tmp_ = *tmp;
  response_file_ = tmp_ + "/response.json";
  exit_code_file_ = tmp_ + "/build_exit_code";
  job_env_.clear();
  if (absl::Status written = WriteFile(
          response_file_, gitlab::SerializeJobPayload(options_.job), 0600);
      !written.ok()) {
    return {FailureKind::kSystem, 0, std::string(written.message())};
  }
  if (attempt == 1) {
    builds_dir_ = config_.builds_dir;
    cache_dir_ = config_.cache_dir;
  }
  if (!config_.config_exec.empty()) {
    Failure failure = RunConfigExec(attempt);
    if (!failure.ok()) return failure;
  }
  config_done_ = true;

  // Its startup line comes before the build's own checks of the dirs.
  std::string using_line = "Using Custom executor";
  if (!driver_name_.empty()) {
    absl::StrAppend(&using_line, " with driver ", driver_name_);
    if (!driver_version_.empty())
      absl::StrAppend(&using_line, " ", driver_version_);
  }
  Log(absl::StrCat(using_line, "..."));

  if (builds_dir_.empty()) {
    return {FailureKind::kConfig, 0, "the builds_dir is not configured"};
  }
  if (cache_dir_.empty()) {
    return {FailureKind::kConfig, 0, "the cache_dir is not configured"};
  }

  // The project dir: <builds_dir>[/<token>/<concurrent project
  // id>]/<ns>/<project>.
  std::string project_path = options_.job.project_full_path;
  if (const std::string& url = options_.job.repo_url; !url.empty()) {
    size_t start = url.find("://");
    start = start == std::string::npos ? 0 : start + 3;
    const size_t slash = url.find('/', start);
    if (slash != std::string::npos) project_path = url.substr(slash + 1);
  }
  if (project_path.size() > 4 &&
      project_path.compare(project_path.size() - 4, 4, ".git") == 0) {
    project_path.resize(project_path.size() - 4);
  }
  while (!project_path.empty() && project_path.back() == '/') {
    project_path.pop_back();
  }
  if (project_path.empty()) {
    project_path = absl::StrCat("project-", options_.job.project_id);
  }
  std::string root = builds_dir_;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (builds_dir_is_shared_) {
    absl::StrAppend(&root, "/", config_.runner_short_token, "/",
                    config_.concurrent_project_id);
  }
  // GIT_STRATEGY empty gets a directory of its own.
  project_dir_ =
      absl::StrCat(root, "/", project_path,
                   settings_.git_strategy == "empty" ? "-empty" : "");
  project_slug_ = project_path;

  // GIT_CLONE_PATH: refused unless [runners.custom_build_dir] enables it
  // (the custom executor's default is off); then a path inside the builds
  // dir, read with CI_BUILDS_DIR known.
  const std::string clone_path = Setting("GIT_CLONE_PATH").value_or("");
  if (!clone_path.empty()) {
    if (!config_.custom_build_dir_enabled) {
      project_dir_.clear();
      return {FailureKind::kConfig, 0,
              "setting GIT_CLONE_PATH is not allowed, enable "
              "`custom_build_dir` feature"};
    }
    const std::filesystem::path clean =
        std::filesystem::path(clone_path).lexically_normal();
    const std::string relative =
        clean.lexically_relative(std::filesystem::path(builds_dir_)).string();
    if (relative.empty() || absl::StartsWith(relative, "..")) {
      project_dir_.clear();
      return {FailureKind::kConfig, 0,
              absl::StrCat("the GIT_CLONE_PATH=", GoQuote(clone_path),
                           " has to be within ", GoQuote(builds_dir_))};
    }
    project_dir_ = clean.string();
    while (project_dir_.size() > 1 && project_dir_.back() == '/') {
      project_dir_.pop_back();
    }
  }

  if (!config_.prepare_exec.empty()) {
    ExecCall call;
    call.exec = "prepare";
    call.argv.push_back(config_.prepare_exec);
    call.argv.insert(call.argv.end(), config_.prepare_args.begin(),
                     config_.prepare_args.end());
    const OutputFn to_log = [this](std::string_view line) { Log(line); };
    const ExecOutcome outcome = RunExec(
        call, /*with_job_env=*/true,
        Earlier(SteadyClock::now() + config_.prepare_exec_timeout,
                ContextDeadline()),
        [this] { return JobContextStop(); }, to_log, to_log);
    Failure failure = ClassifyOwnExec(outcome);
    if (!failure.ok()) return failure;
  }
  return {};
}

void RunnerEmulator::Job::RunCleanupExec(int attempt) {
  (void)attempt;
  if (config_.run_exec.empty()) {
    // The custom executor's cleanup checks its configuration again.
    Log("WARNING: custom executor is missing RunExec");
    return;
  }
  if (config_.cleanup_exec.empty() || tmp_.empty()) return;
  ExecCall call;
  call.exec = "cleanup";
  call.argv.push_back(config_.cleanup_exec);
  call.argv.insert(call.argv.end(), config_.cleanup_args.begin(),
                   config_.cleanup_args.end());
  const OutputFn debug = [this](std::string_view line) {
    Diagnose("debug", line);
  };
  const OutputFn warn = [this](std::string_view line) {
    Diagnose("warn", line);
  };
  // A fresh context: neither the job's deadline nor a cancel stops it.
  const ExecOutcome outcome = RunExec(
      call, /*with_job_env=*/config_done_,
      SteadyClock::now() + config_.cleanup_exec_timeout,
      [] { return StopReason::kNone; }, debug, warn);
  // Its own timeout is the only one that stops it.
  if (const Failure failure = ClassifyOwnExec(outcome); !failure.ok()) {
    // The custom executor's build logger: the job log and the runner's.
    const std::string line =
        absl::StrCat("Cleanup script failed: ", failure.message);
    Log(absl::StrCat("WARNING: ", line));
    Diagnose("warn", line);
  }
}

void RunnerEmulator::Job::RemoveTempDir() {
  if (tmp_.empty()) return;
  std::error_code error;
  std::filesystem::remove_all(tmp_, error);
  if (error) {
    Diagnose("warn",
             absl::StrCat("cannot remove ", tmp_, ": ", error.message()));
  }
  tmp_.clear();
}

std::string RunnerEmulator::Job::Script(std::string_view body,
                                        bool export_variables,
                                        bool cd_project) const {
  std::string script =
      "#!/usr/bin/env bash\n"
      "\n"
      "trap 'exit 1' TERM\n"
      "\n";
  // CI_DEBUG_TRACE: bash prints each command before it runs it.
  if (settings_.debug_trace) script += "set -o xtrace\n";
  script +=
      "set -o pipefail\n"
      "set -o errexit\n"
      "set +o noclobber\n";
  // The stage's commands go to bash through `eval` in a subshell, as the
  // runner's bash shell writes them: bash reads and runs them one at a
  // time, so the commands before a syntax error still run.
  std::string inner;
  if (export_variables) {
    const std::string file_dir = project_dir_ + ".tmp";
    bool made_file_dir = false;
    for (const Variable& v : Variables()) {
      if (!IsShellName(v.key)) continue;
      if (v.file && !project_dir_.empty()) {
        if (!made_file_dir) {
          absl::StrAppend(&inner, "mkdir -p ", ShellQuote(file_dir), "\n");
          made_file_dir = true;
        }
        const std::string path = file_dir + "/" + v.key;
        absl::StrAppend(&inner, "printf '%s' ", ShellQuote(v.value), " > ",
                        ShellQuote(path), "\n", "export ", v.key, "=",
                        ShellQuote(path), "\n");
        continue;
      }
      absl::StrAppend(&inner, "export ", v.key, "=", ShellQuote(v.value), "\n");
    }
    // GITLAB_ENV: a file the job may append KEY=VALUE lines to; every later
    // stage exports them, after the job's variables.
    if (!project_dir_.empty()) {
      const std::string env_file = GitlabEnvFile();
      absl::StrAppend(&inner, "export GITLAB_ENV=", ShellQuote(env_file), "\n",
                      "mkdir -p ", ShellQuote(file_dir), "\n", "touch ",
                      ShellQuote(env_file), "\n",
                      "while read -r line; do export \"$line\"; done < ",
                      ShellQuote(env_file), "\n");
      // FF_GIT_URLS_WITHOUT_TOKENS: every git of the job reads the seed
      // file as its global config (after GITLAB_ENV: the job cannot
      // change it there).
      if (GitUrlsWithoutTokens()) {
        absl::StrAppend(&inner, "export GIT_CONFIG_GLOBAL=",
                        ShellQuote(GlobalGitConfigSeedFile(project_dir_)),
                        "\n");
      }
    }
  }
  if (cd_project) absl::StrAppend(&inner, "cd \"$CI_PROJECT_DIR\"\n");
  inner.append(body.data(), body.size());
  if (!body.empty() && body.back() != '\n') inner.push_back('\n');
  absl::StrAppend(&script, "(trap 'exit 1' TERM; eval ", ShellQuote(inner),
                  ") < /dev/null\nexit 0\n");
  return script;
}

Failure RunnerEmulator::Job::RunStage(std::string_view stage,
                                      std::string_view body,
                                      bool export_variables, bool cd_project,
                                      TimePoint deadline,
                                      const StopCheck& stop) {
  absl::StatusOr<std::string> dir = MakeTempDir(tmp_ + "/scriptXXXXXX");
  if (!dir.ok()) {
    return {FailureKind::kSystem, 0, std::string(dir.status().message())};
  }
  const std::string path = *dir + "/script";
  if (absl::Status written =
          WriteFile(path, Script(body, export_variables, cd_project), 0700);
      !written.ok()) {
    return {FailureKind::kSystem, 0, std::string(written.message())};
  }
  ExecCall call;
  call.exec = "run";
  call.stage =
      stage == "step_script" ? config_.main_script_stage : std::string(stage);
  // The custom executor's rename, which it announces in the job log.
  if (stage == "step_script" && call.stage == "build_script") {
    Log("WARNING: Starting with version 17.0 the 'build_script' stage will be "
        "replaced with 'step_script': "
        "https://gitlab.com/groups/gitlab-org/-/epics/6112");
  }
  call.argv.push_back(config_.run_exec);
  call.argv.insert(call.argv.end(), config_.run_args.begin(),
                   config_.run_args.end());
  call.argv.push_back(path);
  call.argv.push_back(call.stage);
  const OutputFn to_log = [this](std::string_view line) { Log(line); };
  const ExecOutcome outcome =
      RunExec(call, /*with_job_env=*/true, deadline, stop, to_log, to_log);
  // The runner's warning after a stage whose context's deadline (the job's,
  // prepare_timeout, get_sources_timeout, RUNNER_SCRIPT_TIMEOUT or
  // RUNNER_AFTER_SCRIPT_TIMEOUT) has passed, under the stage's own name.
  if (SteadyClock::now() >= deadline) {
    Log(absl::StrCat(
        "WARNING: ", std::string(stage),
        " could not run to completion because the timeout was exceeded. For "
        "more control over job and script timeouts see: "
        "https://docs.gitlab.com/ci/runners/configure_runners/"
        "#set-script-and-after_script-timeouts"));
  }
  // after_script stopped by RUNNER_AFTER_SCRIPT_TIMEOUT (the job's context
  // still running): the runner's error is what the killed exec's exit
  // reads as, not a job timeout.
  if (stage == "after_script" && outcome.stopped == StopReason::kDeadline &&
      deadline < job_deadline_ && SteadyClock::now() < job_deadline_) {
    ExecOutcome exited = outcome;
    exited.stopped = StopReason::kNone;
    return Classify(exited);
  }
  return Classify(outcome);
}

RunnerEmulator::Job::JobSettings RunnerEmulator::Job::ReadSettings() const {
  // In the runner's order (its settings validation, then the clamping of
  // the attempt counts, then the feature flags): the warning lists them so.
  JobSettings settings;
  // A bool as Go's strconv.ParseBool reads it.
  const auto flag = [&](const char* key, bool* value) {
    const std::string text = Setting(key).value_or("");
    if (text.empty()) return;
    if (const std::optional<bool> parsed = ParseGoBool(text)) {
      *value = *parsed;
    } else {
      settings.errors.push_back(
          absl::StrCat(key, ": expected bool got ", GoQuote(text),
                       ", using default value: ", *value ? "true" : "false"));
    }
  };
  // An integer as Go's strconv.ParseInt reads it.
  const auto integer = [&](const char* key, int64_t* value) {
    const std::string text = Setting(key).value_or("");
    if (text.empty()) return;
    if (const std::optional<int64_t> parsed = ParseGoInt(text)) {
      *value = *parsed;
    } else {
      settings.errors.push_back(
          absl::StrCat(key, ": expected int got ", GoQuote(text),
                       ", using default value: ", *value));
    }
  };
  // Settings run-local reads only to warn as the runner does.
  bool debug_services = false;
  int64_t submodule_depth = options_.job.depth;
  int64_t get_sources_attempts = 1;
  int64_t artifact_download_attempts = 1;
  int64_t restore_cache_attempts = 1;
  int64_t job_section_attempts = 1;
  int64_t secrets_attempts = 1;
  int64_t cache_request_timeout = 10;

  flag("CI_DEBUG_SERVICES", &debug_services);
  flag("CI_DEBUG_TRACE", &settings.debug_trace);
  const std::string strategy = Setting("GIT_STRATEGY").value_or("");
  if (strategy == "clone" || strategy == "fetch" || strategy == "none" ||
      strategy == "empty") {
    settings.git_strategy = strategy;
  } else if (!strategy.empty()) {
    settings.errors.push_back(absl::StrCat(
        "GIT_STRATEGY: expected either 'clone', 'fetch', 'none' or 'empty' "
        "got ",
        GoQuote(strategy), ", using default value '", settings.git_strategy,
        "'"));
  }
  flag("GIT_CHECKOUT", &settings.git_checkout);
  const std::string submodules = Setting("GIT_SUBMODULE_STRATEGY").value_or("");
  if (submodules.empty()) {
    settings.git_submodule_strategy = "none";
  } else if (submodules == "normal" || submodules == "recursive" ||
             submodules == "none") {
    settings.git_submodule_strategy = submodules;
  } else {
    settings.git_submodule_strategy = "invalid";
    settings.errors.push_back(absl::StrCat(
        "GIT_SUBMODULE_STRATEGY: expected either 'normal', 'recursive' or "
        "'none' got ",
        GoQuote(submodules)));
  }
  integer("GIT_SUBMODULE_DEPTH", &submodule_depth);
  flag("GIT_LFS_SKIP_SMUDGE", &settings.git_lfs_skip_smudge);
  flag("GIT_SUBMODULE_FORCE_HTTPS", &settings.git_submodule_force_https);
  integer("GET_SOURCES_ATTEMPTS", &get_sources_attempts);
  integer("ARTIFACT_DOWNLOAD_ATTEMPTS", &artifact_download_attempts);
  integer("RESTORE_CACHE_ATTEMPTS", &restore_cache_attempts);
  integer("EXECUTOR_JOB_SECTION_ATTEMPTS", &job_section_attempts);
  integer("SECRETS_RETRIEVAL_ATTEMPTS", &secrets_attempts);
  flag("AFTER_SCRIPT_IGNORE_ERRORS", &settings.after_script_ignore_errors);
  integer("CACHE_REQUEST_TIMEOUT", &cache_request_timeout);
  // The attempt counts, taken into 1..10.
  const auto clamp = [&](const char* key, int64_t* value) {
    const int64_t clamped = std::clamp<int64_t>(*value, 1, 10);
    if (clamped != *value) {
      settings.errors.push_back(absl::StrCat(
          key, ": number of attempts out of the range [1, 10], clamping to: ",
          clamped));
    }
    *value = clamped;
  };
  clamp("EXECUTOR_JOB_SECTION_ATTEMPTS", &job_section_attempts);
  clamp("GET_SOURCES_ATTEMPTS", &get_sources_attempts);
  clamp("ARTIFACT_DOWNLOAD_ATTEMPTS", &artifact_download_attempts);
  clamp("RESTORE_CACHE_ATTEMPTS", &restore_cache_attempts);
  clamp("SECRETS_RETRIEVAL_ATTEMPTS", &secrets_attempts);
  settings.git_submodule_depth = submodule_depth;
  settings.get_sources_attempts = static_cast<int>(get_sources_attempts);
  settings.artifact_download_attempts =
      static_cast<int>(artifact_download_attempts);
  settings.restore_cache_attempts = static_cast<int>(restore_cache_attempts);
  // Command flags: split at white space, "none" for none at all.
  const auto command_flags = [&](const char* key,
                                 std::vector<std::string>* flags) {
    const std::optional<std::string> text = Setting(key);
    if (!text.has_value() || text->empty()) return;
    flags->clear();
    if (*text == "none") return;
    for (absl::string_view flag : absl::StrSplit(
             *text, absl::ByAnyChar(" \t\n\r\v\f"), absl::SkipEmpty())) {
      flags->emplace_back(flag);
    }
  };
  command_flags("GIT_CLEAN_FLAGS", &settings.git_clean_flags);
  command_flags("GIT_FETCH_EXTRA_FLAGS", &settings.git_fetch_flags);
  command_flags("GIT_CLONE_EXTRA_FLAGS", &settings.git_clone_flags);
  command_flags("GIT_SUBMODULE_UPDATE_FLAGS",
                &settings.git_submodule_update_flags);
  for (absl::string_view path :
       absl::StrSplit(Setting("GIT_SUBMODULE_PATHS").value_or(""),
                      absl::ByAnyChar(" \t\n\r\v\f"), absl::SkipEmpty())) {
    settings.git_submodule_paths.emplace_back(path);
  }
  settings.cache_request_timeout = cache_request_timeout;
  // Feature flags: config.toml's value wins, then the job's variable when
  // Go reads it as a bool. The runner 19.3 resolves them twice while
  // reading the settings, so a bad value is reported twice.
  std::vector<std::string> flag_errors;
  for (const FeatureFlag& ff : kFeatureFlags) {
    bool value = ff.default_value;
    if (const auto it = config_.feature_flags.find(ff.name);
        it != config_.feature_flags.end()) {
      value = it->second;
    } else {
      const std::string raw = Setting(ff.name).value_or("");
      if (const std::optional<bool> parsed = ParseGoBool(raw)) {
        value = *parsed;
      } else {
        flag_errors.push_back(absl::StrCat(
            ff.name, ": could not parse feature flag, expected bool, got ",
            raw));
      }
    }
    settings.feature_flags[ff.name] = value;
  }
  for (int i = 0; i < 2; ++i) {
    settings.errors.insert(settings.errors.end(), flag_errors.begin(),
                           flag_errors.end());
  }
  return settings;
}

std::chrono::nanoseconds RunnerEmulator::Job::StageTimeout(
    std::string_view key, std::chrono::nanoseconds fallback,
    std::chrono::nanoseconds job_left) {
  // Build.getStageTimeoutContexts: a Go duration; anything else is ignored
  // with a warning, and so is a negative one or one past the job's end.
  const std::string text = Setting(key).value_or("");
  if (absl::StripAsciiWhitespace(text).empty()) return fallback;
  const absl::StatusOr<std::chrono::nanoseconds> parsed = ParseGoDuration(text);
  if (!parsed.ok()) {
    Log(absl::StrCat("WARNING: Ignoring malformed ", std::string(key),
                     " timeout: ", text));
    return fallback;
  }
  if (*parsed < std::chrono::nanoseconds(0)) {
    Log(absl::StrCat("WARNING: Ignoring relative ", std::string(key),
                     " timeout: ", text));
    return fallback;
  }
  if (*parsed > job_left) {
    Log(absl::StrCat("WARNING: ", std::string(key), " timeout: ", text,
                     " is longer than job timeout. Setting to job timeout"));
    return fallback;
  }
  return *parsed == std::chrono::nanoseconds(0) ? fallback : *parsed;
}

// The arguments of the fetch from the checkout in "$src": like the
// runner's fetch of GitLab's refspecs, the commit lands as the ref's remote
// branch, tags that point into what was fetched come along, and without a
// depth (the whole history) every tag does.
std::string RunnerEmulator::Job::FetchArguments() const {
  const std::string& ref = options_.job.ref.empty() ? "HEAD" : options_.job.ref;
  // The runner's order: the depth, then GIT_FETCH_EXTRA_FLAGS (a --depth
  // there wins); without a depth a shallow repository is deepened.
  std::string extra;
  for (const std::string& flag : settings_.git_fetch_flags) {
    absl::StrAppend(&extra, " ", ShellQuote(flag));
  }
  return absl::StrCat(
      options_.job.depth > 0 ? absl::StrCat(" --depth ", options_.job.depth)
                             : "",
      extra,
      options_.job.depth > 0
          ? ""
          : " $([ -f \"$CI_PROJECT_DIR/.git/shallow\" ] && echo --unshallow)",
      // The checkout may belong to another account than the job's: its
      // upload-pack (which gets no -c of ours) is told it is safe.
      " --upload-pack 'git -c safe.directory=* upload-pack' \"$src\" ",
      ShellQuote("+HEAD:refs/remotes/origin/" + ref),
      options_.job.depth > 0 ? "" : " '+refs/tags/*:refs/tags/*'");
}

// After the copy of a git checkout: the project directory, a repository
// holding the job's commit fetched from the checkout, gets HEAD detached at
// that commit, as the runner's checkout leaves it; the files stay the
// copied ones, so changes not committed show as such. Where the fetched
// commit is not the job's (HEAD in the checkout moved on) it only warns.
std::string RunnerEmulator::Job::CheckoutBody() const {
  const std::string& sha = options_.job.sha;
  if (!HasJobCommit()) return "";
  return absl::StrCat(
      "  sha=", ShellQuote(sha), "\n",
      "  if ! { [ \"$(git -C \"$CI_PROJECT_DIR\" rev-parse ",
      ShellQuote(absl::StrCat("refs/remotes/origin/", options_.job.ref.empty()
                                                          ? "HEAD"
                                                          : options_.job.ref)),
      " 2>/dev/null)\" = \"$sha\" ] &&\n",
      "      git -C \"$CI_PROJECT_DIR\" update-ref --no-deref HEAD \"$sha\" ",
      "&&\n", "      git -C \"$CI_PROJECT_DIR\" read-tree HEAD; }; then\n",
      "    echo \"WARNING: $CI_PROJECT_DIR is not a git repository at ",
      "$sha (has HEAD in $src moved?)\"\n", "  fi\n");
}

bool RunnerEmulator::Job::HasJobCommit() const {
  const std::string& sha = options_.job.sha;
  return sha.size() >= 8 && sha.find_first_not_of('0') != std::string::npos;
}

// The file the runner keeps the repository's git settings in, outside the
// project directory: its url.<...>.insteadOf rewrites (which hold the job
// token) and, with FF_GIT_URLS_WITHOUT_TOKENS, its credential helper.
std::string RunnerEmulator::Job::ExternalGitConfigFile() const {
  return project_dir_ + ".tmp/.gitlab-runner.ext.conf";
}

// The runner's external git config (its git auth helper): the remote URL
// with the job token in place of the one without; the GitLab server's base
// URL the same; with GIT_SUBMODULE_FORCE_HTTPS the server's SSH URLs
// (git@<host>: and ssh://git@<host>[:<port>], the host and port from
// CI_SERVER_SHELL_SSH_HOST/PORT, else CI_SERVER_HOST) to HTTPS ones; the
// repository's server too. FF_GIT_URLS_WITHOUT_TOKENS leaves the token
// out of every URL and writes a credential helper that hands git
// $CI_JOB_TOKEN instead. The server is the job's CI_SERVER_URL, whose job
// token this is (the runner takes its config.toml `url`, which is the same
// server there), else `url`.
std::string RunnerEmulator::Job::ExternalGitConfigBody() const {
  const bool with_tokens = !GitUrlsWithoutTokens();
  const auto authed = [this](GitUrl url) { return WithAuth(std::move(url)); };
  const auto plain = [](GitUrl url) {
    url.user.reset();
    return url;
  };
  const auto value = [&](const char* key) { return Setting(key).value_or(""); };
  std::string ssh_host = value("CI_SERVER_SHELL_SSH_HOST");
  if (ssh_host.empty()) ssh_host = value("CI_SERVER_HOST");
  const std::string ssh_port = value("CI_SERVER_SHELL_SSH_PORT");
  const auto ssh = [&](const std::string& base) {
    std::vector<std::pair<std::string, std::string>> list;
    if (!settings_.git_submodule_force_https) return list;
    if (ssh_port.empty() || ssh_port == "22") {
      list.emplace_back(base + "/", absl::StrCat("git@", ssh_host, ":"));
      list.emplace_back(base, absl::StrCat("ssh://git@", ssh_host));
    } else {
      list.emplace_back(base,
                        absl::StrCat("ssh://git@", ssh_host, ":", ssh_port));
    }
    return list;
  };

  const GitUrl repo = GitUrl::Parse(options_.job.repo_url);
  const GitUrl remote = RemoteUrl();
  std::vector<std::pair<std::string, std::string>> rewrites;
  if (remote.String() != plain(remote).String()) {
    rewrites.emplace_back(remote.String(), plain(remote).String());
  }
  // clone_url, when it has a scheme, else the server.
  std::string server = value("CI_SERVER_URL");
  if (server.empty()) server = config_.url;
  const GitUrl clone = GitUrl::Parse(config_.clone_url);
  const GitUrl base = clone.scheme.empty() ? GitUrl::Parse(server) : clone;
  if (base.IsHttp()) {
    if (!with_tokens) {
      for (auto& entry : ssh(base.Trimmed())) rewrites.push_back(entry);
    } else {
      rewrites.emplace_back(authed(base).Trimmed(), base.Trimmed());
      for (auto& entry : ssh(authed(base).Trimmed())) {
        rewrites.push_back(entry);
      }
      if (repo.IsHttp()) {
        GitUrl repo_base = repo;
        repo_base.rest.clear();
        rewrites.emplace_back(authed(repo_base).Trimmed(),
                              plain(repo_base).Trimmed());
      }
    }
  }
  std::string body = absl::StrCat(
      "  ext=", ShellQuote(ExternalGitConfigFile()), "\n", "  mkdir -p ",
      ShellQuote(project_dir_ + ".tmp"), "\n", "  rm -f -- \"$ext\"\n");
  std::vector<std::pair<std::string, std::string>> written;
  for (const auto& entry : rewrites) {
    if (std::find(written.begin(), written.end(), entry) != written.end()) {
      continue;
    }
    written.push_back(entry);
    absl::StrAppend(&body, "  git config --file \"$ext\" --replace-all ",
                    ShellQuote("url." + entry.first + ".insteadOf"), " ",
                    ShellQuote(entry.second), " ",
                    ShellQuote("^" + QuoteMeta(entry.second) + "$"), "\n");
  }
  if (!with_tokens) body += CredentialHelperBody();
  absl::StrAppend(&body, "  export GLR_EXT_GIT_CONFIG_PATH=\"$ext\"\n");
  return body;
}

bool RunnerEmulator::Job::GitUrlsWithoutTokens() const {
  const auto flag = settings_.feature_flags.find("FF_GIT_URLS_WITHOUT_TOKENS");
  return flag != settings_.feature_flags.end() && flag->second;
}

// SSH URLs get the user git when they have none; others the job token, or
// with FF_GIT_URLS_WITHOUT_TOKENS no user at all.
GitUrl RunnerEmulator::Job::WithAuth(GitUrl url) const {
  if (url.scheme == "ssh") {
    if (!url.user) url.user = "git";
  } else if (!GitUrlsWithoutTokens()) {
    url.user = absl::StrCat("gitlab-ci-token:", options_.job.token);
  } else {
    url.user.reset();
  }
  return url;
}

// The git auth helper's remote URL: with a `clone_url` that has a scheme,
// that URL with `<CI_PROJECT_PATH>.git` joined to its path (as Go's
// path.Join does) and the job token put in; else the job's repository URL, as
// GitLab sent it (its token removed with FF_GIT_URLS_WITHOUT_TOKENS).
GitUrl RunnerEmulator::Job::RemoteUrl() const {
  GitUrl clone = GitUrl::Parse(config_.clone_url);
  if (clone.scheme.empty()) {
    GitUrl repo = GitUrl::Parse(options_.job.repo_url);
    return GitUrlsWithoutTokens() ? WithAuth(std::move(repo)) : repo;
  }
  const size_t query =
      std::min(clone.rest.find_first_of("?#"), clone.rest.size());
  const std::string suffix = clone.rest.substr(query);
  const std::string project = Setting("CI_PROJECT_PATH").value_or("");
  clone.rest =
      std::filesystem::path(
          absl::StrCat("/", clone.rest.substr(0, query), "/", project, ".git"))
          .lexically_normal()
          .string() +
      suffix;
  return WithAuth(std::move(clone));
}

// The runner's credential helper in the external git config: git's other
// helpers for the remote's server emptied, then one that hands git the job
// token, and the user gitlab-ci-token. Uses "$ext".
std::string RunnerEmulator::Job::CredentialHelperBody() const {
  GitUrl host = RemoteUrl();
  host.user.reset();
  host.rest.clear();
  const std::string section = absl::StrCat("credential.", host.String());
  return absl::StrCat("  git config -f \"$ext\" --replace-all ",
                      ShellQuote(section + ".helper"),
                      " \"\" && git config -f \"$ext\" --add ",
                      ShellQuote(section + ".helper"), " ",
                      ShellQuote("!f(){ if [ \"$1\" = \"get\" ] ; then echo "
                                 "\"password=${CI_JOB_TOKEN}\" ; fi ; } ; f"),
                      " && git config -f \"$ext\" ",
                      ShellQuote(section + ".username"), " gitlab-ci-token\n");
}

// FF_GIT_URLS_WITHOUT_TOKENS: get_sources first writes the file every
// stage's GIT_CONFIG_GLOBAL names, which includes the user's global git
// configs that are readable ($HOME's, read when the script runs) and the
// external git config, so its credential helper reaches every git the job
// runs, in any directory. With GIT_STRATEGY none or empty, which write no
// external config otherwise, it is written holding the helper alone.
std::string RunnerEmulator::Job::TokenlessGitConfigBody() const {
  if (!GitUrlsWithoutTokens() || project_dir_.empty()) return "";
  std::string body =
      absl::StrCat("seed=", ShellQuote(GlobalGitConfigSeedFile(project_dir_)),
                   "\n", "ext=", ShellQuote(ExternalGitConfigFile()), "\n",
                   "rm -f -- \"$seed\"\n");
  for (const char* user_config :
       {"$HOME/.gitconfig", "$HOME/.config/git/config"}) {
    absl::StrAppend(&body, "if [ -r \"", user_config, "\" ]; then\n",
                    "  git config --file \"$seed\" --add include.path \"",
                    user_config, "\"\n", "fi\n");
  }
  absl::StrAppend(&body,
                  "git config --file \"$seed\" --add include.path \"$ext\"\n");
  if (settings_.git_strategy == "none" || settings_.git_strategy == "empty") {
    absl::StrAppend(&body, "rm -f -- \"$ext\"\n", CredentialHelperBody());
  }
  return body;
}

// The end of get_sources and the start of the cleanup script: `git
// credential reject` for the remote's server and the user gitlab-ci-token,
// so that a credential helper of the user's (credential.helper=store, ...)
// forgets a job token it kept. Only for an http, https or ssh remote with a
// host; its failure (or no git at all) fails nothing.
std::string RunnerEmulator::Job::ClearGitCredentialsBody() const {
  GitUrl remote = RemoteUrl();
  if (remote.host.empty() ||
      (remote.scheme != "http" && remote.scheme != "https" &&
       remote.scheme != "ssh")) {
    return "";
  }
  remote.user.reset();
  remote.rest.clear();
  return absl::StrCat("printf '%s\\n' ",
                      ShellQuote(absl::StrCat("url=", remote.String(),
                                              "\nusername=gitlab-ci-token")),
                      " | git credential reject || true\n");
}

// The runner's git cleanup (before a fetch, and in the cleanup script):
// lock files an interrupted git left and, with `clean_configs`, the
// repository's config and hooks (the submodules' too with normal or
// recursive), so that a job cannot plant them for the next.
std::string RunnerEmulator::Job::GitCleanupBody(bool clean_configs) const {
  const bool submodules = settings_.git_submodule_strategy == "normal" ||
                          settings_.git_submodule_strategy == "recursive";
  std::string cleanup = "  git_dir=\"$CI_PROJECT_DIR/.git\"\n";
  for (const char* file : {"index.lock", "shallow.lock", "HEAD.lock",
                           "hooks/post-checkout", "config.lock"}) {
    absl::StrAppend(&cleanup, "  rm -f -- \"$git_dir/", file, "\"\n");
    if (submodules) {
      absl::StrAppend(
          &cleanup,
          "  [ ! -d \"$git_dir/modules\" ] || find "
          "\"$git_dir/modules\" -name ",
          ShellQuote(std::filesystem::path(file).filename().string()),
          " -type f -delete\n");
    }
  }
  absl::StrAppend(&cleanup,
                  "  [ ! -d \"$git_dir/refs\" ] || find \"$git_dir/refs\" "
                  "-name '*.lock' -type f -delete\n");
  if (clean_configs) {
    absl::StrAppend(&cleanup, "  rm -f -- \"$git_dir/config\"\n",
                    "  rm -rf -- \"$git_dir/hooks\"\n");
  }
  if (submodules && clean_configs) {
    absl::StrAppend(
        &cleanup, "  if [ -d \"$git_dir/modules\" ]; then\n",
        "    find \"$git_dir/modules\" -name config -type f -delete\n",
        "    find \"$git_dir/modules\" -depth -name hooks -type d -exec rm -rf "
        "-- {} +\n",
        "  fi\n");
  }
  return cleanup;
}

// FF_ENABLE_JOB_CLEANUP: the cleanup script also cleans the build
// directory. clone and empty remove the project directory; fetch runs, in
// it, `git clean` with GIT_CLEAN_FLAGS (none with `none`) and `git reset
// --hard`, in the submodules too with normal or recursive; none only says
// it skips the step.
std::string RunnerEmulator::Job::BuildDirCleanupBody() const {
  const auto flag = settings_.feature_flags.find("FF_ENABLE_JOB_CLEANUP");
  if (flag == settings_.feature_flags.end() || !flag->second) return "";
  const std::string& strategy = settings_.git_strategy;
  if (strategy == "clone" || strategy == "empty") {
    return "rm -r -f -- \"$CI_PROJECT_DIR\"\n";
  }
  if (strategy != "fetch") {
    return "echo 'Skipping build directory cleanup step'\n";
  }
  std::string flags;
  for (const std::string& word : settings_.git_clean_flags) {
    absl::StrAppend(&flags, " ", ShellQuote(word));
  }
  std::string body = "cd \"$CI_PROJECT_DIR\"\n";
  if (!flags.empty()) absl::StrAppend(&body, "git clean", flags, "\n");
  absl::StrAppend(&body, "git reset --hard\n");
  const std::string& submodules = settings_.git_submodule_strategy;
  if (submodules == "normal" || submodules == "recursive") {
    const std::string foreach =
        absl::StrCat("git submodule foreach",
                     submodules == "recursive" ? " --recursive" : "");
    if (!flags.empty())
      absl::StrAppend(&body, foreach, " git clean", flags, "\n");
    absl::StrAppend(&body, foreach, " git reset --hard\n");
  }
  return body;
}

// The runner's fetch, in its words and order. First its cleanup of an
// earlier job's repository: lock files an interrupted git left, and (with
// clean_git_config, the custom executor's default) the repository's config
// and hooks, so that a job cannot plant them for the next. Then the notice,
// `git init` with the runner's template settings (it says "Initialized empty
// ..." or "Reinitialized existing Git repository in ..."), the origin remote
// ("Created fresh repository." when it is new, as it is after the config
// was removed), then the fetch, here from the checkout in "$src". The
// origin is the checkout's own origin, else the checkout.
std::string RunnerEmulator::Job::FetchBody() const {
  const int64_t depth = options_.job.depth;
  const std::string cleanup =
      GitCleanupBody(config_.clean_git_config.value_or(true));
  std::string template_settings;
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"init.defaultBranch", "none"},
           {"fetch.recurseSubmodules", "false"},
           {"credential.interactive", "never"},
           {"gc.autoDetach", "false"}}) {
    absl::StrAppend(&template_settings,
                    "  git -C \"$CI_PROJECT_DIR\" config --get ", key,
                    " >/dev/null || git -C \"$CI_PROJECT_DIR\" config ", key,
                    " ", value, "\n");
  }
  // The repository includes the external config (the runner's template
  // does, or its update of an existing repository's config).
  const std::string include =
      "  git -C \"$CI_PROJECT_DIR\" config --replace-all include.path "
      "\"$ext\" '\\.gitlab-runner\\.ext\\.conf$'\n";
  std::string fetch = absl::StrCat(
      "  echo ",
      ShellQuote(depth > 0 ? absl::StrCat("Fetching changes with git depth "
                                          "set to ",
                                          depth, "...")
                           : "Fetching changes..."),
      "\n", "  git -c init.defaultBranch=none init \"$CI_PROJECT_DIR\"\n",
      template_settings, include,
      "  origin=$(git -c \"safe.directory=$src\" -C \"$src\" remote get-url "
      "origin 2>/dev/null) || origin=$src\n",
      "  if git -C \"$CI_PROJECT_DIR\" remote add origin \"$origin\" "
      ">/dev/null 2>&1 ; then\n",
      "    echo 'Created fresh repository.'\n", "  else\n",
      "    git -C \"$CI_PROJECT_DIR\" remote set-url origin \"$origin\"\n",
      "  fi\n", "  git -C \"$CI_PROJECT_DIR\" fetch", FetchArguments(), " ||\n",
      "    echo \"WARNING: cannot fetch $src into $CI_PROJECT_DIR\"\n");
  const auto flag = settings_.feature_flags.find("FF_USE_GIT_NATIVE_CLONE");
  if (settings_.git_strategy != "clone" ||
      flag == settings_.feature_flags.end() || !flag->second) {
    return absl::StrCat(cleanup, ExternalGitConfigBody(), fetch);
  }
  // FF_USE_GIT_NATIVE_CLONE with clone: where git is 2.49 or later the
  // runner runs `git clone --no-checkout` (with the depth, then
  // GIT_CLONE_EXTRA_FLAGS) instead of init and fetch; older git falls back
  // to them. Here the clone is of the checkout's HEAD, then the job's
  // commit is fetched as the ref's remote branch (quietly) for the
  // checkout, and origin is the checkout's origin, as with the fetch.
  const std::string& ref = options_.job.ref;
  std::string clone_flags;
  for (const std::string& word : settings_.git_clone_flags) {
    absl::StrAppend(&clone_flags, " ", ShellQuote(word));
  }
  const std::string notice =
      depth > 0      ? absl::StrCat("Cloning repository for ", ref,
                                    " with git depth set to ", depth, "...")
      : !ref.empty() ? absl::StrCat("Cloning repository for ", ref, "...")
                     : "Cloning repository...";
  return absl::StrCat(
      cleanup, ExternalGitConfigBody(),
      "  current_ver=\"$(git version|cut -d ' ' -f 3)\"\n",
      "  required_ver=\"2.49\"\n",
      "  minimum_ver=\"$(printf '%s\\n%s' \"$required_ver\" \"$current_ver\" | "
      "sort -t '.' -k 1,1n -k 2,2n -k 3,3n | head -n1)\"\n",
      "  if [ \"$minimum_ver\" = \"$required_ver\" ]; then\n",
      "  echo 'Git version at least \"2.49\"'\n", "  echo ", ShellQuote(notice),
      "\n",
      "  git -c init.defaultBranch=none clone --no-checkout -u 'git -c "
      "safe.directory=* upload-pack' \"file://$src\" \"$CI_PROJECT_DIR\"",
      depth > 0 ? absl::StrCat(" --depth ", depth) : "", clone_flags,
      " || exit 1\n", include, "  git -C \"$CI_PROJECT_DIR\" fetch -q",
      FetchArguments(), " ||\n",
      "    echo \"WARNING: cannot fetch $src into $CI_PROJECT_DIR\"\n",
      "  if origin=$(git -c \"safe.directory=$src\" -C \"$src\" remote get-url "
      "origin 2>/dev/null); then\n",
      "    git -C \"$CI_PROJECT_DIR\" remote set-url origin \"$origin\"\n",
      "  fi\n", "  else\n", fetch, "  fi\n");
}

// What the runner's get_sources says of submodules after the sources, for
// every GIT_STRATEGY. run-local does not update them: the checkout's files
// are what the job gets.
std::string RunnerEmulator::Job::SubmodulesBody() const {
  const std::string& strategy = settings_.git_submodule_strategy;
  if (strategy != "normal" && strategy != "recursive") {
    return "echo 'Skipping Git submodules setup'\n";
  }
  const int64_t depth = settings_.git_submodule_depth;
  const bool recursive = strategy == "recursive";
  const std::string notice = absl::StrCat(
      "Updating/initializing submodules", recursive ? " recursively" : "",
      depth > 0 ? absl::StrCat(" with git depth set to ", depth) : "", "...");
  const auto words = [](const std::vector<std::string>& list) {
    std::string text;
    for (const std::string& word : list) {
      absl::StrAppend(&text, " ", ShellQuote(word));
    }
    return text;
  };
  const std::string paths =
      settings_.git_submodule_paths.empty()
          ? ""
          : absl::StrCat(" --", words(settings_.git_submodule_paths));
  const std::string sync = absl::StrCat("git submodule sync",
                                        recursive ? " --recursive" : "", paths);
  // Some submodule commands get the external config explicitly: the
  // submodules' own configs do not include it yet.
  const std::string with_creds =
      "git -c \"include.path=$GLR_EXT_GIT_CONFIG_PATH\"";
  const std::string update = absl::StrCat(
      with_creds, " submodule update --init", recursive ? " --recursive" : "",
      depth > 0 ? absl::StrCat(" --depth ", depth) : "",
      words(settings_.git_submodule_update_flags), paths);
  const std::string foreach =
      absl::StrCat("git submodule foreach", recursive ? " --recursive" : "");
  const std::string clean =
      absl::StrCat(foreach, " git clean",
                   words(settings_.git_clean_flags.empty()
                             ? std::vector<std::string>{"-ffdx"}
                             : settings_.git_clean_flags));
  // With --remote among the update flags the retry first fetches every
  // branch of the submodules' remotes.
  bool remote = false;
  for (const std::string& flag : settings_.git_submodule_update_flags) {
    remote = remote || absl::EqualsIgnoreCase(flag, "--remote");
  }
  // After the update: each submodule includes the external config (at
  // every depth, whatever the strategy), and, unless GIT_LFS_SKIP_SMUDGE,
  // its LFS files are pulled where git-lfs is installed.
  std::string after = absl::StrCat(
      "  echo 'Configuring submodules to use parent git credentials...'\n",
      "  git submodule foreach --recursive git config --replace-all "
      "include.path \"$GLR_EXT_GIT_CONFIG_PATH\"\n");
  if (!settings_.git_lfs_skip_smudge) {
    absl::StrAppend(&after,
                    "  if git lfs version >/dev/null 2>&1 ; then\n"
                    "    echo 'Pulling LFS files...'\n    ",
                    with_creds, " ", foreach.substr(4), " git lfs pull\n",
                    "  fi\n");
  }
  // As the runner's submodule commands, in the repository the checkout
  // became. The submodules' directories as the copy brought them (their
  // .git files point into the checkout) are emptied first, as a fresh
  // checkout leaves them; relative submodule URLs resolve against the
  // checkout's own origin.
  return absl::StrCat(
      "echo ", ShellQuote(notice), "\n",
      "if [ -d \"$CI_PROJECT_DIR/.git\" ]; then\n",
      "  cd \"$CI_PROJECT_DIR\"\n",
      "  if origin=$(git -c \"safe.directory=$src\" -C \"$src\" remote "
      "get-url origin 2>/dev/null); then\n",
      "    git remote add origin \"$origin\" 2>/dev/null || git remote set-url "
      "origin \"$origin\"\n",
      "  fi\n",
      "  git ls-files -s | while read -r mode object stage path; do\n",
      "    if [ \"$mode\" = 160000 ]; then rm -rf -- \"$path\" && mkdir -p -- "
      "\"$path\"; fi\n",
      "  done\n", "  git submodule init\n", "  ", sync, "\n", "  ", clean, "\n",
      "  ", foreach, " git reset --hard\n", "  if ", update, " ; then\n",
      "    echo 'Updated submodules'\n", "    ", sync, "\n", "  else\n",
      "    echo 'Updating submodules failed. Retrying...'\n",
      remote ? absl::StrCat("    ", with_creds, " ", foreach.substr(4),
                            " git fetch origin "
                            "'+refs/heads/*:refs/remotes/origin/*'\n")
             : "",
      "    ", sync, "\n", "    ", update, "\n", "    ", foreach,
      " git reset --hard\n", "  fi\n", "  ", clean, "\n", after, "else\n",
      "  echo 'WARNING: the project directory is not a git repository: no "
      "submodules to update'\n",
      "fi\n");
}

// After the checkout, unless GIT_LFS_SKIP_SMUDGE: the runner's `git lfs
// pull` (and an empty line after it) where git-lfs is installed; nothing
// where it is not. Here the objects come from the checkout's own LFS store,
// which the pull adds what it had to download to.
std::string RunnerEmulator::Job::LfsPullBody() const {
  if (settings_.git_lfs_skip_smudge) return "";
  return "  if git lfs version >/dev/null 2>&1 ; then\n"
         "    lfs_store=\"$(git -c \"safe.directory=$src\" -C \"$src\" "
         "rev-parse --path-format=absolute --git-common-dir)/lfs\"\n"
         "    git -C \"$CI_PROJECT_DIR\" -c \"lfs.storage=$lfs_store\" lfs "
         "pull\n"
         "    echo\n"
         "  fi\n";
}

std::string RunnerEmulator::Job::GetSourcesBody() const {
  // Unless the job set GIT_LFS_SKIP_SMUDGE, the runner sets it for all of
  // get_sources (LFS files come with the `git lfs pull` after the
  // checkout).
  const std::string lfs =
      settings_.git_lfs_skip_smudge ? "" : "export GIT_LFS_SKIP_SMUDGE=1\n";
  // GIT_STRATEGY none keeps whatever the directory holds; empty starts
  // from an empty one; neither gets the project's files.
  if (settings_.git_strategy == "none") {
    return lfs +
           "echo 'Skipping Git repository setup'\n"
           "mkdir -p \"$CI_PROJECT_DIR\"\n"
           "echo 'Skipping Git checkout'\n";
  }
  if (settings_.git_strategy == "empty") {
    return lfs +
           "echo 'Skipping Git repository setup and creating an empty build "
           "directory'\n"
           "rm -rf -- \"$CI_PROJECT_DIR\"\n"
           "mkdir -p \"$CI_PROJECT_DIR\"\n"
           "echo 'Skipping Git checkout'\n";
  }
  std::string body = lfs;
  if (settings_.git_strategy == "clone") {
    // clone starts from nothing: an earlier job's directory is removed.
    absl::StrAppend(&body, "rm -rf -- \"$CI_PROJECT_DIR\"\n");
  }
  const std::string& src = options_.sources.project_dir;
  if (src.empty()) {
    absl::StrAppend(&body, "mkdir -p \"$CI_PROJECT_DIR\"\n",
                    "echo \"Created fresh project directory "
                    "$CI_PROJECT_DIR\"\n");
    return body;
  }
  // The runner's `git clean` with GIT_CLEAN_FLAGS after its checkout
  // removes what an earlier job left that git does not track. Here it runs
  // before the checkout's files are copied, so that the checkout's own
  // untracked files still arrive; its "Removing ..." lines come after
  // "Checking out ..." as in the runner's log.
  std::string clean;
  if (!settings_.git_clean_flags.empty()) {
    std::string flags;
    for (const std::string& flag : settings_.git_clean_flags) {
      absl::StrAppend(&flags, " ", ShellQuote(flag));
    }
    clean = absl::StrCat("  git -C \"$CI_PROJECT_DIR\" clean", flags, "\n");
  }
  std::string skip_cases;
  std::string tar_excludes;
  for (const std::string& path : options_.sources.exclude) {
    absl::StrAppend(&skip_cases, ShellQuote(path), "|", ShellQuote(path),
                    "/*) continue ;; ");
    absl::StrAppend(&tar_excludes, " --exclude=", ShellQuote("./" + path));
  }
  absl::StrAppend(&body, "src=", ShellQuote(src), "\n",
                  // The job may run as another user than the checkout's owner
                  // (the agent's pool accounts): git would refuse the
                  // repository as of dubious ownership, and a plain copy would
                  // take every ignored file (build trees) too.
                  "if git -c \"safe.directory=$src\" -C \"$src\" rev-parse "
                  "--is-inside-work-tree >/dev/null 2>&1; then\n",
                  FetchBody());
  if (!settings_.git_checkout) {
    // GIT_CHECKOUT false: the commit is fetched (as
    // refs/remotes/origin/<ref>), no HEAD and no file checked out.
    absl::StrAppend(&body, "  echo 'Skipping Git checkout'\n", "else\n",
                    "  mkdir -p \"$CI_PROJECT_DIR\"\n",
                    "  echo 'Skipping Git checkout'\n", "fi\n");
    return body;
  }
  absl::StrAppend(
      &body,
      HasJobCommit()
          ? absl::StrCat(
                "  echo ",
                ShellQuote(absl::StrCat(
                    "Checking out ", options_.job.sha.substr(0, 8),
                    " as detached HEAD (ref is ", options_.job.ref, ")...")),
                "\n")
          : "",
      clean,
      "  git -c \"safe.directory=$src\" -C \"$src\" ls-files -z -co "
      "--exclude-standard |\n",
      "    while IFS= read -r -d '' f; do\n",
      skip_cases.empty()
          ? ""
          : absl::StrCat("      case \"$f\" in ", skip_cases, "esac\n"),
      "      if [ -e \"$src/$f\" ] || [ -L \"$src/$f\" ]; then "
      "printf '%s\\0' \"$f\"; fi\n",
      "    done |\n",
      // "--": a file named like an option (--help, -l) is a file to
      // copy, not an option of cp.
      "    (cd \"$src\" && xargs -0 -r cp -a --parents -t "
      "\"$CI_PROJECT_DIR\" --)\n",
      CheckoutBody(), LfsPullBody(), "else\n",
      // Not a git checkout: its files are copied as they are.
      "  mkdir -p \"$CI_PROJECT_DIR\"\n",
      "  echo \"Copying local project $src to $CI_PROJECT_DIR\"\n",
      "  tar -C \"$src\"", tar_excludes,
      " -cf - . | tar -C \"$CI_PROJECT_DIR\" -xf -\n", "fi\n");
  return body;
}

// Like the runner's shell writer: each command without the white space
// around it (Go's strings.TrimSpace), shown as "$ <command>" (its first line
// and a note for a multi-line one), an empty one as an empty line.
namespace {
std::string CommandsBody(const std::vector<std::string>& commands) {
  std::string body;
  for (const std::string& entry : commands) {
    const std::string command(absl::StripAsciiWhitespace(entry));
    if (command.empty()) {
      absl::StrAppend(&body, "echo\n\n");
      continue;
    }
    std::string shown = command;
    if (const size_t nl = shown.find('\n'); nl != std::string::npos) {
      shown = shown.substr(0, nl) + " # collapsed multi-line command";
    }
    absl::StrAppend(&body, "printf '%s\\n' ", ShellQuote("$ " + shown), "\n",
                    command, "\n");
  }
  return body;
}
}  // namespace

// A user step's commands; after_script first says so, the others run the
// runner's pre_build_script before them and post_build_script after them.
std::string RunnerEmulator::Job::StepBody(const gitlab::JobStep& step) const {
  std::string body;
  const bool after = step.name == "after_script";
  if (after) {
    body = "printf '%s\\n' 'Running after script...'\n";
  } else if (!config_.pre_build_script.empty()) {
    body = CommandsBody({config_.pre_build_script});
  }
  body += CommandsBody(step.script);
  if (!after && !config_.post_build_script.empty()) {
    body += CommandsBody({config_.post_build_script});
  }
  if (body.empty()) body = ":\n";
  return body;
}

// The commands get_sources runs before fetching the sources (`pre`) or
// after them and the submodules: the runner's pre_get_sources_script, then
// the job's hook of that name, or the job's post_get_sources_script hook,
// then the runner's. None with GIT_STRATEGY none or empty.
std::string RunnerEmulator::Job::SourcesHooksBody(bool pre) const {
  if (settings_.git_strategy == "none" || settings_.git_strategy == "empty") {
    return "";
  }
  const std::string name =
      pre ? "pre_get_sources_script" : "post_get_sources_script";
  std::vector<std::string> commands;
  const std::string& runner_hook =
      pre ? config_.pre_get_sources_script : config_.post_get_sources_script;
  if (pre && !runner_hook.empty()) commands.push_back(runner_hook);
  for (const gitlab::JobHook& hook : options_.job.hooks) {
    if (hook.name == name) {
      commands.insert(commands.end(), hook.script.begin(), hook.script.end());
    }
  }
  if (!pre && !runner_hook.empty()) commands.push_back(runner_hook);
  return CommandsBody(commands);
}

// Like gitlab-runner's artifacts-downloader: each dependency's artifacts
// (from the local store, where upload_artifacts_* put them) are unpacked
// into the project directory, replacing what is in their way without
// following a link; a missing one fails the stage.
std::string RunnerEmulator::Job::DownloadBody() const {
  const std::string& store = options_.sources.artifact_store;
  if (store.empty()) {
    return "echo 'WARNING: run-local has no artifact store to download "
           "dependency artifacts from'\n";
  }
  std::string body;
  for (const gitlab::JobDependency& dependency : options_.job.dependencies) {
    if (dependency.artifacts_filename.empty()) continue;
    const std::string source = absl::StrCat(store, "/", dependency.id);
    absl::StrAppend(
        &body, "echo ",
        ShellQuote(absl::StrCat("Downloading artifacts for ", dependency.name,
                                " (", dependency.id, ")...")),
        "\n", "if [ ! -d ", ShellQuote(source), " ]; then echo ",
        ShellQuote(absl::StrCat("ERROR: Downloading artifacts from local "
                                "store: no artifacts of job ",
                                dependency.id)),
        "; exit 1; fi\n",
        // What is in the way (a link the checkout holds, say) is replaced,
        // never written through, as gitlab-runner's extraction does: a
        // link or file where the artifacts have a directory is removed
        // first, and cp removes each file's destination before it writes.
        "(cd ", ShellQuote(source),
        " && find . -mindepth 1 -type d -print0) | while IFS= read -r -d '' "
        "d; do if [ -L \"$d\" ] || { [ -e \"$d\" ] && [ ! -d \"$d\" ]; }; "
        "then rm -f -- \"$d\"; fi; done\n",
        "cp -a --remove-destination ", ShellQuote(source + "/."), " .\n");
  }
  return body.empty() ? ":\n" : body;
}

std::string RunnerEmulator::Job::ExpandJobValue(std::string_view value) const {
  const std::vector<Variable> vars = Variables();
  return ExpandVariableValue(value, [&vars](std::string_view name) {
    return LookupVariable(vars, name);
  });
}

std::optional<RunnerEmulator::Job::CacheConfig>
RunnerEmulator::Job::NewCacheConfig(
    const std::string& user_key, std::string* body, std::string_view action,
    const std::function<bool(const std::string&)>& check) const {
  const auto echo = [body](const std::string& line) {
    absl::StrAppend(body, "echo ", ShellQuote(line), "\n");
  };
  // No key: "<job name>/<ref>" (GitLab always sends one).
  std::string raw = absl::StrCat(options_.job.name, "/", options_.job.ref);
  while (!raw.empty() && raw.back() == '/') raw.pop_back();
  if (!user_key.empty()) raw = ExpandJobValue(user_key);
  const auto hashed = settings_.feature_flags.find("FF_HASH_CACHE_KEYS");
  const bool hash = hashed != settings_.feature_flags.end() && hashed->second;
  std::string human = raw;
  if (!hash) {
    const std::optional<std::string> sanitized = SanitizeCacheKey(raw);
    if (!sanitized.has_value()) {
      echo(absl::StrCat("cache key ", GoQuote(raw), " could not be sanitized"));
      human.clear();
    } else {
      human = *sanitized;
      if (human != raw) {
        echo(absl::StrCat("cache key ", GoQuote(raw), " sanitized to ",
                          GoQuote(human)));
      }
    }
  }
  if (check && !check(human)) return std::nullopt;
  if (human.empty()) {
    echo(absl::StrCat("Skipping cache ", std::string(action),
                      " due to empty cache key"));
    return std::nullopt;
  }
  // <cache dir>/<namespace>/<project>[-empty]/<key>/cache.zip, relative to
  // the project directory.
  std::string project = project_slug_;
  if (settings_.git_strategy == "empty") project += "-empty";
  const auto archive = [&](const std::string& key) {
    return std::filesystem::path(
               absl::StrCat(cache_dir_, "/", project, "/", key, "/cache.zip"))
        .lexically_normal()
        .lexically_relative(project_dir_)
        .string();
  };
  const std::string sha = Sha256Hex(human);
  return CacheConfig{human, archive(hash ? sha : human),
                     archive(hash ? human : sha)};
}

// The runner's cache extraction: each key in turn until one extracts.
std::string RunnerEmulator::Job::ExtractCacheCommands(
    const std::vector<CacheConfig>& configs,
    const std::vector<std::string>& paths, int depth) const {
  const std::string indent(2 * depth, ' ');
  const CacheConfig& config = configs.front();
  std::string body = absl::StrCat(
      indent, "echo ",
      ShellQuote(absl::StrCat("Checking cache for ", config.human_key, "...")),
      "\n", indent, "if ", ShellQuote(options_.runner_command),
      " cache-extractor --file ", ShellQuote(config.archive), " --timeout ",
      settings_.cache_request_timeout, " ; then\n", indent,
      "  echo 'Successfully extracted cache'\n", indent, "else\n", indent,
      "  echo 'Failed to extract cache'\n");
  const auto flag =
      settings_.feature_flags.find("FF_CLEAN_UP_FAILED_CACHE_EXTRACT");
  if (flag != settings_.feature_flags.end() && flag->second) {
    for (const std::string& path : paths) {
      absl::StrAppend(&body, indent, "  echo ",
                      ShellQuote(absl::StrCat("Removing ", path)), "\n", indent,
                      "  rm -r -f -- ", ShellQuote(path), "\n");
    }
  }
  if (configs.size() > 1) {
    absl::StrAppend(
        &body, ExtractCacheCommands(
                   std::vector<CacheConfig>(configs.begin() + 1, configs.end()),
                   paths, depth + 1));
  }
  absl::StrAppend(&body, indent, "fi\n");
  return body;
}

// Like the runner's guard around its helper: a missing helper only warns.
static std::string GuardRunnerCommand(const std::string& runner_command,
                                      std::string_view action,
                                      const std::string& commands) {
  if (runner_command.empty()) {
    return absl::StrCat(
        "echo ",
        ShellQuote(absl::StrCat(std::string(action),
                                " is not supported by this executor.")),
        "\n");
  }
  return absl::StrCat(
      "if ", ShellQuote(runner_command), " --version >/dev/null 2>&1 ; then\n",
      commands, "else\n", "  echo ",
      ShellQuote(absl::StrCat("Missing ", runner_command, ". ",
                              std::string(action), " is disabled.")),
      "\n", "fi\n");
}

RunnerEmulator::Job::CacheScript RunnerEmulator::Job::RestoreCacheScript()
    const {
  CacheScript script;
  std::string body;
  bool any = false;
  for (const gitlab::JobCache& cache : options_.job.caches) {
    if (cache.paths.empty() && !cache.untracked) continue;
    any = true;
    std::optional<CacheConfig> config =
        NewCacheConfig(cache.key, &body, "extraction");
    if (!config.has_value()) continue;
    const std::string policy = ExpandJobValue(cache.policy);
    script.failure = CheckCachePolicy(policy, config->human_key);
    if (!script.failure.ok()) return script;
    if (policy == "push") {
      absl::StrAppend(
          &body, "echo ",
          ShellQuote(absl::StrCat("Not downloading cache ", config->human_key,
                                  " due to policy")),
          "\n");
      continue;
    }
    std::vector<CacheConfig> configs = {*config};
    for (const std::string& key : cache.fallback_keys) {
      const std::string expanded = ExpandJobValue(key);
      if (expanded.empty()) continue;
      if (std::optional<CacheConfig> fallback =
              NewCacheConfig(expanded, &body, "extraction")) {
        configs.push_back(*fallback);
      }
    }
    // CACHE_FALLBACK_KEY, unless it names a protected ref's cache.
    const std::vector<Variable> vars = Variables();
    const std::string fallback_key = LookupVariable(vars, "CACHE_FALLBACK_KEY");
    if (!fallback_key.empty()) {
      const auto allowed = [&](const std::string& key) {
        std::string trimmed = key;
        while (!trimmed.empty() &&
               (trimmed.back() == '.' || trimmed.back() == ' ')) {
          trimmed.pop_back();
        }
        if (!absl::EndsWith(trimmed, "-protected")) return true;
        absl::StrAppend(
            &body, "echo ",
            ShellQuote(absl::StrCat("CACHE_FALLBACK_KEY ", GoQuote(key),
                                    " not allowed to end in \"-protected\"")),
            "\n");
        return false;
      };
      if (std::optional<CacheConfig> fallback =
              NewCacheConfig(fallback_key, &body, "extraction", allowed)) {
        configs.push_back(*fallback);
      }
    }
    absl::StrAppend(&body, GuardRunnerCommand(
                               options_.runner_command, "Extracting cache",
                               ExtractCacheCommands(configs, cache.paths, 1)));
  }
  if (any) script.body = body;
  return script;
}

RunnerEmulator::Job::CacheScript RunnerEmulator::Job::ArchiveCacheScript(
    bool on_success) const {
  CacheScript script;
  std::string body;
  bool any = false;
  for (const gitlab::JobCache& cache : options_.job.caches) {
    const bool when =
        cache.when == "always" ||
        (on_success ? cache.when == "on_success" || cache.when.empty()
                    : cache.when == "on_failure");
    if (!when) continue;
    if (cache.paths.empty() && !cache.untracked) continue;
    any = true;
    std::optional<CacheConfig> config =
        NewCacheConfig(cache.key, &body, "archiving");
    if (!config.has_value()) continue;
    const std::string policy = ExpandJobValue(cache.policy);
    script.failure = CheckCachePolicy(policy, config->human_key);
    if (!script.failure.ok()) return script;
    if (policy == "pull") {
      absl::StrAppend(
          &body, "echo ",
          ShellQuote(absl::StrCat("Not uploading cache ", config->human_key,
                                  " due to policy")),
          "\n");
      continue;
    }
    std::string args =
        absl::StrCat(" cache-archiver --file ", ShellQuote(config->archive),
                     " --alternate-file ", ShellQuote(config->alternate),
                     " --timeout ", settings_.cache_request_timeout);
    for (const std::string& path : cache.paths) {
      absl::StrAppend(&args, " --path ", ShellQuote(path));
    }
    if (cache.untracked) absl::StrAppend(&args, " --untracked");
    absl::StrAppend(
        &body, GuardRunnerCommand(
                   options_.runner_command, "Creating cache",
                   absl::StrCat(
                       "  echo ",
                       ShellQuote(absl::StrCat("Creating cache ",
                                               config->human_key, "...")),
                       "\n", "  if ", ShellQuote(options_.runner_command), args,
                       " ; then\n", "    echo 'Created cache'\n", "  else\n",
                       "    echo 'Failed to create cache'\n", "  fi\n")));
  }
  if (any) script.body = body;
  return script;
}

std::string RunnerEmulator::Job::UploadBody(bool on_success) const {
  const std::string& store = options_.sources.artifact_store;
  std::string body;
  if (store.empty()) {
    return "echo 'WARNING: Missing artifact store. Uploading artifacts is "
           "disabled.'\n";
  }
  const std::string dest = absl::StrCat(store, "/", options_.job.id);
  absl::StrAppend(&body, "dest=", ShellQuote(dest), "\n", "IFS=\n",
                  "shopt -s nullglob globstar\n");
  bool archive = false;
  for (const gitlab::JobArtifact& artifact : options_.job.artifacts) {
    const bool runs = artifact.when == "always" ||
                      (on_success ? artifact.when == "on_success"
                                  : artifact.when == "on_failure");
    if (!runs) continue;
    if (artifact.artifact_type == "dotenv") {
      absl::StrAppend(&body, DotenvUploadBody(artifact));
      continue;
    }
    if (!archive) absl::StrAppend(&body, "mkdir -p \"$dest\"\n");
    archive = true;
    absl::StrAppend(&body, "echo ",
                    ShellQuote(absl::StrCat(
                        "Uploading artifacts",
                        artifact.name.empty() ? "" : " " + artifact.name,
                        " to local store")),
                    "\n");
    if (artifact.untracked) {
      absl::StrAppend(&body,
                      "echo 'WARNING: artifacts:untracked is not supported "
                      "by run-local'\n");
    }
    for (const std::string& pattern : artifact.paths) {
      absl::StrAppend(&body,
                      ForEachMatch(pattern, "[ -e \"$f\" ] || [ -L \"$f\" ]",
                                   "cp -a --parents -- \"$f\" "
                                   "\"$dest\"/"));
    }
    for (const std::string& pattern : artifact.exclude) {
      absl::StrAppend(&body, "(cd \"$dest\" && p=", ShellQuote(pattern),
                      " && for f in $p; do rm -rf -- \"$f\"; done)\n");
    }
  }
  if (archive) absl::StrAppend(&body, "echo \"Artifacts stored in $dest\"\n");
  return body;
}

// Like the runner's upload of a gzip report: each file the patterns match
// goes up as it is, in order (to <store>/<job id>.dotenv/1, 2, ..., their
// paths listed in `paths` there); none is only an error line.
std::string RunnerEmulator::Job::DotenvUploadBody(
    const gitlab::JobArtifact& artifact) const {
  const std::string dir =
      DotenvReportDir(options_.sources.artifact_store, options_.job.id);
  std::string body =
      absl::StrCat("echo 'Uploading artifacts as \"dotenv\" to local store'\n",
                   "d=", ShellQuote(dir), "\n",
                   // Made empty for this upload by PrepareStore.
                   "mkdir -p \"$d\"\n", "n=0\n");
  for (const std::string& pattern : artifact.paths) {
    absl::StrAppend(&body, ForEachMatch(pattern, "[ -f \"$f\" ]",
                                        "n=$((n+1)); cp -- \"$f\" \"$d/$n\"; "
                                        "printf '%s\\n' \"$f\" >> "
                                        "\"$d/paths\""));
  }
  absl::StrAppend(&body,
                  "if [ \"$n\" = 0 ]; then "
                  "echo 'ERROR: No files to upload'; fi\n");
  return body;
}

// Before an upload stage: the directories it writes in the artifact store
// (the job's archive, its dotenv report) are made afresh by run-local and
// handed to the account the job runs as (the owner of its project
// directory), so that nothing another job put there beforehand, under a job
// id it guessed, is taken as this job's upload; whatever was there is moved
// aside. The store itself is run-local's alone. Where run-local cannot hand
// a directory over (it is not root, the job runs as another account), the
// directory is left open to everyone for the upload.
Failure RunnerEmulator::Job::PrepareStore(bool on_success) {
  const std::string& store = options_.sources.artifact_store;
  if (store.empty()) return {};
  std::vector<std::string> dirs;
  for (const gitlab::JobArtifact& artifact : options_.job.artifacts) {
    const bool runs = artifact.when == "always" ||
                      (on_success ? artifact.when == "on_success"
                                  : artifact.when == "on_failure");
    if (!runs || artifact.paths.empty()) continue;
    dirs.push_back(artifact.artifact_type == "dotenv"
                       ? DotenvReportDir(store, options_.job.id)
                       : absl::StrCat(store, "/", options_.job.id));
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  if (!dirs.empty()) {
    std::error_code ignored;  // mkdir below says what is wrong.
    std::filesystem::create_directories(store, ignored);
  }
  struct stat project = {};
  const bool known_owner = !project_dir_.empty() &&
                           lstat(project_dir_.c_str(), &project) == 0 &&
                           S_ISDIR(project.st_mode);
  for (const std::string& dir : dirs) {
    const auto failed = [this, &dir](const std::string& what) {
      const std::string message = absl::StrCat(
          "ERROR: Uploading artifacts to local store: cannot prepare ", dir,
          ": ", what, ": ", std::strerror(errno));
      Log(message);
      return Failure{FailureKind::kSystem, 0, message};
    };
    struct stat there = {};
    if (lstat(dir.c_str(), &there) == 0) {
      const std::string aside =
          absl::StrCat(store, "/.replaced-",
                       std::filesystem::path(dir).filename().string(), "-",
                       std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count());
      if (rename(dir.c_str(), aside.c_str()) != 0) {
        return failed("cannot move what is there aside");
      }
      Diagnose("warn",
               absl::StrCat("the artifact store held ", dir,
                            " before this job's upload; moved to ", aside));
    }
    if (mkdir(dir.c_str(), 0755) != 0) return failed("mkdir");
    const int fd =
        open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return failed("open");
    bool open_to_all = false;
    if (known_owner && project.st_uid != geteuid()) {
      open_to_all = fchown(fd, project.st_uid, project.st_gid) != 0;
    } else if (!known_owner) {
      open_to_all = true;
    }
    if (open_to_all && fchmod(fd, 0777) != 0) {
      close(fd);
      return failed("chmod");
    }
    close(fd);
  }
  return {};
}

// What GitLab answers the upload of a dotenv report: a report it cannot
// read is refused (400), so the runner's upload, and with it the job,
// fails; the report is not kept.
Failure RunnerEmulator::Job::CheckDotenvReport() {
  const std::string& store = options_.sources.artifact_store;
  const bool has_report = std::any_of(
      options_.job.artifacts.begin(), options_.job.artifacts.end(),
      [](const gitlab::JobArtifact& a) { return a.artifact_type == "dotenv"; });
  if (store.empty() || !has_report) return {};
  const std::string dir = DotenvReportDir(store, options_.job.id);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> report =
      ReadDotenvReport(dir);
  if (report.ok()) return {};
  // The job's account wrote the report, and the job may still run
  // processes: removed without following what it put there.
  DiscardDotenvReport(dir);
  // A report GitLab reads but refuses, or files that are not the ones the
  // upload wrote (links, FIFOs: not read, as the runner would not send
  // them).
  const std::string message =
      absl::StrCat("ERROR: Uploading artifacts as \"dotenv\" to local store: ",
                   absl::IsInvalidArgument(report.status())
                       ? "GitLab would refuse it (400 Bad Request): "
                       : "",
                   report.status().message());
  Log(message);
  return {FailureKind::kBuild, 1, message};
}

std::string RunnerEmulator::Job::CleanupFileVariablesBody() const {
  std::string body = ":\n";
  if (project_dir_.empty()) return body;
  // The runner's cleanup script: the credentials a helper kept are
  // rejected, the job's files beside the project dir removed (GITLAB_ENV,
  // the external git config with its token, the GIT_CONFIG_GLOBAL seed,
  // file variables), then its git cleanup (the repository's config and
  // hooks too, as clean_git_config says, or when it is not set unless
  // GIT_STRATEGY is none).
  absl::StrAppend(&body, ClearGitCredentialsBody(), "rm -f -- ",
                  ShellQuote(GitlabEnvFile()), "\n", "rm -f -- ",
                  ShellQuote(ExternalGitConfigFile()), "\n", "rm -f -- ",
                  ShellQuote(GlobalGitConfigSeedFile(project_dir_)), "\n");
  for (const Variable& v : Variables()) {
    if (!v.file || !IsShellName(v.key)) continue;
    absl::StrAppend(&body, "rm -f -- ",
                    ShellQuote(project_dir_ + ".tmp/" + v.key), "\n");
  }
  absl::StrAppend(&body, BuildDirCleanupBody(),
                  GitCleanupBody(config_.clean_git_config.value_or(
                      settings_.git_strategy != "none")));
  return body;
}

void RunnerEmulator::Job::Fail(const Failure& failure,
                               std::string_view section) {
  (void)section;
  result_.exit_code = failure.exit_code;
  switch (failure.kind) {
    case FailureKind::kNone:
      return;
    case FailureKind::kBuild:
      result_.status = JobStatus::kFailed;
      result_.failure_reason = "script_failure";
      // The custom executor's build error reads `exit status <the first
      // line of BUILD_EXIT_CODE_FILE, as written>` (Go's words for an
      // exec's exit without the file), unchanged up to the final line.
      result_.message = absl::StrCat("Job failed: ", failure.message);
      return;
    case FailureKind::kSystem:
      result_.status = JobStatus::kFailed;
      result_.failure_reason = "runner_system_failure";
      result_.message =
          absl::StrCat("Job failed (system failure): ", failure.message);
      return;
    case FailureKind::kConfig:
      // The runner's configuration error, which GitLab knows as a reason of
      // its own; only system failures say "(system failure)".
      result_.status = JobStatus::kFailed;
      result_.failure_reason = "runner_configuration_error";
      result_.message = absl::StrCat("Job failed: ", failure.message);
      return;
    case FailureKind::kTimeout:
      result_.status = JobStatus::kFailed;
      result_.failure_reason = "job_execution_timeout";
      result_.message = absl::StrCat("Job failed: ", failure.message);
      return;
    case FailureKind::kCancel: {
      const std::optional<CancelMode> mode = CancelRequested();
      if (mode == CancelMode::kInterrupt) {
        result_.status = JobStatus::kFailed;
        result_.failure_reason = "runner_interrupted";
        result_.message = "Job failed (system failure): aborted: terminated";
      } else {
        result_.status = JobStatus::kCanceled;
        result_.failure_reason.clear();
        result_.message = "Job failed: canceled";
      }
      return;
    }
  }
}

bool RunnerEmulator::Job::PauseUnlessStopped(
    std::chrono::milliseconds interval) {
  const TimePoint resume = SteadyClock::now() + interval;
  while (SteadyClock::now() < resume && JobContextStop() == StopReason::kNone) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  return JobContextStop() == StopReason::kNone;
}

void RunnerEmulator::Job::RunStages() {
  const StopCheck job_stop = [this] { return JobContextStop(); };
  const auto interrupted = [this] {
    return JobContextStop() != StopReason::kNone;
  };

  StartSection("prepare_script", "Preparing environment");
  // The bash shell's line, the hostname config_exec named quoted as Go
  // quotes it: in double quotes, where the shell expands $ and `.
  const std::string via =
      hostname_.empty() ? "" : absl::StrCat(" via ", hostname_);
  // Like the runner's prepare script: a GITLAB_ENV file an earlier job
  // left in the same project directory is not read.
  Failure failure = RunStage(
      "prepare_script",
      absl::StrCat("echo ", GoQuote("Running on $(hostname)" + via + "..."),
                   "\n", "rm -f -- ", ShellQuote(GitlabEnvFile()), "\n"),
      /*export_variables=*/false, /*cd_project=*/false, ContextDeadline(),
      job_stop);
  EndSection();
  // The runner's prepare context ends with the prepare_script stage.
  preparing_ = false;
  if (failure.kind == FailureKind::kSystem) {
    // The runner's words for a prepare_script that could not run.
    failure.message =
        absl::StrCat("prepare environment: ", failure.message,
                     ". Check https://docs.gitlab.com/runner/shells/"
                     "#shell-profile-loading for more information");
  }
  if (!failure.ok()) return Fail(failure, "prepare_script");

  // get_sources_timeout: one deadline for all get_sources attempts and
  // clear_worktree, from now on; unset, or longer than the job timeout, it
  // is the job timeout (with a warning in the runner's own log).
  const SteadyClock::duration sources_timeout =
      WithinJobTimeout("get_sources_timeout", config_.get_sources_timeout);
  const TimePoint sources_deadline =
      Earlier(job_deadline_, SteadyClock::now() + sources_timeout);
  // Past it (and not past the job's own deadline), the job ends as a
  // job_execution_timeout at once: no later stage but cleanup_exec runs.
  const auto sources_timed_out = [&] {
    return sources_deadline < job_deadline_ &&
           SteadyClock::now() >= sources_deadline;
  };
  const Failure sources_timeout_failure{
      FailureKind::kTimeout, 0,
      absl::StrCat("get sources timeout: exceeded timeout of ",
                   FormatSeconds(sources_timeout))};
  const int attempts = settings_.get_sources_attempts;
  Failure before_steps;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (attempt > 1) {
      const bool paused = PauseUnlessStopped(std::min<milliseconds>(
          StageRetryWait(attempt), std::chrono::duration_cast<milliseconds>(
                                       sources_deadline - SteadyClock::now())));
      if (sources_timed_out()) return Fail(sources_timeout_failure, "");
      if (!paused) return Fail(StopFailure(JobContextStop()), "");
    }
    // The runner clears the work tree once, before the second attempt:
    // `git rm` and `git clean` in the project dir (its .git stays). When
    // that fails, so does the attempt, without get_sources.
    Failure cleared;
    if (attempt == 2) {
      StartSection("clear_worktree",
                   "Deleting all tracked and untracked files due to source "
                   "fetch failure");
      cleared = RunStage("clear_worktree",
                         "echo 'Deleting tracked and untracked files...'\n"
                         "if [ -d \"$CI_PROJECT_DIR\" ]; then\n"
                         "  cd \"$CI_PROJECT_DIR\"\n"
                         "  git rm -rf --ignore-unmatch --quiet .\n"
                         "  git clean -ffdx -q\n"
                         "fi\n",
                         /*export_variables=*/true, /*cd_project=*/false,
                         sources_deadline, job_stop);
      EndSection();
      if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
      if (sources_timed_out()) return Fail(sources_timeout_failure, "");
    }
    // An unknown GIT_SUBMODULE_STRATEGY: the runner cannot write the
    // stage's script, a system failure, and run_exec is not called (nor
    // is the stage's header printed).
    if (!cleared.ok()) {
      before_steps = cleared;
    } else if (settings_.git_submodule_strategy == "invalid") {
      before_steps =
          Failure{FailureKind::kSystem, 0, "unknown GIT_SUBMODULE_STRATEGY"};
    } else {
      StartSection("get_sources", "Getting source from Git repository");
      before_steps = RunStage(
          "get_sources",
          absl::StrCat("export GIT_TERMINAL_PROMPT=0 "
                       "GCM_INTERACTIVE=Never\n",
                       TokenlessGitConfigBody(), SourcesHooksBody(/*pre=*/true),
                       GetSourcesBody(), SubmodulesBody(),
                       SourcesHooksBody(/*pre=*/false),
                       ClearGitCredentialsBody()),
          /*export_variables=*/true, /*cd_project=*/false, sources_deadline,
          job_stop);
      EndSection();
    }
    if (before_steps.ok() || interrupted() || sources_timed_out()) break;
    // The runner's retry says so in the job log before the next attempt.
    if (attempt < attempts) Log("WARNING: Retrying...");
  }
  if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
  if (!before_steps.ok() && sources_timed_out()) {
    return Fail(sources_timeout_failure, "");
  }

  // restore_cache: skipped without a cache entry that has paths; tried up
  // to RESTORE_CACHE_ATTEMPTS times. The helper's failures only warn.
  if (before_steps.ok()) {
    const CacheScript restore = RestoreCacheScript();
    for (int attempt = 1; (restore.body.has_value() || !restore.failure.ok()) &&
                          attempt <= settings_.restore_cache_attempts;
         ++attempt) {
      if (attempt > 1 && !PauseUnlessStopped(StageRetryWait(attempt))) {
        return Fail(StopFailure(JobContextStop()), "");
      }
      Failure restored = restore.failure;
      if (restored.ok()) {
        StartSection("restore_cache", "Restoring cache");
        restored = RunStage("restore_cache", *restore.body,
                            /*export_variables=*/true, /*cd_project=*/true,
                            job_deadline_, job_stop);
        EndSection();
      }
      if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
      if (restored.ok()) break;
      if (attempt == settings_.restore_cache_attempts) {
        before_steps = restored;
      } else {
        Log("WARNING: Retrying...");
      }
    }
  }

  const bool has_dependency_artifacts = std::any_of(
      options_.job.dependencies.begin(), options_.job.dependencies.end(),
      [](const gitlab::JobDependency& d) {
        return !d.artifacts_filename.empty();
      });
  // ARTIFACT_DOWNLOAD_ATTEMPTS: the runner tries the stage again, without
  // clearing anything in between.
  for (int attempt = 1; before_steps.ok() && has_dependency_artifacts &&
                        attempt <= settings_.artifact_download_attempts;
       ++attempt) {
    if (attempt > 1 && !PauseUnlessStopped(StageRetryWait(attempt))) {
      return Fail(StopFailure(JobContextStop()), "");
    }
    StartSection("download_artifacts", "Downloading artifacts");
    const Failure downloaded =
        RunStage("download_artifacts", DownloadBody(),
                 /*export_variables=*/true, /*cd_project=*/true, job_deadline_,
                 job_stop);
    EndSection();
    if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
    if (downloaded.ok()) break;
    if (attempt == settings_.artifact_download_attempts) {
      before_steps = downloaded;
    } else {
      Log("WARNING: Retrying...");
    }
  }

  Failure first_failure = before_steps;
  const gitlab::JobStep* after_script = nullptr;
  // RUNNER_SCRIPT_TIMEOUT bounds all user steps together: one deadline,
  // set when the first one starts.
  // Both timeouts are read before the first step, as in the runner; zero is
  // no timeout of its own (the job's deadline still holds).
  TimePoint steps_deadline = job_deadline_;
  const std::chrono::nanoseconds job_left = job_deadline_ - SteadyClock::now();
  const std::chrono::nanoseconds script_timeout = StageTimeout(
      "RUNNER_SCRIPT_TIMEOUT", std::chrono::nanoseconds(0), job_left);
  const std::chrono::nanoseconds after_script_timeout = StageTimeout(
      "RUNNER_AFTER_SCRIPT_TIMEOUT", kDefaultAfterScriptTimeout, job_left);
  if (script_timeout.count() > 0) {
    steps_deadline =
        Earlier(steps_deadline, SteadyClock::now() + script_timeout);
  }
  if (before_steps.ok()) {
    for (const gitlab::JobStep& step : options_.job.steps) {
      if (step.name == "after_script") {
        after_script = &step;
        continue;
      }
      if (!first_failure.ok()) continue;
      const std::string stage = "step_" + step.name;
      StartSection(stage, absl::StrCat("Executing \"", stage,
                                       "\" stage of the job script"));
      const TimePoint deadline = steps_deadline;
      const StopCheck step_stop = [this] {
        const StopReason reason = JobContextStop();
        if (reason != StopReason::kNone) return reason;
        if (CancelRequested() == CancelMode::kGraceful) {
          graceful_handled_ = true;
          return StopReason::kCancel;
        }
        return StopReason::kNone;
      };
      in_step_ = true;
      first_failure = RunStage(stage, StepBody(step), /*export_variables=*/true,
                               /*cd_project=*/true, deadline, step_stop);
      EndSection();
      in_step_ = false;
      // Cut off by RUNNER_SCRIPT_TIMEOUT, not by the job's deadline: the
      // runner's error is the script context's own.
      if (first_failure.kind == FailureKind::kTimeout &&
          steps_deadline < job_deadline_ &&
          SteadyClock::now() < job_deadline_) {
        first_failure.message = "script timeout: context deadline exceeded";
      }
    }
  } else {
    for (const gitlab::JobStep& step : options_.job.steps) {
      if (step.name == "after_script") after_script = &step;
    }
  }
  // A job timeout, an abort or a graceful cancel outside the steps ends the
  // whole context: nothing but cleanup_exec runs any more.
  if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
  // A graceful cancel ended only the steps' context: the runner says so
  // before after_script.
  if (graceful_handled_) Log("WARNING: script canceled externally (UI, API)");

  const bool steps_success = first_failure.ok();
  // A step cut off by the script timeout (the job's own deadline ended the
  // context above) leaves after_script CI_JOB_STATUS=timedout. The runner
  // sets it only when it got as far as the steps: after a failed
  // get_sources or download, the later stages still see "running".
  if (before_steps.ok()) {
    job_status_variable_ = steps_success       ? "success"
                           : graceful_handled_ ? "canceled"
                           : first_failure.kind == FailureKind::kTimeout
                               ? "timedout"
                               : "failed";
  }
  if (before_steps.ok() && after_script != nullptr &&
      !after_script->script.empty()) {
    StartSection("after_script", "Running after_script");
    const TimePoint deadline =
        Earlier(job_deadline_, SteadyClock::now() + after_script_timeout);
    Failure after = RunStage("after_script", StepBody(*after_script),
                             /*export_variables=*/true, /*cd_project=*/true,
                             deadline, job_stop);
    EndSection();
    if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
    if (!after.ok()) {
      // AFTER_SCRIPT_IGNORE_ERRORS (a Go bool, default true): when false, a
      // failed after_script fails a job that had not failed yet.
      if (settings_.after_script_ignore_errors) {
        Log(absl::StrCat(
            "WARNING: after_script failed, but job will continue unaffected: ",
            after.message.empty() ? "stopped" : after.message));
      } else if (first_failure.ok()) {
        first_failure = after;
      }
    }
  }
  // The cache and the uploads follow the job's state after after_script.
  const bool success = first_failure.ok();

  const CacheScript archive = ArchiveCacheScript(success);
  Failure archive_failure = archive.failure;
  if (archive_failure.ok() && archive.body.has_value()) {
    StartSection(success ? "archive_cache" : "archive_cache_on_failure",
                 success ? "Saving cache for successful job"
                         : "Saving cache for failed job");
    archive_failure = RunStage(
        success ? "archive_cache" : "archive_cache_on_failure", *archive.body,
        /*export_variables=*/true, /*cd_project=*/true, job_deadline_,
        job_stop);
    EndSection();
    if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
  }
  // The runner's priority: the job's own failure, then the cache's, then
  // the upload's.
  if (success && !archive_failure.ok()) first_failure = archive_failure;

  const bool has_upload =
      std::any_of(options_.job.artifacts.begin(), options_.job.artifacts.end(),
                  [success](const gitlab::JobArtifact& a) {
                    return !a.paths.empty() &&
                           (a.when == "always" ||
                            a.when == (success ? "on_success" : "on_failure"));
                  });
  if (has_upload) {
    StartSection(
        success ? "upload_artifacts_on_success" : "upload_artifacts_on_failure",
        success ? "Uploading artifacts for successful job"
                : "Uploading artifacts for failed job");
    Failure upload = PrepareStore(success);
    if (upload.ok()) {
      upload = RunStage(success ? "upload_artifacts_on_success"
                                : "upload_artifacts_on_failure",
                        UploadBody(success), /*export_variables=*/true,
                        /*cd_project=*/true, job_deadline_, job_stop);
    }
    if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
    if (upload.ok()) upload = CheckDotenvReport();
    EndSection();
    if (!upload.ok() && first_failure.ok()) first_failure = upload;
  }

  StartSection("cleanup_file_variables",
               "Cleaning up project directory and file based variables");
  Failure cleanup = RunStage(
      "cleanup_file_variables", CleanupFileVariablesBody(),
      /*export_variables=*/true, /*cd_project=*/false, job_deadline_, job_stop);
  EndSection();
  if (interrupted()) return Fail(StopFailure(JobContextStop()), "");
  if (!cleanup.ok()) {
    Diagnose("warn",
             absl::StrCat("cleanup_file_variables failed: ", cleanup.message));
  }
  if (!first_failure.ok()) return Fail(first_failure, "");
  result_.status = JobStatus::kSuccess;
  result_.failure_reason.clear();
  result_.exit_code = 0;
  result_.message.clear();
}

JobResult RunnerEmulator::Job::Run() {
  start_ = SteadyClock::now();
  job_deadline_ = start_ + std::chrono::seconds(job_timeout_seconds_);
  // Read once, before the preparation; bad values are reported together
  // below. The masking needs them from the first line on.
  settings_ = ReadSettings();
  std::vector<std::string> masked_values;
  for (const gitlab::JobVariable& v : options_.job.variables) {
    if (v.masked) masked_values.push_back(v.value);
  }
  masker_.emplace(std::move(masked_values),
                  settings_.feature_flags["FF_MASK_ALL_DEFAULT_TOKENS"]);
  // The runner's header: its version line (name, version, revision), then
  // the runner's name, short token and system ID.
  Log(absl::StrCat("Running with gitlab-runner ", kRunnerVersion, " (",
                   kRunnerRevision, ")"));
  Log(absl::StrCat(
      "  on ", config_.name, " ", config_.runner_short_token, ", system ID: ",
      config_.system_id.empty() ? MachineSystemId() : config_.system_id));
  if (const std::string flags = FeatureFlagInfo(); !flags.empty()) {
    Log(absl::StrCat("  feature flags: ", flags));
  }
  // Like the runner: prepare_timeout bounds all attempts; unset, or longer
  // than the job timeout, it is the job timeout.
  const SteadyClock::duration prepare_timeout =
      WithinJobTimeout("prepare_timeout", config_.prepare_timeout);
  prepare_deadline_ = start_ + prepare_timeout;
  if (!settings_.errors.empty()) {
    for (size_t i = 0; i < settings_.errors.size(); ++i) {
      Log(absl::StrCat(i == 0 ? "WARNING: " : "", settings_.errors[i]));
    }
  }
  preparing_ = true;
  StartSection("prepare_executor", "Preparing the \"custom\" executor");

  bool prepared = false;
  for (int attempt = 1; attempt <= kPreparationAttempts; ++attempt) {
    attempt_ = attempt;
    result_.attempts = attempt;
    config_done_ = false;
    const Failure failure = PrepareAttempt(attempt);
    if (failure.ok()) {
      prepared = true;
      break;
    }
    // The runner's retryCreateExecutor: the executor's cleanup first; a
    // build or configuration error ends the preparation without a word;
    // any other error is logged and waited out, after the last attempt
    // too, before the job fails with it.
    RunCleanupExec(attempt);
    RemoveTempDir();
    if (failure.kind != FailureKind::kSystem) {
      Fail(failure, "prepare");
      break;
    }
    if (JobContextStop() != StopReason::kNone) {
      Fail(StopFailure(JobContextStop()), "prepare");
      break;
    }
    Log(absl::StrCat("ERROR: Preparation failed: ", failure.message));
    Log(absl::StrCat("Will be retried in ",
                     FormatSeconds(config_.preparation_retry_interval),
                     " ..."));
    if (!PauseUnlessStopped(config_.preparation_retry_interval)) {
      Fail(StopFailure(JobContextStop()), "prepare");
      break;
    }
    if (attempt == kPreparationAttempts) {
      Fail(failure, "prepare");
      break;
    }
  }
  EndSection();
  if (prepared) {
    RunStages();
    RunCleanupExec(attempt_);
    RemoveTempDir();
  }
  EndSection();
  if (result_.status == JobStatus::kSuccess) {
    Log("Job succeeded");
  } else {
    Log(absl::StrCat("ERROR: ", result_.message));
  }
  result_.duration =
      std::chrono::duration_cast<milliseconds>(SteadyClock::now() - start_);
  return result_;
}

RunnerEmulator::RunnerEmulator(Options options)
    : options_(std::move(options)) {}

JobResult RunnerEmulator::Run() {
  Job job(options_, cancel_, force_kill_);
  return job.Run();
}

void RunnerEmulator::ForceKill(bool cleanup_too) {
  const int level = cleanup_too ? 2 : 1;
  int now = force_kill_->load();
  while (now < level && !force_kill_->compare_exchange_weak(now, level)) {
  }
}

void RunnerEmulator::Cancel(CancelMode mode) {
  int expected = -1;
  cancel_.compare_exchange_strong(expected, static_cast<int>(mode));
}

}  // namespace gdt::ci
