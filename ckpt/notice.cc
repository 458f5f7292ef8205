#include "ckpt/notice.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace gdt::ckpt {
namespace {

using std::chrono::system_clock;

std::atomic<int> g_forward{0};

void OnForwardedSignal(int signal) { g_forward.store(signal); }

// How a process treats a signal, from the SigIgn/SigCgt masks in
// /proc/<pid>/status.
enum class Disposition { kDefault, kIgnored, kCaught, kGone };

Disposition DispositionOf(pid_t pid, int signal) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return Disposition::kGone;
  const uint64_t bit = uint64_t{1} << (signal - 1);
  bool ignored = false, caught = false, seen = false;
  std::string line;
  while (std::getline(in, line)) {
    const bool ign = line.rfind("SigIgn:", 0) == 0;
    const bool cgt = line.rfind("SigCgt:", 0) == 0;
    if (!ign && !cgt) continue;
    uint64_t mask = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line.substr(7)),
                             &mask)) {
      continue;
    }
    seen = true;
    (ign ? ignored : caught) = (mask & bit) != 0;
  }
  if (!seen) return Disposition::kGone;
  if (caught) return Disposition::kCaught;
  return ignored ? Disposition::kIgnored : Disposition::kDefault;
}

// The processes the notice is for: the group of `leader` (the command
// gdt-ckpt started, the leader of its process group), or with
// `workers_only` its children still in that group (torchrun's workers, not
// torchrun itself nor what the workers start, e.g. `gdt-ckpt save`).
std::vector<pid_t> NoticeTargets(pid_t leader, bool workers_only) {
  std::vector<pid_t> targets;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    pid_t pid = 0;
    if (!absl::SimpleAtoi(name, &pid)) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp) || pgrp != leader) continue;
    if (state == "Z") continue;
    if (workers_only && (pid == leader || ppid != leader)) continue;
    targets.push_back(pid);
  }
  return targets;
}

// Delivers the notice signal to every target that handles it, once. A
// target that leaves the signal at its default action (a process still
// starting, e.g. Python importing torch before it installs its handler, or a
// launcher that never handles it) is not signalled: the default action of
// USR1/USR2/TERM/INT ends the process, and a notice must not kill work. It
// gets the signal on a later call, once it installs a handler. Returns how
// many targets still wait for a handler.
class NoticeDelivery {
 public:
  NoticeDelivery(pid_t leader, int signal, bool workers_only)
      : leader_(leader), signal_(signal), workers_only_(workers_only) {}

  int Deliver() {
    int waiting = 0;
    for (const pid_t pid : NoticeTargets(leader_, workers_only_)) {
      if (done_.contains(pid)) continue;
      switch (DispositionOf(pid, signal_)) {
        case Disposition::kCaught:
          if (kill(pid, signal_) == 0) ++sent_;
          done_.insert(pid);
          break;
        case Disposition::kIgnored:
        case Disposition::kGone:
          done_.insert(pid);
          break;
        case Disposition::kDefault:
          ++waiting;
          break;
      }
    }
    return waiting;
  }

  int sent() const { return sent_; }

 private:
  const pid_t leader_;
  const int signal_;
  const bool workers_only_;
  std::set<pid_t> done_;
  int sent_ = 0;
};

}  // namespace

absl::StatusOr<NoticePlan> PlanNotice(
    const std::map<std::string, std::string>& env,
    system_clock::time_point now) {
  NoticePlan plan;
  const std::string sig = EnvValue(env, "GDT_CHECKPOINT_SIGNAL");
  if (sig.empty() || sig == "USR1" || sig == "SIGUSR1") {
    plan.signal = SIGUSR1;
  } else if (sig == "USR2" || sig == "SIGUSR2") {
    plan.signal = SIGUSR2;
  } else if (sig == "TERM" || sig == "SIGTERM") {
    plan.signal = SIGTERM;
  } else if (sig == "INT" || sig == "SIGINT") {
    plan.signal = SIGINT;
  } else if (sig == "none") {
    plan.signal = 0;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "GDT_CHECKPOINT_SIGNAL=", sig, ": use USR1, USR2, TERM, INT or none"));
  }
  const std::string to = EnvValue(env, "GDT_CHECKPOINT_SIGNAL_TO");
  if (to == "workers") {
    plan.workers_only = true;
  } else if (!to.empty() && to != "group") {
    return absl::InvalidArgumentError(absl::StrCat(
        "GDT_CHECKPOINT_SIGNAL_TO=", to, ": use group or workers"));
  }
  plan.flag_file = EnvValue(env, "GDT_CHECKPOINT_NOTICE_FILE");
  if (plan.flag_file.empty() && !EnvValue(env, "GDT_CHECKPOINT_DIR").empty()) {
    plan.flag_file = EnvValue(env, "GDT_CHECKPOINT_DIR") + "/.notice";
  }
  if (plan.flag_file.empty()) {
    return absl::InvalidArgumentError(
        "neither GDT_CHECKPOINT_NOTICE_FILE nor GDT_CHECKPOINT_DIR is set");
  }
  int64_t notice = 300;
  if (const std::string text = EnvValue(env, "GDT_CHECKPOINT_NOTICE");
      !text.empty()) {
    if (!absl::SimpleAtoi(text, &notice) || notice < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GDT_CHECKPOINT_NOTICE=", text, ": not a number of seconds"));
    }
  }
  const std::string timeout_text = EnvValue(env, "CI_JOB_TIMEOUT");
  if (timeout_text.empty()) return plan;
  int64_t timeout = 0;
  if (!absl::SimpleAtoi(timeout_text, &timeout) || timeout <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CI_JOB_TIMEOUT=", timeout_text, ": not a positive number of seconds"));
  }
  system_clock::time_point start = now;
  if (const std::string text = EnvValue(env, "CI_JOB_STARTED_AT");
      !text.empty()) {
    absl::Time parsed;
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, text, &parsed, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CI_JOB_STARTED_AT=", text, ": not an RFC 3339 time (", error, ")"));
    }
    // A start after now is the two clocks disagreeing (GitLab's and this
    // host's; or a time past what the clock holds): now is the better
    // guess, and the notice comes no earlier than the timeout says.
    if (parsed < absl::FromChrono(now)) start = absl::ToChronoTime(parsed);
  }
  plan.deadline = start + std::chrono::seconds(timeout);
  plan.notice_at = plan.deadline - std::chrono::seconds(notice);
  return plan;
}

int RunWithNotice(const std::vector<std::string>& argv,
                  std::map<std::string, std::string> env,
                  const NoticePlan& plan, std::ostream& err,
                  NoticeBroadcast* broadcast) {
  env["GDT_CHECKPOINT_NOTICE_FILE"] = plan.flag_file;
  std::remove(plan.flag_file.c_str());
  SpawnOptions options;
  options.argv = argv;
  options.env = std::move(env);
  options.capture_output = false;
  options.new_process_group = true;
  struct sigaction action = {};
  action.sa_handler = OnForwardedSignal;
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaction(s, &action, nullptr);
  auto child = Subprocess::Spawn(options);
  if (!child.ok()) {
    err << "gdt-ckpt run: cannot start " << argv.front() << ": "
        << child.status().message() << "\n";
    return 2;
  }
  std::optional<NoticeDelivery> delivery;
  auto next_delivery = std::chrono::steady_clock::now();
  // Writes the flag file and signals the command; `from_gang`: another
  // member announced first; `note`: who gave the notice when it was not a
  // member (the coordinator preempting the gang), with its deadline
  // `note_deadline_s` (Unix seconds; 0 = unknown).
  const auto give_notice = [&](bool from_gang, const std::string& note = "",
                               int64_t note_deadline_s = 0) {
    std::error_code error;
    std::filesystem::create_directories(
        std::filesystem::path(plan.flag_file).parent_path(), error);
    std::ofstream flag(plan.flag_file);
    // The coordinator's deadline, when it gave the notice; else the job's.
    flag << (note_deadline_s > 0
                 ? note_deadline_s
                 : absl::ToUnixSeconds(absl::FromChrono(plan.deadline)))
         << "\n";
    const bool written = static_cast<bool>(flag.flush());
    int waiting = 0;
    if (plan.signal != 0) {
      delivery.emplace((*child)->pid(), plan.signal, plan.workers_only);
      waiting = delivery->Deliver();
    }
    err << "gdt-ckpt run: checkpoint notice";
    if (!note.empty()) {
      err << " (" << note << ")";
    } else if (from_gang) {
      err << " (announced by another member of the gang)";
    }
    if (!note.empty() && note_deadline_s > 0) {
      err << ": the gang stops in "
          << std::max<int64_t>(
                 0, note_deadline_s - absl::ToUnixSeconds(absl::FromChrono(
                                          system_clock::now())))
          << " s at the latest";
    } else if (plan.notice_at.has_value()) {
      err << ": the job times out in "
          << std::chrono::duration_cast<std::chrono::seconds>(
                 plan.deadline - system_clock::now())
                 .count()
          << " s";
    }
    err << "; " << (written ? "wrote " : "cannot write the flag file ")
        << plan.flag_file << "\n";
    if (waiting > 0) {
      err << "gdt-ckpt run: " << waiting << " process"
          << (waiting == 1 ? " does" : "es do") << " not handle "
          << "SIG" << sigabbrev_np(plan.signal)
          << " yet: each gets it once it installs a handler (the flag file "
             "is there already)\n";
    }
  };
  const auto broadcast_failed = [&](const absl::Status& status) {
    err << "gdt-ckpt run: warning: the gang's notice is not shared: "
        << status.message() << "\n";
    broadcast = nullptr;
  };
  bool noticed = !plan.notice_at.has_value() && broadcast == nullptr;
  auto next_check = std::chrono::steady_clock::now();
  while (true) {
    auto step =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    if (!noticed && plan.notice_at.has_value()) {
      const auto left = *plan.notice_at - system_clock::now();
      if (left <= std::chrono::milliseconds(0)) {
        if (broadcast != nullptr) {
          const absl::Status announced = broadcast->Announce(
              absl::ToUnixSeconds(absl::FromChrono(plan.deadline)));
          if (!announced.ok()) broadcast_failed(announced);
        }
        give_notice(false);
        noticed = true;
      } else if (left < std::chrono::milliseconds(100)) {
        step = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::milliseconds>(left);
      }
    }
    if (!noticed && broadcast != nullptr &&
        std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      const absl::StatusOr<std::optional<std::string>> heard =
          broadcast->Announced();
      if (!heard.ok()) {
        broadcast_failed(heard.status());
        noticed = !plan.notice_at.has_value();
      } else if (heard->has_value()) {
        // "<deadline>[ <note>]": a member writes the deadline alone.
        const std::string& value = **heard;
        const size_t space = value.find(' ');
        int64_t deadline_s = 0;
        std::string note;
        if (space != std::string::npos &&
            absl::SimpleAtoi(value.substr(0, space), &deadline_s)) {
          note = value.substr(space + 1);
        }
        give_notice(true, note, deadline_s);
        noticed = true;
      }
    }
    // Processes that had no handler at the notice (or started later) get
    // the signal as soon as they install one.
    if (delivery.has_value() &&
        std::chrono::steady_clock::now() >= next_delivery) {
      next_delivery =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      delivery->Deliver();
    }
    if (auto status = (*child)->WaitUntil(step); status.has_value()) {
      return status->code();
    }
    if (const int s = g_forward.exchange(0); s != 0) (*child)->SignalGroup(s);
  }
}

std::string EnvValue(const std::map<std::string, std::string>& env,
                     const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

}  // namespace gdt::ckpt
