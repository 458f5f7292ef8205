#include "coordinator/standby_service.h"

#include "absl/strings/str_cat.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/endpoint_watch.h"

namespace gdt::coordinator {
namespace {

// Answers at once; deletes itself when gRPC is done with it.
class Refusal : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(grpc::Status status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

std::string StandbyService::Message(const std::string& self,
                                    const std::string& leader) {
  if (leader.empty()) {
    return absl::StrCat("gdt-coord at ", self,
                        " is a standby and no leader is elected yet");
  }
  return absl::StrCat("gdt-coord at ", self, " is a standby; ",
                      rendezvous::kLeaderIsAt, leader);
}

grpc::ServerGenericBidiReactor* StandbyService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  // The replica's own check of its endpoint (HaServer) is answered as any
  // server answers a method it lacks: UNAVAILABLE would read as no answer.
  if (context->method() == rendezvous::kEndpointProbeMethod) {
    return new Refusal(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                    "no such method on a standby"));
  }
  return new Refusal(grpc::Status(grpc::StatusCode::UNAVAILABLE, message_()));
}

}  // namespace gdt::coordinator
