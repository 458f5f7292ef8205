#ifndef GDT_COORDINATOR_KV_SERVICE_H_
#define GDT_COORDINATOR_KV_SERVICE_H_

#include "gdt/v1/kv.grpc.pb.h"
#include "kv/gang_kv.h"

namespace gdt::kv {

// The gRPC face of the gang key-value store (callback API): converts each
// request into a GangKv call and the result back, with GangKv's status codes.
// A Wait holds no thread while it waits; its deadline is the call's deadline
// (the client sees DEADLINE_EXCEEDED, and the wait is forgotten). Tokens are
// never logged.
//
// Thread-safe. Keeps a reference to `kv`, which must outlive it.
class KvService final : public v1::GangKv::CallbackService {
 public:
  explicit KvService(GangKv& kv) : kv_(kv) {}

  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* context,
                                const v1::KvSetRequest* request,
                                v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::KvGetRequest* request,
                                v1::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext* context,
                                 const v1::KvWaitRequest* request,
                                 v1::KvWaitResponse* response) override;
  grpc::ServerUnaryReactor* CompareAndSet(
      grpc::CallbackServerContext* context,
      const v1::KvCompareAndSetRequest* request,
      v1::KvCompareAndSetResponse* response) override;
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* context,
                                const v1::KvAddRequest* request,
                                v1::KvAddResponse* response) override;

 private:
  class WaitReactor;

  GangKv& kv_;
};

}  // namespace gdt::kv

#endif  // GDT_COORDINATOR_KV_SERVICE_H_
