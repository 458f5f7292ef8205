#include "ctl/dashboard.h"

#include <exception>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/host_port.h"
#include "common/secret.h"
#include "common/terminal_text.h"
#include "ctl/dashboard_assets.h"
#include "ctl/status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace gdt::ctl {
namespace {

// The page loads nothing but its own files and talks only to this server.
constexpr char kContentSecurityPolicy[] =
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

constexpr char kInternalError[] =
    "the dashboard could not answer this request (see the coordinator's log)";

void SetCommonHeaders(httplib::Response& response) {
  response.set_header("Content-Security-Policy", kContentSecurityPolicy);
  response.set_header("X-Content-Type-Options", "nosniff");
  response.set_header("Referrer-Policy", "no-referrer");
}

void SendError(httplib::Response& response, int http_status,
               const std::string& message) {
  SetCommonHeaders(response);
  response.status = http_status;
  response.set_header("Cache-Control", "no-store");
  // The message may quote what the client sent, which need not be UTF-8.
  response.set_content(
      nlohmann::json{{"error", message}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace) +
          "\n",
      "application/json");
}

// The Host header's host, lower case, without port, brackets or a final
// dot: "localhost:8481" -> "localhost", "[::1]:80" -> "::1".
std::string HostOfHeader(const std::string& header) {
  std::string host = absl::AsciiStrToLower(header);
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    host =
        close == std::string::npos ? host.substr(1) : host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':');
             colon != std::string::npos && host.find(':') == colon) {
    host.resize(colon);
  }
  if (!host.empty() && host.back() == '.') host.pop_back();
  return host;
}

bool IsLoopbackName(const std::string& host) {
  if (host == "localhost" || absl::EndsWith(host, ".localhost")) return true;
  if (host == "::1") return true;
  absl::string_view ipv4 = host;
  absl::ConsumePrefix(&ipv4, "::ffff:");
  return absl::StartsWith(ipv4, "127.") &&
         ipv4.find_first_not_of("0123456789.") == absl::string_view::npos;
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    default:
      return 503;
  }
}

// GET /api/status: the reader checked, then one status page as JSON.
void ServeStatus(const DashboardAccess& access, const std::string& bound_host,
                 const Dashboard::Fetch& fetch, const httplib::Request& request,
                 httplib::Response& response) {
  const absl::Status allowed = CheckDashboardReader(
      access,
      {request.remote_addr, request.get_header_value("Authorization"),
       request.get_header_value("Host"),
       request.has_header("X-Forwarded-For") ||
           request.has_header("X-Real-IP") || request.has_header("Forwarded")},
      bound_host);
  if (!allowed.ok()) {
    SendError(response, HttpStatusOf(allowed), std::string(allowed.message()));
    return;
  }
  uint32_t limit = kMaxDashboardPageItems;
  if (const std::string text = request.get_param_value("limit");
      !text.empty()) {
    if (!absl::SimpleAtoi(text, &limit)) {
      SendError(response, 400,
                absl::StrCat("limit '", TruncateDisplay(text, 32),
                             "' is not a whole number of items (0 = ",
                             kMaxDashboardPageItems, ")"));
      return;
    }
    if (limit == 0 || limit > kMaxDashboardPageItems) {
      limit = kMaxDashboardPageItems;
    }
  }
  absl::StatusOr<v1::GetStatusResponse> status =
      fetch(limit, request.get_param_value("page_token"));
  if (!status.ok()) {
    SendError(response,
              status.status().code() == absl::StatusCode::kInvalidArgument
                  ? 400
                  : 503,
              std::string(status.status().message()));
    return;
  }
  nlohmann::json document =
      nlohmann::json::parse(RenderStatusJson(*status, /*all=*/true));
  document["next_page_token"] = status->next_page_token();
  SetCommonHeaders(response);
  response.set_header("Cache-Control", "no-store");
  response.set_content(
      document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
          "\n",
      "application/json");
}
}  // namespace

absl::Status CheckDashboardReader(const DashboardAccess& access,
                                  const DashboardRequest& request,
                                  const std::string& bound_host) {
  constexpr std::string_view kBearer = "Bearer ";
  const bool has_token = request.authorization.size() > kBearer.size() &&
                         request.authorization.rfind(kBearer, 0) == 0;
  const bool configured = !access.admin_token_sha256.empty();
  if (configured && has_token &&
      SameSecret(SecretSha256Hex(request.authorization.substr(kBearer.size())),
                 access.admin_token_sha256)) {
    return absl::OkStatus();
  }
  const bool loopback_peer = IsLoopbackHttpPeer(request.remote_addr);
  const bool open = !configured || access.status_without_token == "anyone" ||
                    (access.status_without_token == "loopback" &&
                     loopback_peer && !request.forwarded);
  if (!open) {
    if (!has_token) {
      return absl::UnauthenticatedError(
          "reading the dashboard from this address needs the coordinator's "
          "admin token: open the page as /#token=<admin token>");
    }
    return absl::PermissionDeniedError(
        "reading the dashboard refused: wrong admin token");
  }
  if (!loopback_peer || request.host.empty()) return absl::OkStatus();
  const std::string host = HostOfHeader(request.host);
  const std::string bound = absl::AsciiStrToLower(bound_host);
  if (IsLoopbackName(host) || (!IsWildcard(bound) && host == bound)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "reading the dashboard without the admin token is refused for Host '",
      TruncateDisplay(request.host, 64),
      "': open it as http://localhost:PORT/ or http://127.0.0.1:PORT/ (a "
      "guard against DNS rebinding)"));
}

std::string DashboardExposureWarning(const std::string& address,
                                     const DashboardAccess& access) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) return "";
  const std::string host = absl::AsciiStrToLower(parsed->host);
  if (IsLoopbackName(host)) return "";
  if (!access.admin_token_sha256.empty() &&
      access.status_without_token != "anyone") {
    return "";
  }
  return absl::StrCat(
      "the dashboard on ", address,
      " shows the cluster's status (job, host and pipeline names) over plain "
      "HTTP to every client that can reach it",
      access.admin_token_sha256.empty() ? " (no admin_token_file)"
                                        : " (status_without_token: anyone)",
      ": bind dashboard_address to 127.0.0.1 and use an SSH tunnel, or set "
      "admin_token_file and keep status_without_token at loopback or nobody");
}

absl::StatusOr<std::unique_ptr<Dashboard>> Dashboard::Start(
    const std::string& address, DashboardAccess access, Fetch fetch) {
  // A bad address is HttpServer::Start's error to report.
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  std::string bound_host = parsed.ok() ? parsed->host : "";
  if (const std::string warning = DashboardExposureWarning(address, access);
      !warning.empty()) {
    spdlog::warn("event=dashboard_open_to_network address={} reason={}",
                 address, warning);
  }
  std::vector<HttpServer::Route> routes;
  for (const DashboardAsset& asset : DashboardAssets()) {
    const std::string path(asset.path);
    HttpServer::Handler serve = [asset](const httplib::Request&,
                                        httplib::Response& response) {
      SetCommonHeaders(response);
      response.set_header("Cache-Control", "no-cache");
      response.set_content(std::string(asset.content),
                           std::string(asset.content_type));
    };
    if (path == "/index.html") routes.push_back({"/", serve});
    routes.push_back({path, std::move(serve)});
  }
  routes.push_back(
      {"/api/status",
       [access = std::move(access), fetch = std::move(fetch),
        bound_host = std::move(bound_host)](const httplib::Request& request,
                                            httplib::Response& response) {
         // Nothing may escape to cpp-httplib, which would answer an empty
         // 500 carrying the exception's text in a header.
         try {
           ServeStatus(access, bound_host, fetch, request, response);
         } catch (const std::exception& e) {
           spdlog::error("event=dashboard_error error={}", e.what());
           SendError(response, 500, kInternalError);
         } catch (...) {
           spdlog::error("event=dashboard_error error=unknown");
           SendError(response, 500, kInternalError);
         }
       }});
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      address, "dashboard_address", "the dashboard", std::move(routes));
  if (!server.ok()) return server.status();
  return std::unique_ptr<Dashboard>(new Dashboard(*std::move(server)));
}

std::string Dashboard::url() const {
  return absl::StrCat("http://", bound_address(), "/");
}

}  // namespace gdt::ctl
