#include "coordinator/checkpoint_service.h"

#include <utility>

#include "common/logging.h"
#include "rendezvous/grpc_status.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

kv::KvCaller CallerOf(const v1::CheckpointCaller& caller) {
  return kv::KvCaller{caller.gang_id(), caller.epoch(), caller.token()};
}

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context,
                                     const char* op,
                                     const v1::CheckpointCaller& caller,
                                     const absl::Status& status) {
  if (!status.ok()) {
    spdlog::debug("event=checkpoint_refused op={} gang={} epoch={} error={}",
                  op, LogValue(caller.gang_id()), caller.epoch(),
                  LogValue(status.ToString()));
  }
  rendezvous::AddRetryAfterTrailer(status, *context);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(rendezvous::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* CheckpointService::RecordCheckpoint(
    grpc::CallbackServerContext* context,
    const v1::RecordCheckpointRequest* request,
    v1::RecordCheckpointResponse* /*response*/) {
  state::CheckpointRecord record;
  record.step = request->record().step();
  record.rank = request->record().rank();
  record.job_id = request->record().job_id();
  record.manifest_json = request->record().manifest_json();
  const absl::Status status = coordinator_.RecordCheckpoint(
      CallerOf(request->caller()), std::move(record));
  if (status.ok()) {
    spdlog::info("event=checkpoint_recorded gang={} epoch={} step={} job={}",
                 LogValue(request->caller().gang_id()),
                 request->caller().epoch(), request->record().step(),
                 request->record().job_id());
  }
  return FinishWith(context, "record", request->caller(), status);
}

grpc::ServerUnaryReactor* CheckpointService::ListCheckpoints(
    grpc::CallbackServerContext* context,
    const v1::ListCheckpointsRequest* request,
    v1::ListCheckpointsResponse* response) {
  absl::StatusOr<std::vector<state::CheckpointRecord>> records =
      coordinator_.ListCheckpoints(CallerOf(request->caller()));
  if (records.ok()) {
    for (state::CheckpointRecord& r : *records) {
      v1::CheckpointRecord* out = response->add_records();
      out->set_epoch(r.epoch);
      out->set_step(r.step);
      out->set_rank(r.rank);
      out->set_job_id(r.job_id);
      out->set_manifest_json(std::move(r.manifest_json));
      out->set_recorded_unix_ms(r.recorded_unix_ms);
    }
  }
  return FinishWith(context, "list", request->caller(), records.status());
}

}  // namespace gdt::coordinator
