#include "ctl/hosts.h"

#include <algorithm>

#include "common/exit_code.h"
#include "common/terminal_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gdt::ctl {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

v1::GetStatusResponse TwoHosts() {
  v1::GetStatusResponse status;
  v1::HostStatus* gpu = status.add_hosts();
  gpu->mutable_host()->set_name("gpu-01");
  gpu->mutable_host()->set_address("10.0.0.1");
  for (uint32_t i = 0; i < 2; ++i) {
    v1::Gpu* g = gpu->mutable_host()->add_gpus();
    g->set_index(i);
    g->set_model("H100");
    g->set_uuid("GPU-" + std::to_string(i));
  }
  (*gpu->mutable_host()->mutable_labels())["rack"] = "r1";
  gpu->set_state(v1::HOST_STATE_DRAINED);
  gpu->add_leased_gpus(1);
  gpu->set_members_running(1);
  gpu->mutable_host()->set_runner_slots(4);
  v1::HostStatus* cpu = status.add_hosts();
  cpu->mutable_host()->set_name("cpu-01");
  cpu->mutable_host()->set_address("10.0.0.2");
  cpu->set_state(v1::HOST_STATE_DOWN);
  return status;
}

TEST(HostsCommandTest, TextShowsStateGpusAndLabels) {
  const std::string text = RenderHostsText(TwoHosts());
  EXPECT_THAT(text, HasSubstr("HOST    ADDRESS   STATE    GPUS USED"));
  EXPECT_THAT(text, HasSubstr("gpu-01  10.0.0.1  drained  1/2        2× H100  "
                              "1        rack=r1"));
  EXPECT_THAT(text, HasSubstr("cpu-01  10.0.0.2  down     0/0        -"));
}

TEST(HostsCommandTest, AHostWhoseAgentIsNotReadySaysWhy) {
  v1::GetStatusResponse status = TwoHosts();
  status.mutable_hosts(0)->set_not_ready_reason(
      "its agent endpoint 10.0.0.1:7071 does not answer\x1b[2J");
  const std::string text = RenderHostsText(status);
  EXPECT_THAT(text, HasSubstr("gpu-01  10.0.0.1  not ready  1/2"));
  EXPECT_THAT(text, HasSubstr("\nhost gpu-01 not ready (takes no new gangs): "
                              "its agent endpoint 10.0.0.1:7071 does not "
                              "answer\\x1b[2J\n"));
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  const nlohmann::json json = nlohmann::json::parse(RenderHostsJson(status));
  EXPECT_EQ(json["hosts"][0]["state"], "drained");
  EXPECT_EQ(json["hosts"][0]["not_ready_reason"],
            status.hosts(0).not_ready_reason());
  EXPECT_EQ(json["hosts"][1]["not_ready_reason"], "");
}

TEST(HostsCommandTest, NamesAndLabelsCannotSteerTheTerminal) {
  v1::GetStatusResponse status = TwoHosts();
  status.mutable_hosts(0)->mutable_host()->set_name(
      "evil\nHOST-FAKE  127.0.0.1\x1b]0;pwned\x07\x1b[2J");
  (*status.mutable_hosts(0)->mutable_host()->mutable_labels())["<b>x</b>"] =
      "\x1b[31mred\nnl";
  status.mutable_hosts(1)->mutable_host()->set_name("日本語");
  const std::string text = RenderHostsText(status);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_THAT(text, Not(HasSubstr("\nHOST-FAKE"))) << text;
  EXPECT_THAT(text, HasSubstr("evil\\nHOST-FAKE  127.0.0.1\\x1b]0;pwned"))
      << text;
  EXPECT_THAT(text, HasSubstr("<b>x</b>=\\x1b[31mred\\nnl")) << text;
  // One header and two rows; columns aligned by characters.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3) << text;
  const std::string header = text.substr(0, text.find('\n'));
  const size_t address_column = header.find("ADDRESS");
  const std::string cpu_row = text.substr(text.rfind("日本語"));
  EXPECT_EQ(DisplayWidth(cpu_row.substr(0, cpu_row.find("10.0.0.2"))),
            address_column)
      << text;
  // JSON keeps the names as they are.
  const nlohmann::json json = nlohmann::json::parse(RenderHostsJson(status));
  EXPECT_EQ(json["hosts"][0]["name"], status.hosts(0).host().name());
}

TEST(HostsCommandTest, TextStopsAtTheLimitAndSaysHowManyMore) {
  const std::string one = RenderHostsText(TwoHosts(), 1);
  EXPECT_THAT(one, HasSubstr("gpu-01"));
  EXPECT_THAT(one, Not(HasSubstr("cpu-01")));
  EXPECT_THAT(one, EndsWith("\n\u2026 and 1 more (use --limit 0 or --json)\n"));
  EXPECT_EQ(RenderHostsText(TwoHosts(), 2), RenderHostsText(TwoHosts(), 0));
  EXPECT_THAT(RenderHostsText(TwoHosts(), 2), Not(HasSubstr("more")));
}

TEST(HostsCommandTest, JsonListsEveryGpuWithItsLease) {
  const nlohmann::json hosts =
      nlohmann::json::parse(RenderHostsJson(TwoHosts()))["hosts"];
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0]["state"], "drained");
  EXPECT_EQ(hosts[0]["gpus"][0]["leased"], false);
  EXPECT_EQ(hosts[0]["gpus"][1]["leased"], true);
  EXPECT_EQ(hosts[0]["gpus"][1]["uuid"], "GPU-1");
  EXPECT_EQ(hosts[0]["labels"]["rack"], "r1");
  EXPECT_EQ(hosts[0]["runner_slots"], 4);
  EXPECT_EQ(hosts[1]["state"], "down");
  EXPECT_EQ(hosts[1]["runner_slots"], 0);  // Not declared.
}

TEST(HostsCommandTest, UnknownActionAndUnreachableCoordinator) {
  EXPECT_EQ(RunHostsAction("127.0.0.1:1", "evict", "gpu-01").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> out =
      RunHostsAction("127.0.0.1:1", "drain", "gpu-01");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(out.status().message(),
              HasSubstr("cannot reach coordinator at 127.0.0.1:1"));
  EXPECT_EQ(ExitCodeFor(out.status()), kExitUnavailable);
}

}  // namespace
}  // namespace gdt::ctl
