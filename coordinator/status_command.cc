#include "coordinator/status_command.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "rendezvous/coordinator_client.h"

namespace gdt::coordinator {
namespace {

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

std::string Age(int64_t then_ms, int64_t now_ms) {
  if (then_ms <= 0) return "-";
  const int64_t seconds = std::max<int64_t>(0, (now_ms - then_ms) / 1000);
  if (seconds < 120) return absl::StrCat(seconds, "s");
  if (seconds < 7200) return absl::StrCat(seconds / 60, "m");
  return absl::StrCat(seconds / 3600, "h");
}

// Left-aligned columns separated by two spaces; the last column is not
// padded.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size())
        line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
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

}  // namespace

std::string RenderStatusText(const v1::GetStatusResponse& status,
                             int64_t now_unix_ms) {
  std::vector<std::vector<std::string>> hosts = {
      {"HOST", "ADDRESS", "STATE", "USED", "LABELS", "HEARTBEAT"}};
  for (const v1::HostStatus& host : status.hosts()) {
    const std::string used =
        host.host().gpus_size() > 0
            ? absl::StrCat(host.leased_gpus_size(), "/",
                           host.host().gpus_size(), " GPUs")
            : absl::StrCat(host.members_running(), "/",
                           std::max<uint32_t>(1, host.host().cpu_slots()),
                           " slots");
    hosts.push_back({host.host().name(), host.host().address(),
                     HostStateName(host.state()), used, Labels(host.host()),
                     Age(host.last_heartbeat_unix_ms(), now_unix_ms) + " ago"});
  }
  std::vector<std::vector<std::string>> gangs = {
      {"GANG", "STATE", "MEMBERS", "MASTER", "REASON"}};
  for (const v1::GangStatus& gang : status.gangs()) {
    int present = 0;
    for (const v1::MemberStatus& member : gang.members()) {
      if (member.present()) ++present;
    }
    const std::string master =
        gang.master_port() != 0
            ? absl::StrCat(gang.master_addr(), ":", gang.master_port())
            : "-";
    gangs.push_back({gang.gang_id(), GangStateText(gang.state()),
                     absl::StrCat(present, "/", gang.key().size()), master,
                     gang.reason().empty() ? "-" : gang.reason()});
    for (const v1::MemberStatus& member : gang.members()) {
      const std::string rank = member.node_rank() >= 0
                                   ? absl::StrCat("rank ", member.node_rank())
                                   : "rank -";
      const std::string where =
          member.host_name().empty() ? "-" : member.host_name();
      const std::string gpus =
          member.gpu_indices_size() > 0
              ? absl::StrCat("gpus ", absl::StrJoin(member.gpu_indices(), ","))
              : "gpus -";
      const std::string exit = member.exit_code() >= 0
                                   ? absl::StrCat("exit ", member.exit_code())
                                   : (member.left() ? "left" : "exit -");
      gangs.push_back(
          {absl::StrCat("  ", member.member_index(), "/", gang.key().size()),
           absl::StrCat("job ", member.job_id()),
           member.present() ? "present" : "absent", rank,
           absl::StrCat(where, "  ", gpus, "  ", exit)});
    }
  }
  return absl::StrCat("HOSTS\n", Table(hosts), "\nGANGS\n", Table(gangs));
}

std::string RenderStatusJson(const v1::GetStatusResponse& status) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const v1::HostStatus& host : status.hosts()) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [key, value] : host.host().labels()) labels[key] = value;
    hosts.push_back({
        {"name", host.host().name()},
        {"address", host.host().address()},
        {"agent_endpoint", host.host().agent_endpoint()},
        {"state", HostStateName(host.state())},
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
    gangs.push_back({
        {"gang_id", gang.gang_id()},
        {"group_name", gang.key().group_name()},
        {"project_id", gang.key().project_id()},
        {"pipeline_id", gang.key().pipeline_id()},
        {"size", gang.key().size()},
        {"state", GangStateText(gang.state())},
        {"epoch", gang.epoch()},
        {"reason", gang.reason()},
        {"master_addr", gang.master_addr()},
        {"master_port", gang.master_port()},
        {"created_unix_ms", gang.created_unix_ms()},
        {"members", members},
    });
  }
  nlohmann::json document = {{"hosts", hosts}, {"gangs", gangs}};
  return document.dump(2) + "\n";
}

absl::StatusOr<std::string> RunStatusCommand(const std::string& endpoint,
                                             bool json, bool all) {
  rendezvous::CoordinatorClient client(endpoint);
  v1::GetStatusRequest request;
  request.set_include_finished(all);
  absl::StatusOr<v1::GetStatusResponse> status =
      client.GetStatus(request, std::chrono::seconds(5));
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot reach coordinator at ",
                                               endpoint, ": ",
                                               status.status().message()));
  }
  if (json) return RenderStatusJson(*status);
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  return RenderStatusText(*status, now_ms);
}

}  // namespace gdt::coordinator
