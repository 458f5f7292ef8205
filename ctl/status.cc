#include "ctl/status.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/exit_code.h"
#include "common/terminal_text.h"
#include "ctl/admin_token.h"
#include "nlohmann/json.hpp"
#include "rendezvous/coordinator_client.h"

namespace gdt::ctl {
namespace {

// Widest cells of the tables; longer values end in "...".
constexpr size_t kMaxGangIdWidth = 48;
constexpr size_t kMaxHostWidth = 24;
constexpr size_t kMaxAddressWidth = 24;
constexpr size_t kMaxLabelsWidth = 28;
constexpr size_t kRecentFailures = 5;

std::string GangStateText(v1::GangState state) {
  switch (state) {
    case v1::GANG_STATE_FORMING:
      return "forming";
    case v1::GANG_STATE_RUNNING:
      return "running";
    case v1::GANG_STATE_DONE:
      return "done";
    case v1::GANG_STATE_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

// Display order of gang states.
int StateOrder(v1::GangState state) {
  switch (state) {
    case v1::GANG_STATE_FORMING:
      return 0;
    case v1::GANG_STATE_RUNNING:
      return 1;
    case v1::GANG_STATE_FAILED:
      return 2;
    default:
      return 3;
  }
}

// A gang that holds nothing any more: done, or failed with every member
// gone.
bool Finished(const v1::GangStatus& gang) {
  if (gang.state() == v1::GANG_STATE_DONE) return true;
  if (gang.state() != v1::GANG_STATE_FAILED) return false;
  return gang.members_size() > 0 &&
         std::all_of(gang.members().begin(), gang.members().end(),
                     [](const v1::MemberStatus& m) { return m.left(); });
}

std::string Age(int64_t then_ms, int64_t now_ms) {
  if (then_ms <= 0) return "-";
  const int64_t seconds = std::max<int64_t>(0, (now_ms - then_ms) / 1000);
  if (seconds < 120) return absl::StrCat(seconds, "s");
  if (seconds < 7200) return absl::StrCat(seconds / 60, "m");
  if (seconds < 172800) return absl::StrCat(seconds / 3600, "h");
  return absl::StrCat(seconds / 86400, "d");
}

// Names, labels and reasons come from jobs, agents and operators: every
// cell and line is made safe for a terminal (common/terminal_text.h) and
// measured and cut in characters, never inside one.
std::string Truncate(const std::string& text, size_t width) {
  return TruncateDisplay(TerminalSafe(text), width);
}

// Word-wraps `text` after `first_prefix` (on the first line) or `indent`
// (on the others) so that no line exceeds kStatusWidth; words longer than a
// line are cut.
std::string Wrap(const std::string& first_prefix, const std::string& indent,
                 const std::string& text) {
  std::string out;
  std::string line = TerminalSafe(first_prefix);
  size_t line_width = DisplayWidth(line);
  bool line_has_word = false;
  const std::string safe = TerminalSafe(text);
  for (absl::string_view word : absl::StrSplit(safe, ' ', absl::SkipEmpty())) {
    const size_t needed =
        line_width + (line_has_word ? 1 : 0) + DisplayWidth(word);
    if (line_has_word && needed > kStatusWidth) {
      out += line + "\n";
      line = indent;
      line_width = DisplayWidth(line);
      line_has_word = false;
    }
    if (line_has_word) {
      line += " ";
      ++line_width;
    }
    const std::string piece = TruncateDisplay(
        word, kStatusWidth > line_width ? kStatusWidth - line_width : 0);
    line += piece;
    line_width += DisplayWidth(piece);
    line_has_word = true;
  }
  return out + line + "\n";
}

// Left-aligned columns separated by two spaces, each cell cut to its column's
// maximum (0 = none); the last column is not padded.
std::string Table(const std::vector<std::vector<std::string>>& input,
                  const std::vector<size_t>& max_widths = {},
                  const std::string& indent = "") {
  std::vector<std::vector<std::string>> rows = input;
  std::vector<size_t> widths;
  for (auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      row[i] = TerminalSafe(row[i]);
      if (i < max_widths.size() && max_widths[i] > 0) {
        row[i] = TruncateDisplay(row[i], max_widths[i]);
      }
      widths[i] = std::max(widths[i], DisplayWidth(row[i]));
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line += std::string(widths[i] - DisplayWidth(row[i]) + 2, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += Truncate(line, kStatusWidth) + "\n";
  }
  return out;
}

std::string Labels(const v1::HostSpec& host) {
  std::vector<std::string> labels;
  for (const auto& [key, value] : host.labels()) {
    labels.push_back(absl::StrCat(key, "=", value));
  }
  std::sort(labels.begin(), labels.end());
  return labels.empty() ? "-" : absl::StrJoin(labels, ",");
}

struct Summary {
  int hosts_up = 0;
  int hosts_down = 0;
  int hosts_drained = 0;
  int gpus_leased = 0;
  int gpus_free = 0;  // On up hosts.
  int slots_used = 0;
  int slots_total = 0;               // CPU member slots on up CPU-only hosts.
  std::map<std::string, int> gangs;  // Live gangs by state.
};

Summary Summarize(const v1::GetStatusResponse& status) {
  Summary summary;
  summary.gangs = {{"forming", 0}, {"running", 0}, {"failed", 0}};
  for (const v1::HostStatus& host : status.hosts()) {
    const bool up = host.state() == v1::HOST_STATE_UP;
    if (up) ++summary.hosts_up;
    if (host.state() == v1::HOST_STATE_DOWN) ++summary.hosts_down;
    if (host.state() == v1::HOST_STATE_DRAINED) ++summary.hosts_drained;
    const int gpus = host.host().gpus_size();
    if (gpus > 0) {
      summary.gpus_leased += host.leased_gpus_size();
      if (up) summary.gpus_free += std::max(0, gpus - host.leased_gpus_size());
    } else {
      summary.slots_used += static_cast<int>(host.members_running());
      if (up) {
        summary.slots_total +=
            static_cast<int>(std::max<uint32_t>(1, host.host().cpu_slots()));
      }
    }
  }
  for (const v1::GangStatus& gang : status.gangs()) {
    if (!Finished(gang)) ++summary.gangs[GangStateText(gang.state())];
  }
  return summary;
}

// Failed gangs, most recent first.
std::vector<const v1::GangStatus*> Failures(
    const v1::GetStatusResponse& status) {
  std::vector<const v1::GangStatus*> failed;
  for (const v1::GangStatus& gang : status.gangs()) {
    if (gang.state() == v1::GANG_STATE_FAILED) failed.push_back(&gang);
  }
  std::stable_sort(failed.begin(), failed.end(),
                   [](const v1::GangStatus* a, const v1::GangStatus* b) {
                     return a->created_unix_ms() > b->created_unix_ms();
                   });
  return failed;
}

std::string MemberTable(const v1::GangStatus& gang, const std::string& indent,
                        bool with_names) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::MemberStatus& member : gang.members()) {
    const std::string state =
        member.left()      ? "left"
        : member.present() ? (member.node_rank() >= 0 ? "running" : "present")
                           : "absent";
    std::vector<std::string> row = {
        absl::StrCat("member ", member.member_index(), "/", gang.key().size()),
        absl::StrCat("job ", member.job_id())};
    if (with_names)
      row.push_back(member.job_name().empty() ? "-" : member.job_name());
    row.push_back(state);
    row.push_back(member.node_rank() >= 0
                      ? absl::StrCat("rank ", member.node_rank())
                      : "rank -");
    row.push_back(member.host_name().empty() ? "-" : member.host_name());
    row.push_back(
        member.gpu_indices_size() > 0
            ? absl::StrCat("gpus ", absl::StrJoin(member.gpu_indices(), ","))
            : "gpus -");
    row.push_back(member.exit_code() >= 0
                      ? absl::StrCat("exit ", member.exit_code())
                      : "exit -");
    rows.push_back(std::move(row));
  }
  std::vector<size_t> caps = {0, 0};
  if (with_names) caps.push_back(24);
  caps.insert(caps.end(), {0, 0, kMaxHostWidth, 16});
  std::string out = Table(rows, caps, indent);
  std::vector<std::string> missing;
  for (uint32_t index = 1; index <= gang.key().size(); ++index) {
    const bool joined =
        std::any_of(gang.members().begin(), gang.members().end(),
                    [index](const v1::MemberStatus& m) {
                      return m.member_index() == index;
                    });
    if (!joined) missing.push_back(absl::StrCat(index));
  }
  if (!missing.empty()) {
    out += Wrap(indent + "not joined: member ", indent + "  ",
                absl::StrJoin(missing, ", "));
  }
  return out;
}

int Present(const v1::GangStatus& gang) {
  int present = 0;
  for (const v1::MemberStatus& member : gang.members()) {
    if (member.present() && !member.left()) ++present;
  }
  return present;
}

// The state with an elastic gang's size: "running 1/2 (elastic 1..2)" once
// admitted, "forming (elastic 1..2)" before.
std::string GangStateWithSize(const v1::GangStatus& gang) {
  const std::string state = GangStateText(gang.state());
  if (gang.nodes_min() == 0) return state;
  const std::string range =
      absl::StrCat("(elastic ", gang.nodes_min(), "..", gang.key().size(), ")");
  if (gang.state() == v1::GANG_STATE_FORMING) {
    return absl::StrCat(state, " ", range);
  }
  int ranked = 0;
  for (const v1::MemberStatus& member : gang.members()) {
    if (member.node_rank() >= 0) ++ranked;
  }
  return absl::StrCat(state, " ", ranked, "/", gang.key().size(), " ", range);
}

std::string Master(const v1::GangStatus& gang) {
  return gang.master_port() != 0
             ? absl::StrCat(gang.master_addr(), ":", gang.master_port())
             : "-";
}

nlohmann::json GangJson(const v1::GangStatus& gang) {
  nlohmann::json members = nlohmann::json::array();
  for (const v1::MemberStatus& member : gang.members()) {
    members.push_back({
        {"member_index", member.member_index()},
        {"job_id", member.job_id()},
        {"job_name", member.job_name()},
        {"present", member.present()},
        {"left", member.left()},
        {"node_rank", member.node_rank()},
        {"host", member.host_name()},
        {"gpus", std::vector<uint32_t>(member.gpu_indices().begin(),
                                       member.gpu_indices().end())},
        {"exit_code", member.exit_code()},
    });
  }
  return {
      {"gang_id", gang.gang_id()},
      {"instance", gang.key().instance()},
      {"group_name", gang.key().group_name()},
      {"project_id", gang.key().project_id()},
      {"pipeline_id", gang.key().pipeline_id()},
      {"size", gang.key().size()},
      {"state", GangStateText(gang.state())},
      {"finished", Finished(gang)},
      {"epoch", gang.epoch()},
      {"reason", gang.reason()},
      {"master_addr", gang.master_addr()},
      {"master_port", gang.master_port()},
      {"created_unix_ms", gang.created_unix_ms()},
      {"preemptible", gang.preemptible()},
      {"preemption_planned_by", gang.preemption_planned_by()},
      {"preemption_stop_by_unix_ms", gang.preemption_stop_by_unix_ms()},
      {"preemptions", gang.preemptions()},
      {"preempted_epoch", gang.preempted_epoch()},
      {"preempted_by", gang.preempted_by()},
      {"preempted_lost_gpu_hours", gang.preempted_lost_gpu_hours()},
      {"nodes_min", gang.nodes_min()},
      {"members", members},
  };
}

// The gang `query` names: an exact id, else the only id starting with it.
absl::StatusOr<const v1::GangStatus*> FindGang(
    const v1::GetStatusResponse& status, const std::string& query) {
  std::vector<const v1::GangStatus*> matches;
  for (const v1::GangStatus& gang : status.gangs()) {
    if (gang.gang_id() == query) return &gang;
    if (absl::StartsWith(gang.gang_id(), query)) matches.push_back(&gang);
  }
  if (matches.size() == 1) return matches[0];
  if (matches.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no gang '", query, "' (see `gdt-coord status --all` for gang ids)"));
  }
  std::vector<std::string> ids;
  for (const v1::GangStatus* gang : matches) ids.push_back(gang->gang_id());
  // Like an unknown gang, an ambiguous prefix is an answer about the
  // cluster, not bad usage: exit 1 (docs/operations.md).
  return WithExitCode(absl::InvalidArgumentError(absl::StrCat(
                          "'", query, "' matches ", matches.size(),
                          " gangs: ", Truncate(absl::StrJoin(ids, ", "), 200))),
                      kExitFailure);
}

int64_t NowUnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string MoreRowsLine(size_t more) {
  return absl::StrCat("\u2026 and ", more, " more (use --limit 0 or --json)\n");
}

std::string RenderStatusText(const v1::GetStatusResponse& status,
                             int64_t now_unix_ms, bool all, size_t limit) {
  const Summary summary = Summarize(status);
  std::string out = "CLUSTER\n";
  out += Table(
      {{"hosts", absl::StrCat(summary.hosts_up, " up, ", summary.hosts_down,
                              " down, ", summary.hosts_drained, " drained")},
       {"GPUs", absl::StrCat(summary.gpus_leased, " leased, ",
                             summary.gpus_free, " free on up hosts")},
       {"CPU slots", absl::StrCat(summary.slots_used, " used of ",
                                  summary.slots_total, " on up hosts")},
       {"gangs",
        absl::StrCat(summary.gangs.at("forming"), " forming, ",
                     summary.gangs.at("running"), " running, ",
                     summary.gangs.at("failed"), " failed (holding leases)")}},
      {}, "  ");

  std::vector<std::vector<std::string>> hosts = {
      {"HOST", "ADDRESS", "STATE", "USED", "LABELS", "HEARTBEAT"}};
  const size_t shown_hosts =
      limit == 0 ? status.hosts().size()
                 : std::min<size_t>(limit, status.hosts().size());
  for (int i = 0; i < static_cast<int>(shown_hosts); ++i) {
    const v1::HostStatus& host = status.hosts(i);
    const std::string used =
        host.host().gpus_size() > 0
            ? absl::StrCat(host.leased_gpus_size(), "/",
                           host.host().gpus_size(), " GPUs")
            : absl::StrCat(host.members_running(), "/",
                           std::max<uint32_t>(1, host.host().cpu_slots()),
                           " slots");
    hosts.push_back(
        {host.host().name(), host.host().address(), HostStateText(host), used,
         Labels(host.host()),
         host.last_heartbeat_unix_ms() > 0
             ? Age(host.last_heartbeat_unix_ms(), now_unix_ms) + " ago"
             : "never"});
  }
  absl::StrAppend(
      &out, "\nHOSTS\n",
      Table(hosts, {kMaxHostWidth, kMaxAddressWidth, 0, 0, kMaxLabelsWidth}));
  if (shown_hosts < static_cast<size_t>(status.hosts().size())) {
    out += MoreRowsLine(status.hosts().size() - shown_hosts);
  }
  out += NotReadyLines(status);

  std::vector<const v1::GangStatus*> gangs;
  for (const v1::GangStatus& gang : status.gangs()) {
    if (all || !Finished(gang)) gangs.push_back(&gang);
  }
  std::stable_sort(gangs.begin(), gangs.end(),
                   [](const v1::GangStatus* a, const v1::GangStatus* b) {
                     return StateOrder(a->state()) < StateOrder(b->state());
                   });
  out += "\nGANGS\n";
  if (gangs.empty()) out += "  (none)\n";
  size_t more_gangs = 0;
  if (limit != 0 && gangs.size() > limit) {
    more_gangs = gangs.size() - limit;
    gangs.resize(limit);
  }
  for (const v1::GangStatus* gang : gangs) {
    std::string state = GangStateWithSize(*gang);
    state.resize(std::max<size_t>(state.size(), 7), ' ');  // "forming".
    out += Table(
        {{state, Truncate(gang->gang_id(), kMaxGangIdWidth),
          absl::StrCat(Present(*gang), "/", gang->key().size(), " present"),
          absl::StrCat("age ", Age(gang->created_unix_ms(), now_unix_ms)),
          absl::StrCat("master ", Master(*gang))}});
    if (!gang->reason().empty()) {
      const std::string label =
          gang->state() == v1::GANG_STATE_FORMING ? "  waiting: " : "  why: ";
      out += Wrap(label, "    ", gang->reason());
    }
    out += MemberTable(*gang, "  ", /*with_names=*/false);
  }
  if (more_gangs > 0) out += MoreRowsLine(more_gangs);

  const std::vector<const v1::GangStatus*> failures = Failures(status);
  if (!failures.empty()) {
    out += "\nRECENT FAILURES\n";
    for (size_t i = 0; i < failures.size() && i < kRecentFailures; ++i) {
      const v1::GangStatus& gang = *failures[i];
      out += Wrap(
          absl::StrCat(Truncate(gang.gang_id(), kMaxGangIdWidth), " (age ",
                       Age(gang.created_unix_ms(), now_unix_ms), "): "),
          "    ",
          gang.reason().empty() ? "(no root cause recorded)" : gang.reason());
    }
  }
  return out;
}

std::string RenderGangText(const v1::GangStatus& gang, int64_t now_unix_ms) {
  std::string out =
      Wrap("GANG      ", "          ", gang.gang_id()) +
      Wrap("STATE     ", "          ",
           absl::StrCat(GangStateWithSize(gang),
                        Finished(gang) ? " (finished)" : "", ", epoch ",
                        gang.epoch(), ", age ",
                        Age(gang.created_unix_ms(), now_unix_ms))) +
      Wrap("JOBS      ", "          ",
           absl::StrCat(
               "group \"", gang.key().group_name(), "\" of ", gang.key().size(),
               " in pipeline ", gang.key().pipeline_id(), ", project ",
               gang.key().project_id(), " on ",
               gang.key().instance().empty() ? "-" : gang.key().instance())) +
      Wrap("MASTER    ", "          ", Master(gang));
  if (!gang.reason().empty()) {
    out += Wrap(
        gang.state() == v1::GANG_STATE_FORMING ? "WAITING   " : "REASON    ",
        "          ", gang.reason());
  }
  if (gang.preemption_stop_by_unix_ms() != 0) {
    out += Wrap(
        "PREEMPT   ", "          ",
        absl::StrCat("being preempted to make room for gang ",
                     gang.preemption_planned_by(),
                     ": checkpoint notice sent; stops at its next checkpoint, "
                     "or in ",
                     std::max<int64_t>(0, (gang.preemption_stop_by_unix_ms() -
                                           now_unix_ms + 999) /
                                              1000),
                     " s at the latest"));
  }
  if (gang.preemptions() != 0) {
    out += Wrap(
        "PREEMPTED ", "          ",
        absl::StrCat(gang.preemptions(),
                     gang.preemptions() == 1 ? " time" : " times",
                     "; last in epoch ", gang.preempted_epoch(), " by gang ",
                     gang.preempted_by(), ", ~",
                     absl::StrFormat("%.2f", gang.preempted_lost_gpu_hours()),
                     " GPU-hours lost"));
  }
  out += "MEMBERS\n";
  out += MemberTable(gang, "  ", /*with_names=*/true);
  return out;
}

namespace {

// `document` as --json prints it: indented, or on one line.
std::string DumpJson(const nlohmann::json& document, bool one_line) {
  return document.dump(one_line ? -1 : 2, ' ', false,
                       nlohmann::json::error_handler_t::replace) +
         "\n";
}

}  // namespace

std::string RenderGangJson(const v1::GangStatus& gang, bool one_line) {
  return DumpJson(GangJson(gang), one_line);
}

std::string RenderStatusJson(const v1::GetStatusResponse& status, bool all,
                             bool one_line) {
  const Summary summary = Summarize(status);
  nlohmann::json hosts = nlohmann::json::array();
  for (const v1::HostStatus& host : status.hosts()) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [key, value] : host.host().labels()) labels[key] = value;
    hosts.push_back({
        {"name", host.host().name()},
        {"address", host.host().address()},
        {"agent_endpoint", host.host().agent_endpoint()},
        {"state", HostStateName(host.state())},
        {"not_ready_reason", host.not_ready_reason()},
        {"gpus_total", host.host().gpus_size()},
        {"leased_gpus", std::vector<uint32_t>(host.leased_gpus().begin(),
                                              host.leased_gpus().end())},
        {"cpu_slots", std::max<uint32_t>(1, host.host().cpu_slots())},
        {"members_running", host.members_running()},
        {"labels", labels},
        {"last_heartbeat_unix_ms", host.last_heartbeat_unix_ms()},
    });
  }
  nlohmann::json gangs = nlohmann::json::array();
  for (const v1::GangStatus& gang : status.gangs()) {
    if (all || !Finished(gang)) gangs.push_back(GangJson(gang));
  }
  nlohmann::json failures = nlohmann::json::array();
  const std::vector<const v1::GangStatus*> failed = Failures(status);
  for (size_t i = 0; i < failed.size() && i < kRecentFailures; ++i) {
    failures.push_back({{"gang_id", failed[i]->gang_id()},
                        {"reason", failed[i]->reason()},
                        {"created_unix_ms", failed[i]->created_unix_ms()}});
  }
  nlohmann::json document = {
      {"summary",
       {{"hosts_up", summary.hosts_up},
        {"hosts_down", summary.hosts_down},
        {"hosts_drained", summary.hosts_drained},
        {"gpus_leased", summary.gpus_leased},
        {"gpus_free", summary.gpus_free},
        {"cpu_slots_used", summary.slots_used},
        {"cpu_slots_total", summary.slots_total},
        {"gangs", summary.gangs}}},
      {"hosts", hosts},
      {"gangs", gangs},
      {"recent_failures", failures},
  };
  return DumpJson(document, one_line);
}

absl::StatusOr<std::string> RenderStatus(const v1::GetStatusResponse& status,
                                         const StatusOptions& options,
                                         int64_t now_unix_ms) {
  if (!options.gang.empty()) {
    absl::StatusOr<const v1::GangStatus*> gang = FindGang(status, options.gang);
    if (!gang.ok()) return gang.status();
    return options.json ? RenderGangJson(**gang, options.one_line)
                        : RenderGangText(**gang, now_unix_ms);
  }
  return options.json ? RenderStatusJson(status, options.all, options.one_line)
                      : RenderStatusText(status, now_unix_ms, options.all,
                                         options.limit);
}

absl::StatusOr<v1::GetStatusResponse> FetchAllPages(
    rendezvous::CoordinatorClient& client, bool include_finished) {
  // Far more pages than any cluster needs: a coordinator that keeps
  // answering with more cannot keep the command going forever.
  constexpr int kMaxPages = 100000;
  v1::GetStatusResponse all;
  std::set<std::string> hosts_seen;
  std::set<std::string> gangs_seen;
  v1::GetStatusRequest request;
  request.set_include_finished(include_finished);
  for (int page = 0; page < kMaxPages; ++page) {
    absl::StatusOr<v1::GetStatusResponse> answer =
        client.GetStatus(request, std::chrono::seconds(5));
    if (!answer.ok()) return answer.status();
    for (v1::HostStatus& host : *answer->mutable_hosts()) {
      if (hosts_seen.insert(host.host().name()).second) {
        *all.add_hosts() = std::move(host);
      }
    }
    for (v1::GangStatus& gang : *answer->mutable_gangs()) {
      if (gangs_seen.insert(gang.gang_id()).second) {
        *all.add_gangs() = std::move(gang);
      }
    }
    if (answer->next_page_token().empty()) return all;
    if (answer->next_page_token() == request.page_token()) {
      return absl::InternalError(
          "the coordinator answered the same status page twice");
    }
    request.set_page_token(answer->next_page_token());
  }
  return absl::InternalError(
      absl::StrCat("the coordinator's status has more "
                   "than ",
                   kMaxPages, " pages"));
}

absl::StatusOr<v1::GetStatusResponse> FetchStatus(
    const std::string& endpoint, const rendezvous::ClientSecurity& security,
    const std::string& admin_token) {
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  absl::StatusOr<v1::GetStatusResponse> status =
      FetchAllPages(client, /*include_finished=*/true);
  if (IsAuthRefusal(status.status())) return status.status();
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot reach coordinator at ",
                                               endpoint, ": ",
                                               status.status().message()));
  }
  return status;
}

absl::StatusOr<std::string> RunStatusCommand(
    const std::string& endpoint, const StatusOptions& options,
    const rendezvous::ClientSecurity& security,
    const std::string& admin_token) {
  absl::StatusOr<v1::GetStatusResponse> status =
      FetchStatus(endpoint, security, admin_token);
  if (!status.ok()) return status.status();
  return RenderStatus(*status, options, NowUnixMillis());
}

absl::Status WatchStatus(
    const std::function<absl::StatusOr<v1::GetStatusResponse>()>& fetch,
    const StatusOptions& options, const WatchOptions& watch, std::ostream& out,
    const std::function<bool(std::chrono::milliseconds)>& wait) {
  absl::Status last = absl::OkStatus();
  // JSON Lines: one object per line and frame, for scripts.
  StatusOptions frame_options = options;
  frame_options.one_line = options.json;
  for (int frame = 0; watch.count == 0 || frame < watch.count; ++frame) {
    if (frame > 0 && wait(watch.interval)) break;
    absl::StatusOr<v1::GetStatusResponse> status = fetch();
    absl::StatusOr<std::string> text =
        status.ok() ? RenderStatus(*status, frame_options, NowUnixMillis())
                    : absl::StatusOr<std::string>(status.status());
    if (!options.json) {
      out << (watch.clear ? "\033[H\033[2J" : (frame > 0 ? "\n" : ""));
    }
    if (text.ok()) {
      out << *text;
    } else if (options.json) {
      out << DumpJson({{"error", std::string(text.status().message())}},
                      /*one_line=*/true);
    } else {
      out << "gdt-coord: " << TerminalSafe(text.status().message()) << "\n";
    }
    out.flush();
    last = text.status();
  }
  return last;
}

std::string HostStateText(const v1::HostStatus& host) {
  return host.not_ready_reason().empty() ? HostStateName(host.state())
                                         : "not ready";
}

std::string NotReadyLines(const v1::GetStatusResponse& status) {
  std::string out;
  for (const v1::HostStatus& host : status.hosts()) {
    if (host.not_ready_reason().empty()) continue;
    absl::StrAppend(&out, "host ", TerminalSafe(host.host().name()),
                    " not ready (takes no new gangs): ",
                    TerminalSafe(host.not_ready_reason()), "\n");
  }
  return out;
}

std::string HostStateName(v1::HostState state) {
  switch (state) {
    case v1::HOST_STATE_UP:
      return "up";
    case v1::HOST_STATE_DOWN:
      return "down";
    case v1::HOST_STATE_DRAINED:
      return "drained";
    default:
      return "unknown";
  }
}

}  // namespace gdt::ctl
