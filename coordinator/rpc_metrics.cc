#include "coordinator/rpc_metrics.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/support/server_interceptor.h"
#include "rendezvous/endpoint_watch.h"

namespace gdt::coordinator {
namespace {

using grpc::experimental::InterceptionHookPoints;

// One per call. Reports at the first hook that sends something to the
// client; the destructor reports a call that ended without sending anything.
class RpcTimingInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcTimingInterceptor(Observer& observer, std::string method)
      : observer_(observer),
        method_(std::move(method)),
        start_(std::chrono::steady_clock::now()) {}

  ~RpcTimingInterceptor() override { Report("CANCELLED"); }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      Report(
          RpcCodeName(static_cast<int>(methods->GetSendStatus().error_code())));
    } else if (methods->QueryInterceptionHookPoint(
                   InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      Report("OK");
    }
    methods->Proceed();
  }

 private:
  // Reports once; sends and the destructor may race on stream calls.
  void Report(std::string_view code) {
    if (reported_.exchange(true)) return;
    observer_.RpcFinished(
        method_, code,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count());
  }

  Observer& observer_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<bool> reported_{false};
};

class RpcTimingFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcTimingFactory(Observer& observer) : observer_(observer) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // "/gdt.v1.Coordinator/Heartbeat" -> "Heartbeat".
    std::string_view method = info->method() != nullptr ? info->method() : "";
    // The coordinator's check of its own endpoints is no client's call.
    if (method == rendezvous::kEndpointProbeMethod) return nullptr;
    if (const size_t slash = method.rfind('/');
        slash != std::string_view::npos) {
      method.remove_prefix(slash + 1);
    }
    return new RpcTimingInterceptor(observer_, std::string(method));
  }

 private:
  Observer& observer_;
};

}  // namespace

std::string_view RpcCodeName(int code) {
  static constexpr std::string_view kCodes[] = {"OK",
                                                "CANCELLED",
                                                "UNKNOWN",
                                                "INVALID_ARGUMENT",
                                                "DEADLINE_EXCEEDED",
                                                "NOT_FOUND",
                                                "ALREADY_EXISTS",
                                                "PERMISSION_DENIED",
                                                "RESOURCE_EXHAUSTED",
                                                "FAILED_PRECONDITION",
                                                "ABORTED",
                                                "OUT_OF_RANGE",
                                                "UNIMPLEMENTED",
                                                "INTERNAL",
                                                "UNAVAILABLE",
                                                "DATA_LOSS",
                                                "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kCodes[code] : "UNKNOWN";
}

void AddRpcMetrics(grpc::ServerBuilder& builder, Observer& observer) {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      factories;
  factories.push_back(std::make_unique<RpcTimingFactory>(observer));
  builder.experimental().SetInterceptorCreators(std::move(factories));
}

}  // namespace gdt::coordinator
