#include "agent/agent_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/port_check.h"
#include "common/logging.h"
#include "common/member_token.h"
#include "common/mutex.h"
#include "common/peer_loss.h"
#include "common/subprocess.h"
#include "rendezvous/channel.h"
#include "rendezvous/grpc_status.h"
#include "rendezvous/metadata.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

using rendezvous::kMemberTokenMetadata;

// What a request names: always its member, and for a user stage its gang,
// epoch and job (empty / 0 when it does not say).
struct NamedMember {
  std::string member_id;
  std::string gang_id;
  uint32_t epoch = 0;
  int64_t job_id = 0;
};

// OK when `context` carries a member token the coordinator finds good
// (`tokens`; no check when null) and every id `named` gives is the
// token's: a token opens its own member and nothing of another gang.
absl::Status CheckMemberToken(const grpc::ServerContextBase& context,
                              MemberTokenCache* tokens,
                              const NamedMember& named) {
  if (tokens == nullptr) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kMemberTokenMetadata);
  if (it == metadata.end() || it->second.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "no member token for member ", named.member_id,
        ": this agent runs stages only for the executor the coordinator "
        "admitted to this host"));
  }
  absl::StatusOr<MemberClaims> claims =
      tokens->Check(std::string(it->second.data(), it->second.size()),
                    CallerOf(context.peer()));
  if (!claims.ok()) {
    if (claims.status().code() == absl::StatusCode::kPermissionDenied ||
        claims.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::PermissionDeniedError(claims.status().message());
    }
    if (absl::IsResourceExhausted(claims.status())) return claims.status();
    return absl::Status(
        claims.status().code(),
        absl::StrCat("cannot check the member token of ", named.member_id,
                     " with the coordinator: ", claims.status().message()));
  }
  const bool names_gang =
      !named.gang_id.empty() || named.job_id != 0 || named.epoch != 0;
  if (named.member_id != claims->member_id() ||
      (names_gang &&
       (named.gang_id != claims->gang_id || named.job_id != claims->job_id ||
        named.epoch != claims->epoch))) {
    std::string request = absl::StrCat("member ", named.member_id);
    if (names_gang) {
      absl::StrAppend(&request, " (gang ", named.gang_id, " epoch ",
                      named.epoch, " job ", named.job_id, ")");
    }
    return absl::PermissionDeniedError(
        absl::StrCat("the member token is for member ", claims->member_id(),
                     " (epoch ", claims->epoch, "), not for ", request));
  }
  return absl::OkStatus();
}

// torchrun writes the first failed worker's error (its exception, when the
// training script records it) to $TORCHELASTIC_ERROR_FILE. Read at the
// stage's exit, with a bound: the file is the member's to write.
constexpr size_t kMaxErrorFileBytes = 1 << 20;

// The error file's contents; empty when there is none (or only a link,
// which the agent does not follow into files the member may not read).
std::string ReadErrorFile(const std::string& path) {
  // In the member's scratch dir: a FIFO put there must not block this
  // thread (the stage's) in open() or read().
  const int fd =
      open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat info = {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return "";
  }
  std::string text;
  char buffer[8192];
  while (text.size() < kMaxErrorFileBytes) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

// Output queued for a client that reads slowly; beyond this the stage stops
// reading the script's pipes until the client catches up.
constexpr size_t kMaxQueuedBytes = 4 << 20;

StageRequest FromProto(const v1::StartStage& start) {
  StageRequest request;
  request.member_id = start.member_id();
  request.stage = start.stage();
  request.script = start.script();
  request.env.insert(start.env().begin(), start.env().end());
  request.working_dir = start.working_dir();
  request.kill_grace = std::chrono::seconds(start.kill_grace_seconds());
  request.hang_timeout = std::chrono::seconds(start.hang_timeout_seconds());
  request.evidence_dir = start.evidence_dir();
  request.teardown_timeout =
      std::chrono::seconds(start.teardown_timeout_seconds());
  for (const v1::StageFile& file : start.files()) {
    request.files.push_back({file.env_var(), file.name(), file.content()});
  }
  return request;
}

// One RunStage call. Reactions and the stage's supervising thread both
// touch it; `mu_` guards the shared state. gRPC calls (StartWrite, Finish)
// are made without holding `mu_`, since their reactions may run inline.
// Finish() is called only after the stage's OnExit(), so the stage never
// sees a destroyed observer; OnDone() deletes the reactor.
class StageReactor final
    : public grpc::ServerBidiReactor<v1::RunStageRequest, v1::RunStageResponse>,
      public StageObserver {
 public:
  StageReactor(Supervisor& supervisor,
               const AgentService::MemberLostHandler& member_lost,
               const AgentService::ExitHandler& exit_handler,
               const grpc::CallbackServerContext& context,
               MemberTokenCache* member_tokens, RefusalLog& refusals)
      : supervisor_(supervisor),
        member_lost_(member_lost),
        exit_handler_(exit_handler),
        context_(context),
        member_tokens_(member_tokens),
        refusals_(refusals) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Half-close does nothing once the stage runs; before that the call
      // is malformed.
      if (!started_) {
        started_ = true;
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "RunStage stream ended before StartStage"));
      }
      return;
    }
    if (!started_) {
      started_ = true;
      Begin();
      return;
    }
    std::shared_ptr<Stage> stage = CurrentStage();
    switch (request_.signal().signal()) {
      case v1::SIGNAL_TERM:
        stopped_by_client_.store(true);
        stage->Signal(StageSignal::kTerm);
        break;
      case v1::SIGNAL_KILL:
        stopped_by_client_.store(true);
        stage->Signal(StageSignal::kKill);
        break;
      case v1::SIGNAL_INT:
        stopped_by_client_.store(true);
        stage->Signal(StageSignal::kInt);
        break;
      case v1::SIGNAL_COLLECT_EVIDENCE:
        stage->Signal(StageSignal::kCollectEvidence);
        break;
      default:
        spdlog::warn("event=run_stage_message_ignored member={} reason={}",
                     LogValue(member_id_), LogValue("not a signal"));
        break;
    }
    StartRead(&request_);
  }

  void OnCancel() override {
    std::shared_ptr<Stage> stage;
    {
      MutexLock lock(mu_);
      cancelled_ = true;
      stage = stage_;
    }
    // The executor went away: stop the stage as SIGNAL_TERM would, and a
    // user stage's member is lost.
    if (stage == nullptr || stage->finished()) return;
    stage->Signal(StageSignal::kTerm);
    if (member_lost_ && !start_.gang_id().empty()) {
      spdlog::warn("event=executor_gone member={} stage={} action=stop_stage",
                   LogValue(member_id_), LogValue(stage_name_));
      member_lost_(start_);
    }
  }

  void OnWriteDone(bool ok) override {
    const v1::RunStageResponse* next = nullptr;
    bool finish = false;
    {
      MutexLock lock(mu_);
      queued_bytes_ -= queue_.front().second;
      queue_.pop_front();
      if (!ok) broken_ = true;
      if (!queue_.empty()) {
        next = &queue_.front().first;
      } else {
        writing_ = false;
        finish = exit_queued_;
        // The stage ended before StartAllowed() was done with `this`: it
        // finishes the call.
        if (finish && starting_) {
          finish_deferred_ = true;
          finish = false;
        }
      }
    }
    if (next != nullptr) {
      StartWrite(next);
    } else if (finish) {
      Finish(grpc::Status::OK);
    }
  }

  void OnDone() override { delete this; }

  bool ReadyForOutput() override {
    MutexLock lock(mu_);
    return broken_ || queued_bytes_ < kMaxQueuedBytes;
  }

  void OnOutput(OutputSource source, std::string_view data) override {
    v1::RunStageResponse message;
    v1::OutputChunk* chunk = message.mutable_output();
    chunk->set_stream(source == OutputSource::kStdout
                          ? v1::OUTPUT_STREAM_STDOUT
                          : v1::OUTPUT_STREAM_STDERR);
    chunk->set_data(data.data(), data.size());
    peer_loss_.Feed(data);  // Only ever on the stage's thread.
    Enqueue(std::move(message), data.size(), /*last=*/false);
  }

  void OnHung(std::chrono::seconds timeout,
              const StageProgress& progress) override {
    v1::RunStageResponse message;
    v1::HangDetected* hang = message.mutable_hang();
    hang->set_idle_seconds(static_cast<uint32_t>(timeout.count()));
    hang->set_last_progress_unix_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            progress.last.time_since_epoch())
            .count());
    if (progress.step.has_value()) hang->set_step(*progress.step);
    Enqueue(std::move(message), 0, /*last=*/false);
  }

  void OnExit(const ExitStatus& status) override {
    spdlog::info("event=stage_exited member={} stage={} code={}",
                 LogValue(member_id_), LogValue(stage_name_), status.code());
    RecordExit(status);
    v1::RunStageResponse message;
    message.mutable_exit()->set_exit_code(status.code());
    message.mutable_exit()->set_signal(status.signal);
    // Last statement: once the exit is written, Finish() may delete us.
    Enqueue(std::move(message), 0, /*last=*/true);
  }

 private:
  void Begin() {
    if (!request_.has_start()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the first RunStage message must be StartStage"));
      return;
    }
    if (member_tokens_ == nullptr) {
      StartAllowed();
      return;
    }
    // The check may wait for the coordinator, and a reaction must not
    // block: it runs on a thread of its own, which goes on with the stage or
    // finishes the call. The reactor lives until Finish(), so `this` stays
    // valid, and no read is pending meanwhile.
    std::thread([this] {
      const v1::StartStage& start = request_.start();
      if (absl::Status allowed =
              CheckMemberToken(context_, member_tokens_,
                               {start.member_id(), start.gang_id(),
                                start.epoch(), start.job_id()});
          !allowed.ok()) {
        if (std::optional<uint64_t> refused =
                refusals_.Occur("stage_refused")) {
          spdlog::warn(
              "event=stage_refused member={} stage={} error={} refused={}",
              LogValue(start.member_id()), LogValue(start.stage()),
              LogValue(allowed.ToString()), *refused);
        }
        Finish(rendezvous::ToGrpcStatus(allowed));
        return;
      }
      StartAllowed();
    }).detach();
  }

  // Begin() once the caller may run the stage.
  void StartAllowed() {
    member_id_ = request_.start().member_id();
    stage_name_ = request_.start().stage();
    if (request_.start().has_setup()) {
      if (absl::Status status = SetUpMember(request_.start().setup());
          !status.ok()) {
        spdlog::warn("event=setup_failed member={} stage={} error={}",
                     LogValue(member_id_), LogValue(stage_name_),
                     LogValue(status.ToString()));
        Finish(rendezvous::ToGrpcStatus(status));
        return;
      }
    }
    // What OnCancel() needs, without the script and files.
    start_.set_member_id(member_id_);
    start_.set_stage(stage_name_);
    start_.set_gang_id(request_.start().gang_id());
    start_.set_epoch(request_.start().epoch());
    start_.set_member_index(request_.start().member_index());
    start_.set_job_id(request_.start().job_id());
    start_.set_agent_reports_exit(request_.start().agent_reports_exit());
    StageRequest stage_request = FromProto(request_.start());
    // A fresh error file for torchrun in the member's scratch dir, unless
    // the job chose its own.
    if (start_.agent_reports_exit() && !start_.gang_id().empty() &&
        stage_request.env.count("TORCHELASTIC_ERROR_FILE") == 0) {
      error_file_ = supervisor_.ScratchDir(member_id_) +
                    "/torchelastic-error-" + EscapePathComponent(stage_name_) +
                    ".json";
      unlink(error_file_.c_str());
      stage_request.env["TORCHELASTIC_ERROR_FILE"] = error_file_;
    }
    {
      // From here the stage may run, exit and have its exit written before
      // this function is done: Finish() (and with it `delete this`) waits
      // for the end of it (see OnWriteDone).
      MutexLock lock(mu_);
      starting_ = true;
    }
    absl::StatusOr<std::shared_ptr<Stage>> stage =
        supervisor_.StartStage(stage_request, this);
    if (!stage.ok()) {
      spdlog::warn("event=stage_rejected member={} stage={} error={}",
                   LogValue(member_id_), LogValue(stage_name_),
                   LogValue(stage.status().ToString()));
      Finish(rendezvous::ToGrpcStatus(stage.status()));
      return;
    }
    bool cancelled = false;
    {
      MutexLock lock(mu_);
      stage_ = *stage;
      cancelled = cancelled_;
    }
    if (cancelled) (*stage)->Signal(StageSignal::kTerm);
    StartRead(&request_);
    bool finish = false;
    {
      MutexLock lock(mu_);
      starting_ = false;
      finish = finish_deferred_;
    }
    if (finish) Finish(grpc::Status::OK);
  }

  // StartStage.setup: the member's directories, as SetupMember makes them.
  absl::Status SetUpMember(const v1::SetupMemberRequest& setup) {
    if (!setup.member_id().empty() && setup.member_id() != member_id_) {
      return absl::InvalidArgumentError(
          absl::StrCat("setup is for member ", setup.member_id(),
                       ", the stage for member ", member_id_));
    }
    const std::vector<std::string> extra_dirs(setup.extra_dirs().begin(),
                                              setup.extra_dirs().end());
    return supervisor_.SetupMember(member_id_, setup.builds_dir(), extra_dirs);
  }

  // Hands a user script's exit to the outbox (see
  // StartStage.agent_reports_exit), before the client hears of it.
  void RecordExit(const ExitStatus& status) {
    if (!exit_handler_ || !start_.agent_reports_exit() ||
        start_.gang_id().empty()) {
      return;
    }
    {
      MutexLock lock(mu_);
      // The executor went away first: the member was reported lost.
      if (cancelled_ && member_lost_) return;
    }
    ExitRecord record;
    record.gang_id = start_.gang_id();
    record.epoch = start_.epoch();
    record.member_index = start_.member_index();
    record.job_id = start_.job_id();
    record.exit_code = status.code();
    record.signal = status.signal;
    // Stopped by its executor: the job was cancelled, or its gang failed
    // already (then the report changes nothing).
    record.cancelled = stopped_by_client_.load();
    record.peer_suspected = peer_loss_.detected();
    // torchrun's own record of its "first" failed worker: one that failed
    // with its own error makes this member the culprit. One whose error is
    // a lost peer makes it a victim only when no other rank of this member
    // failed on its own (torchrun's summary, see PeerLossDetector): torchrun
    // picks that worker by second-resolution times, and a rank that left
    // without recording anything (an exit code, a signal) always looks
    // later than a peer that recorded its loss.
    if (!error_file_.empty() && status.code() != 0) {
      const std::string error = ReadErrorFile(error_file_);
      if (!error.empty()) {
        PeerLossDetector in_error;
        in_error.Feed(error);
        record.peer_suspected =
            in_error.detected() && !peer_loss_.own_failure();
        spdlog::info("event=torchrun_error_file member={} victim={}",
                     LogValue(member_id_), record.peer_suspected);
      }
    }
    record.exited_unix_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count();
    exit_handler_(record);
  }

  std::shared_ptr<Stage> CurrentStage() {
    MutexLock lock(mu_);
    return stage_;
  }

  void Enqueue(v1::RunStageResponse message, size_t bytes, bool last) {
    const v1::RunStageResponse* first = nullptr;
    {
      MutexLock lock(mu_);
      if (last) exit_queued_ = true;
      // Output for a client that is gone is dropped; the exit still goes
      // through the queue so that Finish() follows it.
      if (broken_ && !last) return;
      queue_.emplace_back(std::move(message), bytes);
      queued_bytes_ += bytes;
      if (!writing_) {
        writing_ = true;
        first = &queue_.front().first;
      }
    }
    // std::deque keeps element addresses stable while others are appended.
    if (first != nullptr) StartWrite(first);
  }

  Supervisor& supervisor_;
  const AgentService::MemberLostHandler& member_lost_;
  const AgentService::ExitHandler& exit_handler_;
  const grpc::CallbackServerContext& context_;  // Outlives the reactor.
  MemberTokenCache* const member_tokens_;       // The service's; may be null.
  RefusalLog& refusals_;                        // The service's.
  // Reactions that read are serialised by gRPC (one read at a time).
  v1::RunStageRequest request_;
  bool started_ = false;
  std::string member_id_;
  std::string stage_name_;
  v1::StartStage start_;  // Identity only; set in Begin() before any cancel
                          // can see a stage.
  std::atomic<bool> stopped_by_client_{false};
  std::string error_file_;      // Set before the stage starts; empty = none.
  PeerLossDetector peer_loss_;  // Fed on the stage's thread.

  Mutex mu_;
  std::shared_ptr<Stage> stage_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::pair<v1::RunStageResponse, size_t>> queue_
      ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // StartAllowed() still uses the reactor after the stage started; the
  // exit's Finish() waits for it (finish_deferred_).
  bool starting_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_deferred_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool exit_queued_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::Status AgentService::SetupMember(grpc::ServerContext* context,
                                       const v1::SetupMemberRequest* request,
                                       v1::SetupMemberResponse* response) {
  if (absl::Status allowed = CheckMemberToken(*context, member_tokens_.get(),
                                              {request->member_id(), "", 0, 0});
      !allowed.ok()) {
    if (std::optional<uint64_t> refused = refusals_.Occur("setup_refused")) {
      spdlog::warn("event=setup_refused member={} error={} refused={}",
                   LogValue(request->member_id()), LogValue(allowed.ToString()),
                   *refused);
    }
    return rendezvous::ToGrpcStatus(allowed);
  }
  const std::vector<std::string> extra_dirs(request->extra_dirs().begin(),
                                            request->extra_dirs().end());
  absl::Status status = supervisor_.SetupMember(
      request->member_id(), request->builds_dir(), extra_dirs);
  if (!status.ok()) {
    spdlog::warn("event=setup_failed member={} error={}",
                 LogValue(request->member_id()), LogValue(status.ToString()));
  } else {
    spdlog::info("event=member_set_up member={} builds_dir={}",
                 LogValue(request->member_id()),
                 LogValue(request->builds_dir()));
  }
  return rendezvous::ToGrpcStatus(status);
}

grpc::ServerBidiReactor<v1::RunStageRequest, v1::RunStageResponse>*
AgentService::RunStage(grpc::CallbackServerContext* context) {
  return new StageReactor(supervisor_, member_lost_, exit_, *context,
                          member_tokens_.get(), refusals_);
}

grpc::Status AgentService::TeardownMember(
    grpc::ServerContext* context, const v1::TeardownMemberRequest* request,
    v1::TeardownMemberResponse* response) {
  if (absl::Status allowed = CheckMemberToken(*context, member_tokens_.get(),
                                              {request->member_id(), "", 0, 0});
      !allowed.ok()) {
    if (std::optional<uint64_t> refused = refusals_.Occur("teardown_refused")) {
      spdlog::warn("event=teardown_refused member={} error={} refused={}",
                   LogValue(request->member_id()), LogValue(allowed.ToString()),
                   *refused);
    }
    return rendezvous::ToGrpcStatus(allowed);
  }
  absl::StatusOr<uint32_t> killed = supervisor_.TeardownMember(
      request->member_id(), request->remove_builds_dir());
  if (!killed.ok()) {
    spdlog::warn("event=teardown_failed member={} error={}",
                 LogValue(request->member_id()),
                 LogValue(killed.status().ToString()));
    return rendezvous::ToGrpcStatus(killed.status());
  }
  // A torn-down member's token must reach the coordinator again, which
  // refuses it once the member has left.
  if (member_tokens_ != nullptr) member_tokens_->Forget(request->member_id());
  response->set_processes_killed(*killed);
  return grpc::Status::OK;
}

grpc::Status AgentService::CheckPort(grpc::ServerContext* context,
                                     const v1::CheckPortRequest* request,
                                     v1::CheckPortResponse* response) {
  absl::StatusOr<bool> free = IsPortFree(request->port());
  if (!free.ok()) return rendezvous::ToGrpcStatus(free.status());
  response->set_free(*free);
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(
    const std::string& listen_address, AgentService& service) {
  return Start(listen_address, service, grpc::InsecureServerCredentials());
}

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(
    const std::string& listen_address, AgentService& service,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    const ConnectionLimits& limits) {
  // Anyone who reaches the agent (every job on its host) could otherwise
  // hold as many connections, and calls on them, as it likes: the gate
  // accepts them and hands gRPC only those within the caps.
  ConnectionGate::Options options;
  options.who = "agent";
  options.max_per_peer = limits.max_connections_per_peer;
  options.max_total = limits.max_connections;
  options.ipv6_prefix_length = limits.peer_ipv6_prefix_length;
  // A job may connect from any loopback address, but only as its own uid.
  options.loopback_peers_by_uid = true;
  absl::StatusOr<std::unique_ptr<ConnectionGate>> gate =
      ConnectionGate::Listen(listen_address, options);
  if (!gate.ok()) return gate.status();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::
              FROM_FD,
          credentials);
  builder.RegisterService(&service);
  // A stage whose executor vanished (its host gone or cut off) is noticed
  // through missed pings and stopped like a cancelled stream.
  rendezvous::EnableKeepalive(builder);
  rendezvous::ApplyServerLimits(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || acceptor == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the agent's server on ", listen_address));
  }
  (*gate)->SetHandoff([acceptor](int listener_fd, int fd) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters
        connection;
    connection.listener_fd = listener_fd;
    connection.fd = fd;
    acceptor->HandleNewConnection(&connection);
  });
  return std::unique_ptr<AgentServer>(
      new AgentServer(std::move(server), std::move(*gate)));
}

void AgentServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  if (shut_down_) return;
  shut_down_ = true;
  // New connections are closed from now on; the port stays taken until
  // this object goes.
  gate_->SetHandoff(nullptr);
  server_->Shutdown(deadline);
  server_->Wait();
}

// Gdt-rsh.
grpc::Status AgentService::ExecInMember(
    grpc::ServerContext* context, const v1::ExecInMemberRequest* request,
    grpc::ServerWriter<v1::ExecInMemberResponse>* writer) {
  if (request->gang_id().empty() || request->argv().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "ExecInMember needs a gang id and a command");
  }
  absl::StatusOr<Supervisor::ExecContext> member =
      supervisor_.FindExecContext(request->gang_id(), request->token());
  if (!member.ok()) {
    if (std::optional<uint64_t> refused = refusals_.Occur("exec_refused")) {
      spdlog::warn("event=exec_refused gang={} reason={} refused={}",
                   LogValue(request->gang_id()),
                   LogValue(std::string(member.status().message())), *refused);
    }
    return rendezvous::ToGrpcStatus(member.status());
  }
  {
    MutexLock lock(execs_mu_);
    int& running = execs_[member->member_id];
    if (running >= kMaxExecsPerMember) {
      if (std::optional<uint64_t> refused =
              refusals_.Occur("exec_refused_busy")) {
        spdlog::warn("event=exec_refused member={} reason={} refused={}",
                     LogValue(member->member_id),
                     LogValue("too many commands at once"), *refused);
      }
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("member ", member->member_id, " already runs ", running,
                       " commands through gdt-rsh, the limit; "
                       "wait for one to end"));
    }
    ++running;
  }
  // Counted until the call returns, however it returns.
  struct ExecSlot {
    AgentService* service;
    std::string member_id;
    ~ExecSlot() {
      MutexLock lock(service->execs_mu_);
      auto it = service->execs_.find(member_id);
      if (it != service->execs_.end() && --it->second <= 0) {
        service->execs_.erase(it);
      }
    }
  } slot{this, member->member_id};
  spdlog::info("event=exec_in_member member={} argv0={}",
               LogValue(member->member_id), LogValue(request->argv(0)));
  SpawnOptions spawn;
  spawn.argv.assign(request->argv().begin(), request->argv().end());
  spawn.env = member->env;
  spawn.working_dir = member->working_dir;
  spawn.die_with_parent = true;
  spawn.credentials = member->credentials;    // The member's account,
  spawn.cgroup_procs = member->cgroup_procs;  // and its cgroup.
  v1::ExecInMemberResponse response;
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  if (!child.ok()) {
    response.mutable_output()->set_stream(v1::OUTPUT_STREAM_STDERR);
    response.mutable_output()->set_data(
        absl::StrCat("gdt-rsh: cannot run ", request->argv(0), ": ",
                     child.status().message(), "\n"));
    writer->Write(response);
    response.mutable_exit()->set_exit_code(127);
    writer->Write(response);
    return grpc::Status::OK;
  }
  // A dead agent's successor ends the command's group (process_ledger.h).
  const pid_t exec_group = (*child)->pid();
  supervisor_.RecordProcessGroup(exec_group);
  bool client_gone = false;
  auto forward = [&](OutputSource source, std::string_view data) {
    v1::ExecInMemberResponse chunk;
    chunk.mutable_output()->set_stream(source == OutputSource::kStdout
                                           ? v1::OUTPUT_STREAM_STDOUT
                                           : v1::OUTPUT_STREAM_STDERR);
    chunk.mutable_output()->set_data(std::string(data));
    if (!writer->Write(chunk)) client_gone = true;
  };
  std::optional<ExitStatus> status;
  while (!status.has_value()) {
    status = (*child)->WaitUntil(
        std::chrono::steady_clock::now() + std::chrono::milliseconds(200),
        forward);
    if (status.has_value()) break;
    if (client_gone || context->IsCancelled() ||
        !supervisor_.MemberRunning(member->member_id)) {
      status = (*child)->Terminate(std::chrono::seconds(2), forward);
    }
  }
  supervisor_.ForgetProcessGroup(exec_group);
  response.mutable_exit()->set_exit_code(status->code());
  response.mutable_exit()->set_signal(status->signal);
  writer->Write(response);
  return grpc::Status::OK;
}

}  // namespace gdt::agent
