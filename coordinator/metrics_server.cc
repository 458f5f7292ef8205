#include "coordinator/metrics_server.h"

#include <utility>

#include "httplib.h"

namespace gdt::coordinator {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::function<std::string()> render) {
  std::vector<HttpServer::Route> routes;
  routes.push_back(
      {"/metrics", [render = std::move(render)](const httplib::Request&,
                                                httplib::Response& response) {
         response.set_content(render(), "text/plain; version=0.0.4");
       }});
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      address, "metrics_address", "metrics", std::move(routes));
  if (!server.ok()) return server.status();
  return std::unique_ptr<MetricsServer>(new MetricsServer(*std::move(server)));
}

}  // namespace gdt::coordinator
