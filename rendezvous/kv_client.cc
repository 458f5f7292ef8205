#include "rendezvous/kv_client.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/channel.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/grpc_status.h"
#include "rendezvous/tls.h"

namespace gdt::rendezvous {
namespace {

void Prepare(grpc::ClientContext& context, KvClient::Deadline deadline) {
  context.set_deadline(deadline);
  context.set_wait_for_ready(true);
}

// Adds which call and key failed, keeping the code.
absl::Status Explain(const grpc::Status& status, const char* op,
                     const std::string& key, const std::string& endpoint,
                     const ClientSecurity& security) {
  absl::Status converted = ExplainConnectFailure(
      FromGrpcStatus(status), "coordinator", endpoint, security);
  if (IsTlsHandshakeFailure(converted)) {
    return absl::UnavailableError(
        absl::StrCat("kv ", op, " '", key, "': ", converted.message()));
  }
  if (converted.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(
        absl::StrCat("kv ", op, " '", key, "': deadline passed (coordinator ",
                     endpoint, ")"));
  }
  if (converted.code() == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(
        absl::StrCat("kv ", op, " '", key, "': coordinator ", endpoint,
                     " unavailable: ", converted.message()));
  }
  return converted;
}

}  // namespace

absl::StatusOr<KvTarget> KvTargetFromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  KvTarget target;
  for (auto [name, field] : {std::pair{"GDT_COORDINATOR", &target.endpoint},
                             std::pair{"GDT_GANG_ID", &target.gang_id},
                             std::pair{"GDT_KV_TOKEN", &target.token}}) {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') {
      return absl::FailedPreconditionError(absl::StrCat(
          name, " is not set (run inside a gdt job, or export it)"));
    }
    *field = value;
  }
  if (absl::Status address = CheckCoordinatorAddress(target.endpoint);
      !address.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("GDT_COORDINATOR: ", address.message()));
  }
  absl::StatusOr<ClientSecurity> security =
      ClientSecurityFromEnvironment(getenv);
  if (!security.ok()) return security.status();
  target.security = *security;
  const char* epoch = getenv("GDT_EPOCH");
  const std::string text = epoch == nullptr ? "" : epoch;
  const auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), target.epoch);
  if (text.empty() || error != std::errc() ||
      end != text.data() + text.size() || target.epoch == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("GDT_EPOCH must be a positive integer, got '", text, "'"));
  }
  return target;
}

KvClient::KvClient(KvTarget target)
    : KvClient(target, NewChannel(target.endpoint, target.security)) {}

KvClient::KvClient(KvTarget target, std::shared_ptr<grpc::Channel> channel)
    : target_(std::move(target)),
      channel_(channel),
      stub_(v1::GangKv::NewStub(channel)) {}

absl::Status KvClient::Failure(const grpc::Status& status, const char* op,
                               const std::string& key) const {
  absl::Status explained =
      Explain(status, op, key, target_.endpoint, target_.security);
  // Waiting for the connection until the deadline ends as a passed
  // deadline, whether or not the coordinator ever answered: one that never
  // did is unavailable.
  if (absl::IsDeadlineExceeded(explained) &&
      channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    return absl::UnavailableError(
        absl::StrCat("kv ", op, " '", key, "': coordinator ", target_.endpoint,
                     " unavailable: not reached before the deadline"));
  }
  return explained;
}

void KvClient::Fill(v1::KvScope* scope) const {
  scope->set_gang_id(target_.gang_id);
  scope->set_epoch(target_.epoch);
  scope->set_token(target_.token);
}

absl::Status KvClient::Set(const std::string& key, const std::string& value,
                           Deadline deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::KvSetRequest request;
  Fill(request.mutable_scope());
  request.set_key(key);
  request.set_value(value);
  v1::KvSetResponse response;
  grpc::Status status = stub_->Set(&context, request, &response);
  if (!status.ok()) return Failure(status, "set", key);
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvClient::Get(const std::string& key,
                                          Deadline deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::KvGetRequest request;
  Fill(request.mutable_scope());
  request.set_key(key);
  v1::KvGetResponse response;
  grpc::Status status = stub_->Get(&context, request, &response);
  if (!status.ok()) return Failure(status, "get", key);
  return std::move(*response.mutable_value());
}

absl::StatusOr<std::string> KvClient::Wait(const std::string& key,
                                           Deadline deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::KvWaitRequest request;
  Fill(request.mutable_scope());
  request.set_key(key);
  v1::KvWaitResponse response;
  grpc::Status status = stub_->Wait(&context, request, &response);
  if (!status.ok()) return Failure(status, "wait", key);
  return std::move(*response.mutable_value());
}

absl::StatusOr<KvCasOutcome> KvClient::CompareAndSet(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired, Deadline deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::KvCompareAndSetRequest request;
  Fill(request.mutable_scope());
  request.set_key(key);
  if (expected.has_value()) request.set_expected(*expected);
  request.set_desired(desired);
  v1::KvCompareAndSetResponse response;
  grpc::Status status = stub_->CompareAndSet(&context, request, &response);
  if (!status.ok()) return Failure(status, "cas", key);
  KvCasOutcome outcome;
  outcome.swapped = response.swapped();
  if (response.has_current()) outcome.current = response.current();
  return outcome;
}

absl::StatusOr<int64_t> KvClient::Add(const std::string& key, int64_t delta,
                                      Deadline deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::KvAddRequest request;
  Fill(request.mutable_scope());
  request.set_key(key);
  request.set_delta(delta);
  v1::KvAddResponse response;
  grpc::Status status = stub_->Add(&context, request, &response);
  if (!status.ok()) return Failure(status, "add", key);
  return response.value();
}

}  // namespace gdt::rendezvous
