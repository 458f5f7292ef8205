// Over the wire: a real gdt-coord server (CoordinatorServer, SQLite in
// a temp dir) on 127.0.0.1:0 that verifies members against the fake GitLab
// API, with operator (admin) tokens; clients are the real CoordinatorClient
// and KvClient presenting their secrets as gRPC metadata.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log_throttle.h"
#include "common/member_token.h"
#include "common/secret.h"
#include "coordinator/server.h"
#include "ctl/admin_token.h"
#include "ctl/cancel.h"
#include "ctl/hosts.h"
#include "ctl/status.h"
#include "gitlab/fake_gitlab_api.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/kv_client.h"
#include "testing/coordinator_fixture.h"
#include "testing/log_capture.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr char kAdminToken[] = "admin-secret-for-tests";

class SecurityTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    absl::StatusOr<std::unique_ptr<gitlab::FakeGitLabApi>> gitlab =
        gitlab::FakeGitLabApi::Start({});
    ASSERT_TRUE(gitlab.ok()) << gitlab.status();
    gitlab_ = std::move(*gitlab);
    // Pipeline 77 of project 5 runs "train 1/2" and "train 2/2"; pipeline 78
    // of the same project and project 6 run their own "train 1/2".
    AddJob(101, "tok-a1", "train 1/2", 5, 77);
    AddJob(102, "tok-a2", "train 2/2", 5, 77);
    AddJob(201, "tok-b1", "train 1/2", 5, 78);
    AddJob(202, "tok-b2", "train 2/2", 5, 78);
    AddJob(301, "tok-c1", "train 1/2", 6, 77);

    SetAdminToken(kAdminToken);
    config_.gitlab_url = gitlab_->url();
    // What the jobs' CI_SERVER_URL says (the fake listens elsewhere).
    config_.gitlab_instance_url = "https://gitlab.example.com";
    config_.gitlab_timeout = 5s;
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    admin_ = ClientWith("authorization", std::string("Bearer ") + kAdminToken);
    ASSERT_TRUE(admin_->RegisterHost(Host("cpu-01"), 5s).ok());
  }

  // Restarts the coordinator on the same state with `config_`.
  void Restart() {
    ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
    admin_ = ClientWith("authorization", std::string("Bearer ") + kAdminToken);
  }

  v1::HostSpec Host(const std::string& name) { return LoopbackHost(name, 8); }

  void AddJob(int64_t id, const std::string& token, const std::string& name,
              int64_t project, int64_t pipeline) {
    gitlab::FakeJob job;
    job.id = id;
    job.token = token;
    job.name = name;
    job.project_id = project;
    job.pipeline_id = pipeline;
    gitlab_->AddJob(job);
  }

  // What the executor of job `job_id` (member `index` of a gang of 2 of
  // `pipeline`) sends.
  static v1::JoinGangRequest Request(int64_t job_id, uint32_t index,
                                     int64_t project, int64_t pipeline) {
    v1::JoinGangRequest request;
    v1::GangKey* key = request.mutable_key();
    key->set_instance("https://gitlab.example.com");
    key->set_project_id(project);
    key->set_pipeline_id(pipeline);
    key->set_group_name("train");
    key->set_size(2);
    request.set_member_index(index);
    request.set_job_id(job_id);
    request.set_job_name("train " + std::to_string(index) + "/2");
    request.set_launcher(v1::LAUNCHER_NCCL);
    return request;
  }

  absl::StatusOr<v1::Assignment> Join(const std::string& token,
                                      const v1::JoinGangRequest& request) {
    auto client = ClientWith(token.empty() ? "" : "gdt-job-token", token);
    return client->JoinGang(request, DeadlineIn(20s), nullptr, nullptr);
  }

  // Admits the gang of `pipeline` (jobs id1, id2 with tokens t1, t2).
  std::vector<v1::Assignment> Admit(int64_t pipeline, int64_t id1,
                                    const std::string& t1, int64_t id2,
                                    const std::string& t2) {
    auto first = std::async(std::launch::async, [&] {
      return Join(t1, Request(id1, 1, 5, pipeline));
    });
    absl::StatusOr<v1::Assignment> second =
        Join(t2, Request(id2, 2, 5, pipeline));
    absl::StatusOr<v1::Assignment> one = first.get();
    EXPECT_TRUE(one.ok()) << one.status();
    EXPECT_TRUE(second.ok()) << second.status();
    if (!one.ok() || !second.ok()) return {};
    return {*one, *second};
  }

  std::unique_ptr<gitlab::FakeGitLabApi> gitlab_;
  std::unique_ptr<rendezvous::CoordinatorClient> admin_;
};

TEST_F(SecurityTest, VerifiedMembersFormTheirGang) {
  std::vector<v1::Assignment> gang = Admit(77, 101, "tok-a1", 102, "tok-a2");
  ASSERT_EQ(gang.size(), 2u);
  EXPECT_EQ(gang[0].gang_id(), "train-p5-pl77-n2");
  EXPECT_GE(gitlab_->RequestCount("/api/v4/job"), 2);
}

TEST_F(SecurityTest, ForgedVariablesAreRejectedWithTheReason) {
  struct Case {
    const char* what;
    std::function<void(v1::JoinGangRequest&)> forge;
  };
  const std::vector<Case> cases = {
      {"CI_PIPELINE_ID 78 disagrees with GitLab, which says 77",
       [](v1::JoinGangRequest& r) { r.mutable_key()->set_pipeline_id(78); }},
      {"CI_NODE_INDEX 2 disagrees with GitLab, which says 1",
       [](v1::JoinGangRequest& r) { r.set_member_index(2); }},
      {"CI_NODE_TOTAL 4 disagrees with GitLab, which says 2",
       [](v1::JoinGangRequest& r) { r.mutable_key()->set_size(4); }},
      {"CI_JOB_NAME 'train 1/4' disagrees with GitLab, which says 'train 1/2'",
       [](v1::JoinGangRequest& r) { r.set_job_name("train 1/4"); }},
  };
  for (const Case& c : cases) {
    v1::JoinGangRequest request = Request(101, 1, 5, 77);
    c.forge(request);
    absl::StatusOr<v1::Assignment> joined = Join("tok-a1", request);
    EXPECT_EQ(joined.status().code(), absl::StatusCode::kPermissionDenied)
        << c.what;
    EXPECT_THAT(joined.status().message(), HasSubstr(c.what));
  }
  absl::StatusOr<v1::GetStatusResponse> status =
      admin_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->gangs_size(), 0);  // Nothing half-joined.
}

// A valid job token does not let its holder start gangs under made-up
// GitLab instances (each would be a gang key no per-project limit counts
// with the others): a join naming another instance is refused with both
// URLs, before any GitLab call, and leaves no gang behind.
TEST_F(SecurityTest, JoinsNamingAnotherGitLabInstanceAreRefused) {
  const int before = gitlab_->RequestCount("/api/v4/job");
  for (int i = 0; i < 20; ++i) {
    v1::JoinGangRequest request = Request(101, 1, 5, 77);
    request.mutable_key()->set_instance(
        absl::StrCat("https://gitlab-", i, ".example.net"));
    absl::StatusOr<v1::Assignment> joined = Join("tok-a1", request);
    EXPECT_EQ(joined.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(joined.status().message(),
                HasSubstr(absl::StrCat("GitLab instance 'https://gitlab-", i,
                                       ".example.net' (CI_SERVER_URL) but "
                                       "this coordinator trusts only "
                                       "'https://gitlab.example.com'")));
  }
  EXPECT_EQ(gitlab_->RequestCount("/api/v4/job"), before);
  absl::StatusOr<v1::GetStatusResponse> status =
      admin_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->gangs_size(), 0);
  // The trusted instance still forms its gang.
  std::vector<v1::Assignment> gang = Admit(77, 101, "tok-a1", 102, "tok-a2");
  EXPECT_EQ(gang.size(), 2u);
}

TEST_F(SecurityTest, AnotherProjectsOrPipelinesTokenCannotJoinOrReadKv) {
  std::vector<v1::Assignment> gang = Admit(77, 101, "tok-a1", 102, "tok-a2");
  ASSERT_EQ(gang.size(), 2u);
  rendezvous::KvClient member(rendezvous::KvTarget{server_->bound_address(),
                                                   gang[0].gang_id(),
                                                   gang[0].epoch(),
                                                   gang[0].kv_token(),
                                                   {}});
  ASSERT_TRUE(member.Set("nccl_id", "secret-id", DeadlineIn(5s)).ok());

  // Pipeline 78's and project 6's jobs claim pipeline 77 of project 5.
  absl::StatusOr<v1::Assignment> other_pipeline =
      Join("tok-b1", Request(201, 1, 5, 77));
  EXPECT_EQ(other_pipeline.status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other_pipeline.status().message(),
              HasSubstr("CI_PIPELINE_ID 77 disagrees"));
  absl::StatusOr<v1::Assignment> other_project =
      Join("tok-c1", Request(101, 1, 5, 77));  // Even with gang A's job id.
  EXPECT_EQ(other_project.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other_project.status().message(), HasSubstr("CI_JOB_ID 101"));
  // Gang A's own job id and claims but another job's token.
  EXPECT_EQ(Join("tok-b2", Request(101, 1, 5, 77)).status().code(),
            absl::StatusCode::kPermissionDenied);

  // Without gang A's token nobody reads its KV, not even gang B's members.
  std::vector<v1::Assignment> gang_b = Admit(78, 201, "tok-b1", 202, "tok-b2");
  ASSERT_EQ(gang_b.size(), 2u);
  rendezvous::KvClient intruder(rendezvous::KvTarget{server_->bound_address(),
                                                     gang[0].gang_id(),
                                                     gang[0].epoch(),
                                                     gang_b[0].kv_token(),
                                                     {}});
  absl::StatusOr<std::string> stolen = intruder.Get("nccl_id", DeadlineIn(5s));
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(stolen.status().message(), HasSubstr("wrong gang token"));
  absl::StatusOr<std::string> own = member.Get("nccl_id", DeadlineIn(5s));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(*own, "secret-id");
}

TEST_F(SecurityTest, MemberCallsAfterTheJoinNeedTheirOwnJobToken) {
  std::vector<v1::Assignment> gang = Admit(77, 101, "tok-a1", 102, "tok-a2");
  ASSERT_EQ(gang.size(), 2u);
  v1::ReportExitRequest exit;
  exit.set_gang_id(gang[0].gang_id());
  exit.set_epoch(gang[0].epoch());
  exit.set_member_index(1);
  exit.set_job_id(101);
  exit.set_exit_code(3);  // Would fail gang A.
  v1::WatchGangRequest watch;
  watch.set_gang_id(gang[0].gang_id());
  watch.set_epoch(gang[0].epoch());
  watch.set_member_index(1);
  watch.set_job_id(101);
  v1::LeaveGangRequest leave;
  *leave.mutable_key() = Request(101, 1, 5, 77).key();
  leave.set_member_index(1);
  leave.set_job_id(101);

  auto stranger = ClientWith("gdt-job-token", "tok-b1");  // Job 201's.
  absl::Status reported = stranger->ReportExit(exit, 5s);
  EXPECT_EQ(reported.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(reported.message(),
              HasSubstr("the job token is job 201's, not job 101's"));
  EXPECT_EQ(ClientWith("", "")->ReportExit(exit, 5s).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(stranger->LeaveGang(leave, 5s).code(),
            absl::StatusCode::kPermissionDenied);
  rendezvous::CallCanceller canceller;
  absl::StatusOr<v1::WatchGangEvent> watched =
      stranger->WatchGang(watch, DeadlineIn(10s), nullptr, nullptr, canceller);
  EXPECT_EQ(watched.status().code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<v1::GetStatusResponse> status =
      admin_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->gangs_size(), 1);
  EXPECT_EQ(status->gangs(0).state(), v1::GANG_STATE_RUNNING);

  // The member itself may.
  exit.set_exit_code(0);
  EXPECT_TRUE(ClientWith("gdt-job-token", "tok-a1")->ReportExit(exit, 5s).ok());
}

// A member refused at config fails its forming gang only when the refusal
// comes from that job itself: another pipeline's job, or a caller without a
// token, cannot end a gang it does not belong to. The job itself can.
TEST_F(SecurityTest, OnlyTheRefusedJobItselfCanFailItsGang) {
  v1::RefuseMemberRequest refusal;
  *refusal.mutable_member() = Request(102, 2, 5, 77);
  refusal.set_reason("CI_NODE_INDEX/CI_NODE_TOTAL 1/2 disagree");
  auto stranger = ClientWith("gdt-job-token", "tok-b1");  // Job 201's.
  EXPECT_EQ(stranger->RefuseMember(refusal, 5s).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ClientWith("", "")->RefuseMember(refusal, 5s).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Gang B's job 202 refuses its own place: gang B's member 1 is refused.
  *refusal.mutable_member() = Request(202, 2, 5, 78);
  absl::StatusOr<std::string> root_cause =
      ClientWith("gdt-job-token", "tok-b2")->RefuseMember(refusal, 5s);
  ASSERT_TRUE(root_cause.ok()) << root_cause.status();
  EXPECT_THAT(*root_cause, HasSubstr("member 2/2 (job 202) was refused"));
  EXPECT_EQ(Join("tok-b1", Request(201, 1, 5, 78)).status().code(),
            absl::StatusCode::kAborted);
  // Gang A was not touched: it forms.
  EXPECT_EQ(Admit(77, 101, "tok-a1", 102, "tok-a2").size(), 2u);
}

TEST_F(SecurityTest, RefusedOrMissingTokenIsRejectedWithTheReason) {
  gitlab_->FinishJob(101);  // GitLab answers 401 for a finished job's token.
  absl::StatusOr<v1::Assignment> finished =
      Join("tok-a1", Request(101, 1, 5, 77));
  EXPECT_EQ(finished.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(finished.status().message(),
              HasSubstr("GitLab refused the job token"));
  EXPECT_THAT(finished.status().message(), HasSubstr("HTTP 401"));
  EXPECT_THAT(finished.status().message(), ::testing::Not(HasSubstr("tok-a1")));

  absl::StatusOr<v1::Assignment> none = Join("", Request(102, 2, 5, 77));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.status().message(), HasSubstr("no job token"));
}

TEST_F(SecurityTest, AFloodOfJoinsWithARefusedTokenCostsOneGitLabCall) {
  const int before = gitlab_->RequestCount("/api/v4/job");
  std::vector<std::future<absl::StatusOr<v1::Assignment>>> joins;
  for (int i = 0; i < 40; ++i) {
    joins.push_back(std::async(std::launch::async, [this] {
      return Join("forged-token", Request(101, 1, 5, 77));
    }));
  }
  int refused = 0;
  for (auto& join : joins) {
    const absl::StatusOr<v1::Assignment> result = join.get();
    // Refused, or told to retry while the few allowed GitLab calls run.
    EXPECT_THAT(result.status().code(),
                ::testing::AnyOf(absl::StatusCode::kUnauthenticated,
                                 absl::StatusCode::kUnavailable))
        << result.status();
    if (result.status().code() == absl::StatusCode::kUnauthenticated) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  // The flood cost at most the calls allowed at once from this address.
  EXPECT_LE(gitlab_->RequestCount("/api/v4/job") - before, 4);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(Join("forged-token", Request(101, 1, 5, 77)).status().code(),
              absl::StatusCode::kUnauthenticated);
  }
  EXPECT_LE(gitlab_->RequestCount("/api/v4/job") - before, 4);
  // Real members are not held up.
  EXPECT_EQ(Admit(77, 101, "tok-a1", 102, "tok-a2").size(), 2u);
}

// Checking a member waits on GitLab; a flood of joins with forged tokens
// (each its own, so no refusal is reused) while GitLab is slow must not
// hold up anything else: the host's heartbeats are answered at once all
// along, and no host is seen as down.
TEST_F(SecurityTest, HeartbeatsAreAnsweredWhileForgedJoinsWaitOnASlowGitLab) {
  gitlab::FakeGitLabApi::Options slow;
  slow.job_answer_delay = 3s;
  absl::StatusOr<std::unique_ptr<gitlab::FakeGitLabApi>> slow_gitlab =
      gitlab::FakeGitLabApi::Start(slow);
  ASSERT_TRUE(slow_gitlab.ok()) << slow_gitlab.status();
  config_.gitlab_url = (*slow_gitlab)->url();
  Restart();
  // One attempt each (CoordinatorClient would retry UNAVAILABLE).
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      server_->bound_address(), grpc::InsecureChannelCredentials()));
  std::vector<std::future<grpc::Status>> joins;
  for (int i = 0; i < 40; ++i) {
    joins.push_back(std::async(std::launch::async, [&stub, i] {
      grpc::ClientContext context;
      context.set_deadline(DeadlineIn(30s));
      context.AddMetadata("gdt-job-token", "forged-token-" + std::to_string(i));
      auto reader = stub->JoinGang(&context, Request(101, 1, 5, 77));
      v1::JoinGangEvent event;
      while (reader->Read(&event)) {
      }
      return reader->Finish();
    }));
  }
  auto agent = ClientWith("", "");
  const auto start = std::chrono::steady_clock::now();
  int beats = 0;
  while (std::chrono::steady_clock::now() - start < 4s) {
    const auto sent = std::chrono::steady_clock::now();
    absl::StatusOr<bool> beat = agent->Heartbeat("cpu-01", 2s);
    ASSERT_TRUE(beat.ok()) << beat.status();
    EXPECT_FALSE(*beat);  // Known host: no re-registration asked.
    EXPECT_LT(std::chrono::steady_clock::now() - sent, 1s);
    ++beats;
    std::this_thread::sleep_for(100ms);  // The pace of an agent, faster.
  }
  EXPECT_GT(beats, 10);
  for (auto& join : joins) {
    const grpc::Status status = join.get();
    // Refused by GitLab, or told to retry while the allowed calls run.
    EXPECT_THAT(status.error_code(),
                ::testing::AnyOf(grpc::StatusCode::UNAUTHENTICATED,
                                 grpc::StatusCode::UNAVAILABLE))
        << status.error_message();
  }
  const v1::GetStatusResponse status = server_->Status();
  for (const v1::HostStatus& host : status.hosts()) {
    EXPECT_EQ(host.state(), v1::HOST_STATE_UP) << host.host().name();
  }
}

// A join whose executor gives up while its check waits on GitLab must not
// leave the member present: the other member's join then waits instead of
// forming the gang with a member nobody is running.
TEST_F(SecurityTest, AJoinCancelledWhileGitLabIsAskedLeavesNoMemberBehind) {
  gitlab::FakeGitLabApi::Options slow;
  slow.job_answer_delay = 2s;
  absl::StatusOr<std::unique_ptr<gitlab::FakeGitLabApi>> slow_gitlab =
      gitlab::FakeGitLabApi::Start(slow);
  ASSERT_TRUE(slow_gitlab.ok()) << slow_gitlab.status();
  for (const auto& [id, token, name] :
       {std::tuple{101, "tok-a1", "train 1/2"},
        std::tuple{102, "tok-a2", "train 2/2"}}) {
    gitlab::FakeJob job;
    job.id = id;
    job.token = token;
    job.name = name;
    job.project_id = 5;
    job.pipeline_id = 77;
    (*slow_gitlab)->AddJob(job);
  }
  config_.gitlab_url = (*slow_gitlab)->url();
  Restart();
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      server_->bound_address(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(500ms));  // Gives up before GitLab answers.
    context.AddMetadata("gdt-job-token", "tok-a1");
    auto reader = stub->JoinGang(&context, Request(101, 1, 5, 77));
    v1::JoinGangEvent event;
    while (reader->Read(&event)) {
    }
    EXPECT_EQ(reader->Finish().error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // Member 2's own check ends after member 1's: it must wait for member 1.
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(5s));
  context.AddMetadata("gdt-job-token", "tok-a2");
  auto reader = stub->JoinGang(&context, Request(102, 2, 5, 77));
  v1::JoinGangEvent event;
  bool admitted = false;
  while (reader->Read(&event)) admitted = admitted || event.has_admitted();
  EXPECT_FALSE(admitted);
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_GE((*slow_gitlab)->RequestCount("/api/v4/job"), 2);
}

// Whether others are served *while* huge headers arrive is checked across
// processes by HostileLoadTest.HugeMetadata: here the attacker's channel
// would share gRPC's polling threads with the server (two on a 2-core
// machine), so encoding the attack could stall the server's reads in a way
// no outside client can.
TEST_F(SecurityTest, HugeMetadataIsRefusedAndOthersAreServedAfterwards) {
  auto channel = grpc::CreateChannel(server_->bound_address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(channel);
  // Refused, not served, and never by the deadline. 1 MiB, not the 4 MiB
  // of the cross-process test: gRPC gathers a header block in pieces before
  // refusing it, which under the sanitizers on a loaded machine took longer
  // than the 30 s deadline in this process, which is also the client's.
  for (const size_t size : {size_t{64} << 10, size_t{1} << 20}) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(30s));
    context.AddMetadata("x-junk", std::string(size, 'a'));
    v1::GetStatusRequest request;
    v1::GetStatusResponse response;
    const grpc::Status status = stub->GetStatus(&context, request, &response);
    EXPECT_FALSE(status.ok()) << size;
    EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << size;
    absl::StatusOr<v1::GetStatusResponse> answer =
        admin_->GetStatus(v1::GetStatusRequest(), 5s);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->hosts_size(), 1);
  }
}

TEST_F(SecurityTest, OperatorCommandsNeedTheAdminToken) {
  auto anonymous = ClientWith("", "");
  auto wrong = ClientWith("authorization", "Bearer not-the-token");

  absl::Status drain = anonymous->SetHostDrained("cpu-01", true, 5s);
  EXPECT_EQ(drain.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(drain.message(),
              HasSubstr("draining a host needs the coordinator's admin token"));
  EXPECT_EQ(wrong->SetHostDrained("cpu-01", true, 5s).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(anonymous->RemoveHost("cpu-01", 5s).code(),
            absl::StatusCode::kUnauthenticated);
  v1::CancelGangRequest cancel;
  cancel.set_gang_id("train-p5-pl77-n2");
  EXPECT_EQ(anonymous->CancelGang(cancel, 5s).status().code(),
            absl::StatusCode::kUnauthenticated);

  // Status is open on loopback by default; the host is still up and undrained.
  absl::StatusOr<v1::GetStatusResponse> status =
      anonymous->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->hosts_size(), 1);
  EXPECT_EQ(status->hosts(0).state(), v1::HOST_STATE_UP);

  ASSERT_TRUE(admin_->SetHostDrained("cpu-01", true, 5s).ok());
  status = anonymous->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->hosts(0).state(), v1::HOST_STATE_DRAINED);
  EXPECT_TRUE(admin_->RemoveHost("cpu-01", 5s).ok());
}

// Anyone who reaches the coordinator can repeat a refused operator call as
// fast as it can: the first refusal is logged, then one line per interval
// counting the rest, not a line per call (which flooded the log and the
// journal's rate limit, dropping the coordinator's other lines).
TEST_F(SecurityTest, RepeatedOperatorRefusalsAreLoggedOncePerInterval) {
  auto anonymous = ClientWith("", "");
  test::LogCapture captured;
  const auto start = std::chrono::steady_clock::now();
  constexpr int kCalls = 300;
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(anonymous->RemoveHost("cpu-01", 5s).code(),
              absl::StatusCode::kUnauthenticated);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string log = captured.text();
  size_t lines = 0;
  for (size_t at = log.find("event=rpc_refused"); at != std::string::npos;
       at = log.find("event=rpc_refused", at + 1)) {
    ++lines;
  }
  EXPECT_THAT(log, HasSubstr("event=rpc_refused rpc="));
  EXPECT_THAT(log, HasSubstr("removing a host needs the coordinator's admin "
                             "token"));
  EXPECT_THAT(log, HasSubstr(" refused=1"));
  EXPECT_LE(lines, 1 + static_cast<size_t>(took / RefusalLog::kInterval))
      << log;
}

TEST_F(SecurityTest, OperatorCliCommandsPresentTheTokenFromAFile) {
  const std::string endpoint = server_->bound_address();
  absl::StatusOr<std::string> refused =
      ctl::RunHostsAction(endpoint, "drain", "cpu-01");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.status().message(), HasSubstr("--admin-token-file"));
  absl::StatusOr<std::string> cancel =
      ctl::RunCancelCommand(endpoint, "train-p5-pl77-n2", "", {}, "wrong");
  EXPECT_EQ(cancel.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(cancel.status().message(), HasSubstr("wrong admin token"));

  // --admin-token-file wins over GDT_ADMIN_TOKEN_FILE.
  absl::StatusOr<std::string> token = ctl::LoadAdminToken(
      config_.admin_token_file, (temp_.path() + "/missing").c_str());
  ASSERT_TRUE(token.ok()) << token.status();
  absl::StatusOr<std::string> drained =
      ctl::RunHostsAction(endpoint, "drain", "cpu-01", {}, *token);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_THAT(*drained, HasSubstr("host cpu-01 drained"));
  absl::StatusOr<std::string> listed =
      ctl::RunHostsList(endpoint, false, {}, *token);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, HasSubstr("drained"));
  EXPECT_TRUE(
      RunStatusCommand(endpoint, ctl::StatusOptions(), {}, *token).ok());

  absl::StatusOr<std::string> from_env =
      ctl::LoadAdminToken("", config_.admin_token_file.c_str());
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(*from_env, kAdminToken);
  EXPECT_EQ(*ctl::LoadAdminToken("", nullptr), "");  // None given: none sent.
  absl::StatusOr<std::string> missing =
      ctl::LoadAdminToken("", (temp_.path() + "/missing").c_str());
  EXPECT_THAT(missing.status().message(), HasSubstr("GDT_ADMIN_TOKEN_FILE"));
}

TEST_F(SecurityTest, StatusCanBeClosedToClientsWithoutTheToken) {
  config_.status_without_token = "nobody";
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  absl::StatusOr<v1::GetStatusResponse> refused =
      ClientWith("", "")->GetStatus(v1::GetStatusRequest(), 5s);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.status().message(), HasSubstr("reading status"));
  absl::StatusOr<std::string> command =
      RunStatusCommand(server_->bound_address(), ctl::StatusOptions());
  EXPECT_EQ(command.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(ClientWith("authorization", std::string("Bearer ") + kAdminToken)
                  ->GetStatus(v1::GetStatusRequest(), 5s)
                  .ok());
}

TEST_F(SecurityTest, UnreadableAdminTokenFileStopsStartUp) {
  Config config = config_;
  config.state_path = temp_.path() + "/second.db";  // The fixture's is in use.
  config.admin_token_file = temp_.path() + "/missing.token";
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(config, clock_);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(server.status().message(), HasSubstr("admin_token_file"));
}

TEST_F(SecurityTest, APresentedHostTokenIsCheckedEvenWhenNotRequired) {
  // require_host_tokens is off here: no token is fine, a bad one is not.
  EXPECT_TRUE(ClientWith("", "")->RegisterHost(Host("cpu-01"), 5s).ok());
  absl::Status bogus = ClientWith("gdt-host-token", "never-issued")
                           ->RegisterHost(Host("cpu-01"), 5s)
                           .status();
  EXPECT_EQ(bogus.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(bogus.message(), HasSubstr("wrong or was revoked"));
}

TEST_F(SecurityTest, HostTokensAuthenticateAgentsAndKeyMemberTokens) {
  config_.require_host_tokens = true;
  Restart();
  const std::string endpoint = server_->bound_address();
  EXPECT_EQ(
      ctl::RunHostTokenCommand(endpoint, "create", "cpu-01").status().code(),
      absl::StatusCode::kUnauthenticated);
  absl::StatusOr<std::string> created =
      ctl::RunHostTokenCommand(endpoint, "create", "cpu-01", {}, kAdminToken);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(created->size(), 65u);  // 64 hex digits and a newline.
  const std::string token = created->substr(0, 64);
  absl::StatusOr<std::string> other =
      ctl::RunHostTokenCommand(endpoint, "create", "cpu-02", {}, kAdminToken);
  ASSERT_TRUE(other.ok()) << other.status();
  absl::StatusOr<std::string> listed =
      ctl::RunHostTokenCommand(endpoint, "list", "", {}, kAdminToken);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, HasSubstr("cpu-01  issued 20"));
  EXPECT_THAT(*listed, HasSubstr("cpu-02  issued 20"));
  EXPECT_THAT(*listed, ::testing::Not(HasSubstr(token)));

  absl::Status none =
      ClientWith("", "")->RegisterHost(Host("cpu-01"), 5s).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.message(), HasSubstr("no host token"));
  auto agent = ClientWith("gdt-host-token", token);
  absl::Status impostor = agent->RegisterHost(Host("cpu-02"), 5s).status();
  EXPECT_EQ(impostor.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(impostor.message(),
              HasSubstr("the host token of cpu-01 cannot act for host cpu-02"));
  ASSERT_TRUE(agent->RegisterHost(Host("cpu-01"), 5s).ok());
  ASSERT_TRUE(agent->Heartbeat("cpu-01", 5s).ok());
  EXPECT_EQ(agent->Heartbeat("cpu-02", 5s).status().code(),
            absl::StatusCode::kPermissionDenied);

  // Members placed on cpu-01 get member tokens that cpu-01's agent finds
  // good, each naming its own member.
  std::vector<v1::Assignment> gang = Admit(77, 101, "tok-a1", 102, "tok-a2");
  ASSERT_EQ(gang.size(), 2u);
  EXPECT_EQ(gang[0].host_name(), "cpu-01");
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<v1::CheckMemberTokenResponse> granted =
        agent->CheckMemberToken(gang[i].member_token(), 5s);
    ASSERT_TRUE(granted.ok()) << granted.status();
    EXPECT_EQ(granted->gang_id(), gang[i].gang_id());
    EXPECT_EQ(granted->epoch(), gang[i].epoch());
    EXPECT_EQ(granted->job_id(), 101 + i);
    EXPECT_GT(granted->expires_unix_ms(), clock_.UnixMillis());
  }
  // Nobody can mint one from what a host holds: neither the host token nor
  // its hash signs member tokens.
  const MemberClaims claims{gang[0].gang_id(), gang[0].epoch(), 101, "cpu-01",
                            clock_.UnixMillis() + 3600000};
  for (const std::string& key : {token, SecretSha256Hex(token)}) {
    absl::Status forged_token =
        agent->CheckMemberToken(MintMemberToken(key, claims), 5s).status();
    EXPECT_EQ(forged_token.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(forged_token.message(),
                HasSubstr("not issued by this coordinator"));
  }
  // Only an agent asks, and only about its own host.
  EXPECT_EQ(ClientWith("", "")
                ->CheckMemberToken(gang[0].member_token(), 5s)
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);

  // cpu-02's agent cannot report cpu-01's member lost.
  auto other_agent = ClientWith("gdt-host-token", other->substr(0, 64));
  v1::ReportExitRequest lost;
  lost.set_gang_id(gang[0].gang_id());
  lost.set_epoch(gang[0].epoch());
  lost.set_member_index(1);
  lost.set_job_id(101);
  lost.set_lost_reason("forged");
  absl::Status elsewhere =
      other_agent->CheckMemberToken(gang[0].member_token(), 5s).status();
  EXPECT_EQ(elsewhere.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(elsewhere.message(), HasSubstr("is for host cpu-01, not cpu-02"));
  absl::Status forged = other_agent->ReportExit(lost, 5s);
  EXPECT_EQ(forged.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(forged.message(), HasSubstr("does not run there"));
  absl::StatusOr<v1::GetStatusResponse> status =
      admin_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->gangs_size(), 1);
  EXPECT_EQ(status->gangs(0).state(), v1::GANG_STATE_RUNNING);

  // Revoked: the agent is refused from its next call on.
  absl::StatusOr<std::string> revoked =
      ctl::RunHostTokenCommand(endpoint, "revoke", "cpu-01", {}, kAdminToken);
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  absl::Status heartbeat = agent->Heartbeat("cpu-01", 5s).status();
  EXPECT_EQ(heartbeat.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(heartbeat.message(), HasSubstr("wrong or was revoked"));
  EXPECT_EQ(agent->RegisterHost(Host("cpu-01"), 5s).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Its members' tokens are refused too.
  EXPECT_EQ(agent->CheckMemberToken(gang[0].member_token(), 5s).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      ctl::RunHostTokenCommand(endpoint, "revoke", "cpu-01", {}, kAdminToken)
          .status()
          .code(),
      absl::StatusCode::kNotFound);

  // Tokens survive a restart (only their hashes are stored).
  Restart();
  auto after = ClientWith("gdt-host-token", other->substr(0, 64));
  EXPECT_TRUE(after->RegisterHost(Host("cpu-02"), 5s).ok());
}

}  // namespace
}  // namespace gdt::coordinator
