#ifndef GDT_COORDINATOR_SERVE_H_
#define GDT_COORDINATOR_SERVE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/server.h"

namespace gdt::coordinator {

// What `gdt-coord serve` was given on its command line.
struct ServeOptions {
  std::string config;               // The YAML config file.
  std::string listen;               // Overrides listen_address when set.
  std::string state;                // Overrides state_path when set.
  std::string port_file;            // Gets the bound host:port once serving.
  std::string metrics_port_file;    // Gets the bound /metrics host:port.
  std::string dashboard_port_file;  // Gets the bound dashboard host:port.
  // Starts the web dashboard of `server` at `address` (dashboard_address):
  // returns what keeps it serving and its URL. main() wires it in, since
  // the page lives with the operator views (ctl/).
  struct Dashboard {
    std::shared_ptr<void> keep_alive;
    std::string bound_address;
    std::string url;
  };
  std::function<absl::StatusOr<Dashboard>(CoordinatorServer& server,
                                          const std::string& address)>
      start_dashboard;
};

// Exit code of a replica that led and lost its etcd lease: restarted, it
// rejoins as a standby.
inline constexpr int kExitLostLeadership = 5;

// Runs the coordinator daemon until SIGTERM or SIGINT: loads and checks the
// config, starts the server (or an HA replica for state_store: etcd), writes
// the port files. Returns the process's exit code (docs/operations.md) after
// printing one `gdt-coord: ...` line for a failure.
int RunServe(const ServeOptions& options);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_SERVE_H_
