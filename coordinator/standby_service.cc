#include "coordinator/standby_service.h"

#include "absl/strings/str_cat.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::coordinator {
namespace {

// Answers at once; deletes itself when gRPC is done with it.
class Refusal : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(const std::string& message) {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
  }
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
    grpc::GenericCallbackServerContext* /*context*/) {
  return new Refusal(message_());
}

}  // namespace gdt::coordinator
