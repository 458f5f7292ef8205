#ifndef GDT_COORDINATOR_METRICS_SERVER_H_
#define GDT_COORDINATOR_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"

namespace gdt::coordinator {

// Serves GET /metrics (Prometheus text format 0.0.4) on its own thread
// (common/http_server.h). Every other path is 404. Thread-safe; `render` is
// called on the server's threads and must be thread-safe.
class MetricsServer {
 public:
  // Binds `address` (host:port; port 0 = any free port) and starts serving.
  // Errors: InvalidArgument for an address without a port; Unavailable
  // "cannot listen on ADDR for metrics" when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::function<std::string()> render);

  // Stops serving and joins the thread.
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // host:port actually bound.
  const std::string& bound_address() const { return server_->bound_address(); }

 private:
  explicit MetricsServer(std::unique_ptr<HttpServer> server)
      : server_(std::move(server)) {}

  std::unique_ptr<HttpServer> server_;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_METRICS_SERVER_H_
