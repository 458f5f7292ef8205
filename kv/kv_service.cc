#include "kv/kv_service.h"

#include <atomic>
#include <memory>
#include <optional>

#include "common/logging.h"
#include "rendezvous/grpc_status.h"
#include "spdlog/spdlog.h"

namespace gdt::kv {
namespace {

KvCaller CallerOf(const v1::KvScope& scope) {
  return KvCaller{scope.gang_id(), scope.epoch(), scope.token()};
}

// Finishes a unary call with `status`, logging refusals (never the token).
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const char* op, const v1::KvScope& scope,
                                     const absl::Status& status) {
  if (!status.ok()) {
    spdlog::debug("event=kv_refused op={} gang={} epoch={} error={}", op,
                  LogValue(scope.gang_id()), scope.epoch(),
                  LogValue(status.ToString()));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(rendezvous::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

// One pending Wait. Exactly one of the store's callback and OnCancel wins
// the right to Finish (the `claimed` flag); the loser touches only the
// shared state, which outlives the reactor.
class KvService::WaitReactor final : public grpc::ServerUnaryReactor {
 public:
  WaitReactor(GangKv& kv, v1::KvWaitResponse* response)
      : kv_(kv), response_(response), shared_(std::make_shared<Shared>()) {}

  // Once kv.Wait() has returned, `this` may already be gone (another thread
  // finished the call), so only locals are used after it.
  void Start(const KvCaller& caller, const std::string& key) {
    std::shared_ptr<Shared> shared = shared_;
    GangKv& kv = kv_;
    const uint64_t handle = kv.Wait(
        caller, key, [this, shared](absl::StatusOr<std::string> result) {
          if (shared->claimed.exchange(true)) return;
          if (result.ok()) response_->set_value(std::move(*result));
          Finish(rendezvous::ToGrpcStatus(result.status()));
        });
    shared->handle.store(handle);
    if (handle != 0 && shared->cancelled.load()) kv.CancelWait(handle);
  }

  void OnCancel() override {
    shared_->cancelled.store(true);
    if (const uint64_t handle = shared_->handle.load(); handle != 0) {
      kv_.CancelWait(handle);
    }
    if (!shared_->claimed.exchange(true)) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "wait cancelled"));
    }
  }

  void OnDone() override { delete this; }

 private:
  struct Shared {
    std::atomic<bool> claimed{false};
    std::atomic<bool> cancelled{false};
    std::atomic<uint64_t> handle{0};
  };

  GangKv& kv_;
  v1::KvWaitResponse* response_;
  std::shared_ptr<Shared> shared_;
};

grpc::ServerUnaryReactor* KvService::Set(grpc::CallbackServerContext* context,
                                         const v1::KvSetRequest* request,
                                         v1::KvSetResponse* response) {
  absl::Status status =
      kv_.Set(CallerOf(request->scope()), request->key(), request->value());
  return FinishWith(context, "set", request->scope(), status);
}

grpc::ServerUnaryReactor* KvService::Get(grpc::CallbackServerContext* context,
                                         const v1::KvGetRequest* request,
                                         v1::KvGetResponse* response) {
  absl::StatusOr<std::string> value =
      kv_.Get(CallerOf(request->scope()), request->key());
  if (value.ok()) response->set_value(std::move(*value));
  return FinishWith(context, "get", request->scope(), value.status());
}

grpc::ServerUnaryReactor* KvService::Wait(grpc::CallbackServerContext* context,
                                          const v1::KvWaitRequest* request,
                                          v1::KvWaitResponse* response) {
  auto* reactor = new WaitReactor(kv_, response);
  reactor->Start(CallerOf(request->scope()), request->key());
  return reactor;
}

grpc::ServerUnaryReactor* KvService::CompareAndSet(
    grpc::CallbackServerContext* context,
    const v1::KvCompareAndSetRequest* request,
    v1::KvCompareAndSetResponse* response) {
  std::optional<std::string> expected;
  if (request->has_expected()) expected = request->expected();
  absl::StatusOr<KvCasResult> result = kv_.CompareAndSet(
      CallerOf(request->scope()), request->key(), expected, request->desired());
  if (result.ok()) {
    response->set_swapped(result->swapped);
    if (result->current.has_value()) {
      response->set_current(std::move(*result->current));
    }
  }
  return FinishWith(context, "cas", request->scope(), result.status());
}

grpc::ServerUnaryReactor* KvService::Add(grpc::CallbackServerContext* context,
                                         const v1::KvAddRequest* request,
                                         v1::KvAddResponse* response) {
  absl::StatusOr<int64_t> value =
      kv_.Add(CallerOf(request->scope()), request->key(), request->delta());
  if (value.ok()) response->set_value(*value);
  return FinishWith(context, "add", request->scope(), value.status());
}

}  // namespace gdt::kv
