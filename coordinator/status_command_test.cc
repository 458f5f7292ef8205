#include "coordinator/status_command.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gdt::coordinator {
namespace {

using ::testing::HasSubstr;

v1::GetStatusResponse SampleStatus() {
  v1::GetStatusResponse status;
  v1::HostStatus* host = status.add_hosts();
  host->mutable_host()->set_name("gpu-01");
  host->mutable_host()->set_address("10.0.0.1");
  (*host->mutable_host()->mutable_labels())["rack"] = "r1";
  for (int i = 0; i < 8; ++i) host->mutable_host()->add_gpus()->set_index(i);
  host->set_state(v1::HOST_STATE_UP);
  host->add_leased_gpus(0);
  host->add_leased_gpus(1);
  host->set_last_heartbeat_unix_ms(1000);
  v1::GangStatus* gang = status.add_gangs();
  gang->set_gang_id("train-p5-pl77-n2");
  gang->mutable_key()->set_size(2);
  gang->set_state(v1::GANG_STATE_FORMING);
  gang->set_reason("gang train (pipeline 77): 1/2 members present");
  v1::MemberStatus* member = gang->add_members();
  member->set_member_index(1);
  member->set_job_id(101);
  member->set_present(true);
  member->set_node_rank(-1);
  member->set_exit_code(-1);
  return status;
}

TEST(StatusCommandTest, TextShowsHostsGangsAndMembers) {
  const std::string text = RenderStatusText(SampleStatus(), 4000);

  EXPECT_THAT(text, HasSubstr("HOSTS\n"));
  EXPECT_THAT(text, HasSubstr("gpu-01"));
  EXPECT_THAT(text, HasSubstr("2/8 GPUs"));
  EXPECT_THAT(text, HasSubstr("rack=r1"));
  EXPECT_THAT(text, HasSubstr("3s ago"));
  EXPECT_THAT(text, HasSubstr("train-p5-pl77-n2"));
  EXPECT_THAT(text, HasSubstr("1/2"));
  EXPECT_THAT(text, HasSubstr("job 101"));
  EXPECT_THAT(text, HasSubstr("1/2 members present"));
}

TEST(StatusCommandTest, JsonIsReadableByScripts) {
  nlohmann::json document =
      nlohmann::json::parse(RenderStatusJson(SampleStatus()));

  EXPECT_EQ(document["hosts"][0]["name"], "gpu-01");
  EXPECT_EQ(document["hosts"][0]["leased_gpus"], nlohmann::json({0, 1}));
  EXPECT_EQ(document["hosts"][0]["gpus_total"], 8);
  EXPECT_EQ(document["gangs"][0]["gang_id"], "train-p5-pl77-n2");
  EXPECT_EQ(document["gangs"][0]["state"], "forming");
  EXPECT_EQ(document["gangs"][0]["members"][0]["job_id"], 101);
}

TEST(StatusCommandTest, UnreachableCoordinatorIsOneLine) {
  absl::StatusOr<std::string> text =
      RunStatusCommand("127.0.0.1:1", /*json=*/false, /*all=*/false);

  EXPECT_EQ(text.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(text.status().message(),
              HasSubstr("cannot reach coordinator at 127.0.0.1:1: "));
}

}  // namespace
}  // namespace gdt::coordinator
