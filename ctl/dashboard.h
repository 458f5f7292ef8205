#ifndef GDT_CTL_DASHBOARD_H_
#define GDT_CTL_DASHBOARD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "gdt/v1/coordinator.pb.h"

namespace gdt::ctl {

// Who may read the dashboard's data: the same rule as `gdt-coord status`
// (docs/security.md). With no admin token configured everyone may; else
// callers on loopback may without it when `status_without_token` is
// "loopback", everyone when it is "anyone", and nobody when "nobody".
struct DashboardAccess {
  std::string admin_token_sha256;  // Empty: no admin token configured.
  std::string status_without_token = "loopback";
};

// What CheckDashboardReader needs of a request.
struct DashboardRequest {
  std::string remote_addr;    // The TCP peer, as cpp-httplib reports it.
  std::string authorization;  // The Authorization header; may be empty.
  std::string host;           // The Host header; may be empty.
  // The request carries X-Forwarded-For, X-Real-IP or Forwarded: a proxy
  // passed it on, so a loopback peer does not mean a reader on this machine.
  bool forwarded = false;
};

// Ok, or Unauthenticated (no "Bearer" token given where one is needed) or
// PermissionDenied (a wrong one). A valid token is always enough. A reader
// let in without one from a loopback peer must name this machine in Host
// (localhost, a 127.x address, [::1], with any port) or `bound_host` (the
// host of dashboard_address), else PermissionDenied: a web page the
// operator visits cannot read the status through DNS rebinding.
absl::Status CheckDashboardReader(const DashboardAccess& access,
                                  const DashboardRequest& request,
                                  const std::string& bound_host = "");

// The warning the coordinator logs at start when `address` (host:port)
// lets other machines read the status without a token (no admin token, or
// status_without_token "anyone", on an address other than loopback); empty
// when there is nothing to warn about.
std::string DashboardExposureWarning(const std::string& address,
                                     const DashboardAccess& access);

// gdt-coord's read-only web dashboard: a page (HTML, CSS and JavaScript
// built into the binary; nothing is fetched from elsewhere, so it works on
// an air-gapped cluster) that polls GET /api/status, which answers the JSON
// of `gdt-coord status --all --json` for the status page `fetch` returns,
// plus its "next_page_token". Paged like GetStatus: `?limit=N` items per
// page (hosts first, then gangs; 0, absent or above kMaxDashboardPageItems:
// that many) and `?page_token=T` (the previous answer's next_page_token);
// "summary" and "recent_failures" cover the items of that page, and the
// page adds them up over all pages. Thread-safe; `fetch` is called on the
// server's threads.
inline constexpr uint32_t kMaxDashboardPageItems = 1000;

class Dashboard {
 public:
  // The status page of at most `limit` items after `page_token` (empty:
  // the first), as GetStatus answers it. InvalidArgument for a bad token.
  using Fetch = std::function<absl::StatusOr<v1::GetStatusResponse>(
      uint32_t limit, const std::string& page_token)>;

  // Binds `address` (host:port; port 0 = any free port).
  // Errors: those of HttpServer::Start for "dashboard_address".
  static absl::StatusOr<std::unique_ptr<Dashboard>> Start(
      const std::string& address, DashboardAccess access, Fetch fetch);

  const std::string& bound_address() const { return server_->bound_address(); }
  // The page's URL, e.g. "http://127.0.0.1:8481/".
  std::string url() const;

 private:
  explicit Dashboard(std::unique_ptr<HttpServer> server)
      : server_(std::move(server)) {}

  std::unique_ptr<HttpServer> server_;
};

}  // namespace gdt::ctl

#endif  // GDT_CTL_DASHBOARD_H_
