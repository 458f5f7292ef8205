#include "rendezvous/checkpoint_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/channel.h"
#include "rendezvous/grpc_status.h"

namespace gdt::rendezvous {
namespace {

absl::Status Explain(const grpc::Status& status, const char* op,
                     const std::string& endpoint) {
  absl::Status converted = FromGrpcStatus(status);
  if (converted.code() == absl::StatusCode::kDeadlineExceeded ||
      converted.code() == absl::StatusCode::kUnavailable) {
    return absl::Status(
        converted.code(),
        absl::StrCat("checkpoint ", op, ": coordinator ", endpoint,
                     " unavailable: ", converted.message()));
  }
  return absl::Status(converted.code(),
                      absl::StrCat("checkpoint ", op, ": coordinator ",
                                   endpoint, ": ", converted.message()));
}

}  // namespace

CheckpointClient::CheckpointClient(KvTarget target)
    : target_(std::move(target)),
      stub_(v1::CheckpointRecords::NewStub(
          NewChannel(target_.endpoint, target_.security))) {}

void CheckpointClient::Fill(v1::CheckpointCaller* caller) const {
  caller->set_gang_id(target_.gang_id);
  caller->set_epoch(target_.epoch);
  caller->set_token(target_.token);
}

absl::Status CheckpointClient::Record(int64_t step, uint32_t rank,
                                      int64_t job_id,
                                      const std::string& manifest_json,
                                      Deadline deadline) {
  grpc::ClientContext context;
  context.set_deadline(deadline);
  context.set_wait_for_ready(true);
  v1::RecordCheckpointRequest request;
  Fill(request.mutable_caller());
  request.mutable_record()->set_step(step);
  request.mutable_record()->set_rank(rank);
  request.mutable_record()->set_job_id(job_id);
  request.mutable_record()->set_manifest_json(manifest_json);
  v1::RecordCheckpointResponse response;
  grpc::Status status = stub_->RecordCheckpoint(&context, request, &response);
  if (!status.ok()) {
    // A refusal for pace carries how long to wait before trying again.
    return WithRetryAfterTrailer(Explain(status, "record", target_.endpoint),
                                 context);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointRecordInfo>> CheckpointClient::List(
    Deadline deadline) {
  grpc::ClientContext context;
  context.set_deadline(deadline);
  context.set_wait_for_ready(true);
  v1::ListCheckpointsRequest request;
  Fill(request.mutable_caller());
  v1::ListCheckpointsResponse response;
  grpc::Status status = stub_->ListCheckpoints(&context, request, &response);
  if (!status.ok()) return Explain(status, "list", target_.endpoint);
  std::vector<CheckpointRecordInfo> records;
  for (v1::CheckpointRecord& r : *response.mutable_records()) {
    records.push_back(CheckpointRecordInfo{
        r.epoch(), r.step(), r.rank(), r.job_id(),
        std::move(*r.mutable_manifest_json()), r.recorded_unix_ms()});
  }
  return records;
}

}  // namespace gdt::rendezvous
