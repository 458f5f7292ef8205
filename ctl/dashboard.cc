#include "ctl/dashboard.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "ctl/dashboard_assets.h"
#include "ctl/status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace gdt::ctl {
namespace {

// The page loads nothing but its own files and talks only to this server.
constexpr char kContentSecurityPolicy[] =
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

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
  response.set_content(nlohmann::json{{"error", message}}.dump() + "\n",
                       "application/json");
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

}  // namespace

absl::Status CheckDashboardReader(const DashboardAccess& access,
                                  const std::string& remote_addr,
                                  const std::string& authorization) {
  if (access.admin_token_sha256.empty() ||
      access.status_without_token == "anyone") {
    return absl::OkStatus();
  }
  if (access.status_without_token == "loopback" &&
      IsLoopbackHttpPeer(remote_addr)) {
    return absl::OkStatus();
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() ||
      authorization.rfind(kBearer, 0) != 0) {
    return absl::UnauthenticatedError(
        "reading the dashboard from this address needs the coordinator's "
        "admin token: open the page as /#token=<admin token>");
  }
  if (!SameSecret(SecretSha256Hex(authorization.substr(kBearer.size())),
                  access.admin_token_sha256)) {
    return absl::PermissionDeniedError(
        "reading the dashboard refused: wrong admin token");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Dashboard>> Dashboard::Start(
    const std::string& address, DashboardAccess access, Fetch fetch) {
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
       [access = std::move(access), fetch = std::move(fetch)](
           const httplib::Request& request, httplib::Response& response) {
         const absl::Status allowed =
             CheckDashboardReader(access, request.remote_addr,
                                  request.get_header_value("Authorization"));
         if (!allowed.ok()) {
           SendError(response, HttpStatusOf(allowed),
                     std::string(allowed.message()));
           return;
         }
         uint32_t limit = kMaxDashboardPageItems;
         if (const std::string text = request.get_param_value("limit");
             !text.empty()) {
           if (!absl::SimpleAtoi(text, &limit)) {
             SendError(response, 400,
                       absl::StrCat("limit '", text.substr(0, 32),
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
           SendError(
               response,
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
         response.set_content(document.dump(2) + "\n", "application/json");
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
