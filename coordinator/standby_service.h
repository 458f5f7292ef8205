#ifndef GDT_COORDINATOR_STANDBY_SERVICE_H_
#define GDT_COORDINATOR_STANDBY_SERVICE_H_

#include <functional>
#include <string>

#include "grpcpp/generic/async_generic_service.h"

namespace gdt::coordinator {

// What a standby gdt-coord replica (not the leader) serves on its
// address: every RPC of every service fails with UNAVAILABLE and the message
// "gdt-coord at <self> is a standby; the leader is at <leader>" (or "... no
// leader is elected yet"), so clients move on to the leader (see
// rendezvous::CoordinatorClient). `message` gives the refusal's message
// (build it with Message()); it is asked on every call and must be
// thread-safe and quick. The endpoint check's method
// (rendezvous::kEndpointProbeMethod) is answered UNIMPLEMENTED instead.
class StandbyService : public grpc::CallbackGenericService {
 public:
  explicit StandbyService(std::function<std::string()> message)
      : message_(std::move(message)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

  // The message for the current leader (empty = none).
  static std::string Message(const std::string& self,
                             const std::string& leader);

 private:
  const std::function<std::string()> message_;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_STANDBY_SERVICE_H_
