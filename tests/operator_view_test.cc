// The operator's view of a large cluster and bulk removal of forming gangs,
// against a real in-process coordinator over loopback gRPC: the ctl
// commands as gdt-coord runs them.
#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/scheduler.h"
#include "ctl/cancel.h"
#include "ctl/hosts.h"
#include "ctl/status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rendezvous/coordinator_client.h"
#include "testing/coordinator_fixture.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAdminToken[] = "admin-secret-for-tests";

class OperatorViewTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    SetAdminToken(kAdminToken);
    config_.max_forming_gangs_per_pipeline = 1000;
    config_.max_forming_gangs_per_project = 1000;
    // The hosts here never heartbeat: keep them up for the whole test.
    config_.host_down_after = std::chrono::hours(1);
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    endpoint_ = endpoint();
    admin_ = ClientWith("authorization", std::string("Bearer ") + kAdminToken);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
  }

  // A host with `gpus` GPUs; with `largest`, every field, label and GPU at
  // the bounds RegisterHost accepts.
  v1::HostSpec Host(int i, int gpus, bool largest) {
    v1::HostSpec host;
    host.set_name(absl::StrCat("host-", 10000 + i));
    host.set_address("127.0.0.1");
    host.set_agent_endpoint(agent_address_);
    for (int g = 0; g < gpus; ++g) {
      v1::Gpu* gpu = host.add_gpus();
      gpu->set_index(g);
      if (largest) {
        gpu->set_uuid(std::string(kMaxLabelBytes, 'u'));
        gpu->set_model(std::string(kMaxLabelBytes, 'm'));
      }
    }
    if (largest) {
      host.set_name(absl::StrCat(host.name(), std::string(200, 'h')));
      host.set_network_interface(std::string(kMaxNameBytes, 'n'));
      for (size_t l = 0; l < kMaxHostLabels; ++l) {
        (*host.mutable_labels())[absl::StrCat("label-", l,
                                              std::string(50, 'k'))] =
            std::string(kMaxLabelBytes, 'v');
      }
    }
    return host;
  }

  // Member 1 of a gang of 2 of `project`/`pipeline` joins and goes away:
  // the gang stays forming, waiting for its members.
  void StartFormingGang(int64_t project, int64_t pipeline, int i,
                        bool largest) {
    v1::JoinGangRequest request;
    v1::GangKey* key = request.mutable_key();
    key->set_instance(largest ? std::string(kMaxInstanceBytes, 'i')
                              : "https://gitlab.example.com");
    key->set_project_id(project);
    key->set_pipeline_id(pipeline);
    key->set_group_name(
        absl::StrCat("g", i, largest ? std::string(240, 'g') : ""));
    key->set_size(2);
    request.set_member_index(1);
    request.set_job_id(project * 1'000'000 + pipeline * 1000 + i);
    request.set_job_name(largest ? std::string(kMaxJobNameBytes, 'j')
                                 : absl::StrCat("g", i, " 1/2"));
    request.set_gpus_per_node(1);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 20s);
    std::unique_ptr<grpc::ClientReader<v1::JoinGangEvent>> reader =
        stub_->JoinGang(&context, request);
    v1::JoinGangEvent event;
    ASSERT_TRUE(reader->Read(&event)) << reader->Finish().error_message();
    ASSERT_TRUE(event.has_waiting()) << event.DebugString();
    context.TryCancel();
    reader->Finish();
  }

  std::string endpoint_;
  std::unique_ptr<rendezvous::CoordinatorClient> admin_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

// 600 hosts and 150 forming gangs at the field bounds are more than one
// 4 MiB answer could hold: status and hosts list still answer, show 50 rows
// per list with how many more there are, and --json lists everything.
TEST_F(OperatorViewTest, StatusAndHostsListStayBoundedOnALargeCluster) {
  // Gangs first: with no host yet a join is not checked against capacity,
  // which keeps this test fast.
  for (int i = 0; i < 150; ++i) {
    StartFormingGang(5, 1 + i % 3, i, /*largest=*/true);
  }
  for (int i = 0; i < 600; ++i) {
    ASSERT_TRUE(
        admin_->RegisterHost(Host(i, kMaxHostGpus, /*largest=*/true), 5s).ok());
  }
  v1::GetStatusRequest one_page;
  absl::StatusOr<v1::GetStatusResponse> first = admin_->GetStatus(one_page, 5s);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_LE(first->ByteSizeLong(), kStatusPageBytes);
  EXPECT_NE(first->next_page_token(), "");

  ctl::StatusOptions options;
  absl::StatusOr<std::string> text =
      ctl::RunStatusCommand(endpoint_, options, {}, kAdminToken);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("hosts      600 up, 0 down, 0 drained"));
  EXPECT_THAT(*text, HasSubstr("gangs      150 forming, 0 running"));
  EXPECT_THAT(*text,
              HasSubstr("\u2026 and 550 more (use --limit 0 or --json)\n"));
  EXPECT_THAT(*text,
              HasSubstr("\u2026 and 100 more (use --limit 0 or --json)\n"));

  options.json = true;
  absl::StatusOr<std::string> json =
      ctl::RunStatusCommand(endpoint_, options, {}, kAdminToken);
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json document = nlohmann::json::parse(*json);
  EXPECT_EQ(document["hosts"].size(), 600u);
  EXPECT_EQ(document["gangs"].size(), 150u);

  absl::StatusOr<std::string> hosts =
      ctl::RunHostsList(endpoint_, /*json=*/false, {}, kAdminToken, 50);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts,
              HasSubstr("\u2026 and 550 more (use --limit 0 or --json)\n"));
  absl::StatusOr<std::string> hosts_json =
      ctl::RunHostsList(endpoint_, /*json=*/true, {}, kAdminToken);
  ASSERT_TRUE(hosts_json.ok()) << hosts_json.status();
  EXPECT_EQ(nlohmann::json::parse(*hosts_json)["hosts"].size(), 600u);
}

// `gdt-coord cancel --forming --project 5` removes project 5's 100 forming
// gangs in one command, and nothing else: another project's forming gangs
// and a running gang of project 5 stay. It needs the admin token.
TEST_F(OperatorViewTest, BulkCancelRemovesOneProjectsFormingGangsOnly) {
  ASSERT_TRUE(admin_->RegisterHost(Host(0, 8, /*largest=*/false), 5s).ok());
  v1::JoinGangRequest solo;
  solo.mutable_key()->set_instance("https://gitlab.example.com");
  solo.mutable_key()->set_project_id(5);
  solo.mutable_key()->set_pipeline_id(99);
  solo.mutable_key()->set_group_name("solo");
  solo.mutable_key()->set_size(1);
  solo.set_member_index(1);
  solo.set_job_id(424242);
  solo.set_job_name("solo");
  solo.set_gpus_per_node(1);
  absl::StatusOr<v1::Assignment> running = admin_->JoinGang(
      solo, std::chrono::system_clock::now() + 20s, nullptr, nullptr);
  ASSERT_TRUE(running.ok()) << running.status();
  for (int i = 0; i < 100; ++i) StartFormingGang(5, 1 + i % 4, i, false);
  for (int i = 0; i < 3; ++i) StartFormingGang(6, 1, i, false);

  absl::StatusOr<std::string> refused =
      ctl::RunCancelFormingCommand(endpoint_, 5, 0, "", {}, "");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated)
      << refused.status();
  absl::StatusOr<std::string> done = ctl::RunCancelFormingCommand(
      endpoint_, 5, 0, "flood from one token", {}, kAdminToken);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(*done, "cancelled 100 forming gangs of project 5\n");

  absl::StatusOr<std::string> json =
      ctl::RunStatusCommand(endpoint_, {.json = true}, {}, kAdminToken);
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json document = nlohmann::json::parse(*json);
  EXPECT_EQ(document["summary"]["gangs"]["forming"], 3);
  EXPECT_EQ(document["summary"]["gangs"]["running"], 1);
  for (const nlohmann::json& gang : document["gangs"]) {
    if (gang["state"] == "forming") EXPECT_EQ(gang["project_id"], 6);
  }
  // Another pass finds nothing more of project 5, pipeline 1.
  absl::StatusOr<std::string> again =
      ctl::RunCancelFormingCommand(endpoint_, 5, 1, "", {}, kAdminToken);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, "cancelled 0 forming gangs of project 5, of pipeline 1\n");
}

}  // namespace
}  // namespace gdt::coordinator

namespace gdt::coordinator {
namespace {

// Names, labels and a cancel reason with escape sequences, newlines and
// multi-byte text, through a real coordinator: the text views show them as
// visible escapes, cut between characters; --json keeps them exactly.
TEST_F(OperatorViewTest, HostileNamesAndReasonsReachTheTerminalEscaped) {
  v1::HostSpec host = Host(0, 2, /*largest=*/false);
  host.set_name("evil\nHOST-FAKE  127.0.0.1  up  0/8\x1b]0;pwned\x07\x1b[2J");
  (*host.mutable_labels())["<b>x</b>"] = "\x1b[31mred\nnl";
  ASSERT_TRUE(admin_->RegisterHost(host, 5s).ok());
  v1::JoinGangRequest join;
  join.mutable_key()->set_instance("https://gitlab.example.com");
  join.mutable_key()->set_project_id(7);
  join.mutable_key()->set_pipeline_id(700);
  join.mutable_key()->set_group_name(
      "\xc3\xbc\xc3\xb1\xc3\xad-\xe6\x97\xa5\xe6\x9c\xac-"
      "\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80"
      "\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80"
      "\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80"
      "\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80\xf0\x9f\x9a\x80"
      "\x1b[31mRED");
  join.mutable_key()->set_size(2);
  join.set_member_index(1);
  join.set_job_id(7001);
  join.set_job_name("evil\n  member 9/9  job 666  present  FAKE 1/2");
  join.set_gpus_per_node(1);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 20s);
    std::unique_ptr<grpc::ClientReader<v1::JoinGangEvent>> reader =
        stub_->JoinGang(&context, join);
    v1::JoinGangEvent event;
    ASSERT_TRUE(reader->Read(&event)) << reader->Finish().error_message();
    context.TryCancel();
    reader->Finish();
  }
  absl::StatusOr<std::string> json =
      ctl::RunStatusCommand(endpoint_, {.json = true}, {}, kAdminToken);
  ASSERT_TRUE(json.ok()) << json.status();
  const nlohmann::json before = nlohmann::json::parse(*json);
  ASSERT_EQ(before["gangs"].size(), 1u) << *json;
  const std::string gang_id = before["gangs"][0]["gang_id"];
  EXPECT_EQ(before["gangs"][0]["members"][0]["job_name"], join.job_name());
  EXPECT_EQ(before["hosts"][0]["name"], host.name());

  absl::StatusOr<std::string> cancelled = ctl::RunCancelCommand(
      endpoint_, gang_id, "\x1b]0;pwned\x07maintenance\nFAKE line", {},
      kAdminToken, /*force=*/false);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_THAT(*cancelled, HasSubstr("\\x1b]0;pwned\\x07maintenance\\nFAKE"));

  std::vector<std::string> views = {*cancelled};
  ctl::StatusOptions all;
  all.all = true;
  for (const ctl::StatusOptions& options :
       {all, ctl::StatusOptions{.gang = gang_id}}) {
    absl::StatusOr<std::string> text =
        ctl::RunStatusCommand(endpoint_, options, {}, kAdminToken);
    ASSERT_TRUE(text.ok()) << text.status();
    views.push_back(*text);
  }
  absl::StatusOr<std::string> hosts =
      ctl::RunHostsList(endpoint_, /*json=*/false, {}, kAdminToken);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  views.push_back(*hosts);
  for (const std::string& text : views) {
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
    EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
    EXPECT_THAT(text, Not(HasSubstr("\nHOST-FAKE"))) << text;
    EXPECT_THAT(text, Not(HasSubstr("\n  member 9/9"))) << text;
    EXPECT_THAT(text, Not(HasSubstr("\nFAKE line"))) << text;
    // Valid UTF-8 (nlohmann refuses to dump anything else).
    EXPECT_NO_THROW(nlohmann::json(text).dump()) << text;
  }
  EXPECT_THAT(views[1], HasSubstr("evil\\nHOST-FAKE")) << views[1];
  EXPECT_THAT(views[2], HasSubstr("evil\\n  member 9/9")) << views[2];
  EXPECT_THAT(views[3], HasSubstr("<b>x</b>=\\x1b[31mred\\nnl")) << views[3];

  absl::StatusOr<std::string> after = ctl::RunStatusCommand(
      endpoint_, {.json = true, .all = true}, {}, kAdminToken);
  ASSERT_TRUE(after.ok()) << after.status();
  const nlohmann::json document = nlohmann::json::parse(*after);
  ASSERT_EQ(document["gangs"].size(), 1u) << *after;
  EXPECT_EQ(document["gangs"][0]["group_name"], join.key().group_name());
  EXPECT_THAT(document["gangs"][0]["reason"].get<std::string>(),
              HasSubstr("\x1b]0;pwned\x07maintenance\nFAKE line"));
}

}  // namespace
}  // namespace gdt::coordinator
