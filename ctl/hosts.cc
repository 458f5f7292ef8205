#include "ctl/hosts.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/exit_code.h"
#include "common/terminal_text.h"
#include "ctl/admin_token.h"
#include "ctl/status.h"
#include "nlohmann/json.hpp"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/operator_input.h"

namespace gdt::ctl {
namespace {

constexpr std::chrono::seconds kRpcTimeout(5);

// "8× H100" or "2× A100, 1× T4"; "-" for a CPU-only host.
std::string GpuModels(const v1::HostSpec& host) {
  std::map<std::string, int> counts;
  for (const v1::Gpu& gpu : host.gpus()) {
    ++counts[gpu.model().empty() ? std::string("GPU") : gpu.model()];
  }
  std::vector<std::string> parts;
  for (const auto& [model, count] : counts) {
    parts.push_back(absl::StrCat(count, "× ", model));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

std::string Unreachable(const std::string& endpoint,
                        const absl::Status& status) {
  return absl::StrCat("cannot reach coordinator at ", endpoint, ": ",
                      status.message());
}

}  // namespace

std::string RenderHostsText(const v1::GetStatusResponse& status, size_t limit) {
  std::vector<std::vector<std::string>> rows = {
      {"HOST", "ADDRESS", "STATE", "GPUS USED", "MODELS", "MEMBERS", "LABELS"}};
  const size_t shown = limit == 0
                           ? status.hosts().size()
                           : std::min<size_t>(limit, status.hosts().size());
  for (int i = 0; i < static_cast<int>(shown); ++i) {
    const v1::HostStatus& host = status.hosts(i);
    std::vector<std::string> labels;
    for (const auto& [key, value] : host.host().labels()) {
      labels.push_back(absl::StrCat(key, "=", value));
    }
    std::sort(labels.begin(), labels.end());
    rows.push_back(
        {host.host().name(), host.host().address(), HostStateText(host),
         absl::StrCat(host.leased_gpus_size(), "/", host.host().gpus_size()),
         GpuModels(host.host()), absl::StrCat(host.members_running()),
         labels.empty() ? "-" : absl::StrJoin(labels, ",")});
  }
  // Names and labels come from the agents: shown safe for a terminal
  // (common/terminal_text.h) and aligned by characters.
  std::vector<size_t> widths(rows.front().size(), 0);
  for (auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      row[i] = TerminalSafe(row[i]);
      widths[i] = std::max(widths[i], DisplayWidth(row[i]));
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line += std::string(widths[i] - DisplayWidth(row[i]) + 2, ' ');
      }
    }
    out += line + "\n";
  }
  if (shown < static_cast<size_t>(status.hosts().size())) {
    out += MoreRowsLine(status.hosts().size() - shown);
  }
  return out + NotReadyLines(status);
}

std::string RenderHostsJson(const v1::GetStatusResponse& status) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const v1::HostStatus& host : status.hosts()) {
    nlohmann::json gpus = nlohmann::json::array();
    for (const v1::Gpu& gpu : host.host().gpus()) {
      const bool leased =
          std::find(host.leased_gpus().begin(), host.leased_gpus().end(),
                    gpu.index()) != host.leased_gpus().end();
      gpus.push_back({{"index", gpu.index()},
                      {"uuid", gpu.uuid()},
                      {"model", gpu.model()},
                      {"memory_bytes", gpu.memory_bytes()},
                      {"leased", leased}});
    }
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [key, value] : host.host().labels()) labels[key] = value;
    hosts.push_back(
        {{"name", host.host().name()},
         {"address", host.host().address()},
         {"state", HostStateName(host.state())},
         {"not_ready_reason", host.not_ready_reason()},
         {"gpus", gpus},
         {"labels", labels},
         {"network_interface", host.host().network_interface()},
         {"members_running", host.members_running()},
         {"runner_slots", host.host().runner_slots()},  // 0 = not declared.
         {"last_heartbeat_unix_ms", host.last_heartbeat_unix_ms()}});
  }
  return nlohmann::json{{"hosts", hosts}}.dump(
             2, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

absl::StatusOr<std::string> RunHostsList(
    const std::string& endpoint, bool json,
    const rendezvous::ClientSecurity& security, const std::string& admin_token,
    size_t limit) {
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  absl::StatusOr<v1::GetStatusResponse> status =
      FetchAllPages(client, /*include_finished=*/false);
  if (IsAuthRefusal(status.status())) return status.status();
  if (!status.ok()) {
    return absl::UnavailableError(Unreachable(endpoint, status.status()));
  }
  return json ? RenderHostsJson(*status) : RenderHostsText(*status, limit);
}

absl::StatusOr<std::string> RunHostsAction(
    const std::string& endpoint, const std::string& action,
    const std::string& host, const rendezvous::ClientSecurity& security,
    const std::string& admin_token) {
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  absl::Status status;
  std::string done;
  const std::string shown = TerminalSafe(host);
  if (action == "drain" || action == "undrain") {
    const bool drain = action == "drain";
    status = client.SetHostDrained(host, drain, kRpcTimeout);
    done = drain ? absl::StrCat("host ", shown,
                                " drained: it takes no new gangs; running "
                                "gangs finish")
                 : absl::StrCat("host ", shown, " undrained: it takes gangs");
  } else if (action == "remove") {
    status = client.RemoveHost(host, kRpcTimeout);
    done = absl::StrCat("host ", shown,
                        " removed (its agent registers it again if it "
                        "still runs)");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown hosts action '", action,
                     "' (use list, drain, undrain or remove)"));
  }
  if (status.ok()) return done + "\n";
  // An unknown host, or one still running members: the coordinator refused.
  if (status.code() == absl::StatusCode::kNotFound ||
      status.code() == absl::StatusCode::kFailedPrecondition) {
    return WithExitCode(status, kExitRefused);
  }
  if (IsAuthRefusal(status)) return status;
  return absl::UnavailableError(Unreachable(endpoint, status));
}

absl::StatusOr<std::string> RunHostTokenCommand(
    const std::string& endpoint, const std::string& action,
    const std::string& host, const rendezvous::ClientSecurity& security,
    const std::string& admin_token) {
  if (action != "list" && host.empty()) {
    return absl::InvalidArgumentError("host name must not be empty");
  }
  // Revoke takes any name, so a token stored before this check can go.
  if (action == "create") {
    if (absl::Status valid = rendezvous::CheckHostTokenName(host);
        !valid.ok()) {
      return valid;
    }
  }
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  absl::Status status;
  std::string out;
  if (action == "create") {
    absl::StatusOr<std::string> token =
        client.CreateHostToken(host, kRpcTimeout);
    status = token.status();
    if (token.ok()) out = *token + "\n";
  } else if (action == "list") {
    absl::StatusOr<v1::ListHostTokensResponse> tokens =
        client.ListHostTokens(kRpcTimeout);
    status = tokens.status();
    if (tokens.ok()) {
      if (tokens->tokens().empty()) out = "no host tokens\n";
      for (const v1::HostTokenInfo& info : tokens->tokens()) {
        absl::StrAppend(
            &out, TerminalSafe(info.host_name()), "  issued ",
            absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                             absl::FromUnixMillis(info.created_unix_ms()),
                             absl::UTCTimeZone()),
            "\n");
      }
    }
  } else if (action == "revoke") {
    status = client.RevokeHostToken(host, kRpcTimeout);
    out = absl::StrCat("host token of ", TerminalSafe(host),
                       " revoked: its agent is refused from its next call\n");
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown hosts token action '", action,
                     "' (use create, list or revoke)"));
  }
  if (status.ok()) return out;
  // An unknown host: the coordinator refused.
  if (status.code() == absl::StatusCode::kNotFound) {
    return WithExitCode(status, kExitRefused);
  }
  if (status.code() == absl::StatusCode::kInvalidArgument ||
      IsAuthRefusal(status)) {
    return status;
  }
  return absl::UnavailableError(Unreachable(endpoint, status));
}

}  // namespace gdt::ctl
