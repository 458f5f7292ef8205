#ifndef GDT_COORDINATOR_CHECKPOINT_SERVICE_H_
#define GDT_COORDINATOR_CHECKPOINT_SERVICE_H_

#include "coordinator/coordinator.h"
#include "gdt/v1/coordinator.grpc.pb.h"

namespace gdt::coordinator {

// The gRPC face of the checkpoint manifest records: converts each
// request into a Coordinator::RecordCheckpoint / ListCheckpoints call and the
// result back, with their status codes. Tokens are never logged.
//
// Thread-safe. Keeps a reference to `coordinator`, which must outlive it.
class CheckpointService final : public v1::CheckpointRecords::CallbackService {
 public:
  explicit CheckpointService(Coordinator& coordinator)
      : coordinator_(coordinator) {}

  grpc::ServerUnaryReactor* RecordCheckpoint(
      grpc::CallbackServerContext* context,
      const v1::RecordCheckpointRequest* request,
      v1::RecordCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* ListCheckpoints(
      grpc::CallbackServerContext* context,
      const v1::ListCheckpointsRequest* request,
      v1::ListCheckpointsResponse* response) override;

 private:
  Coordinator& coordinator_;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_CHECKPOINT_SERVICE_H_
