// End to end: a job on an agent's host keeps the agent's gRPC endpoint
// flooded with idle connections, more than the agent has descriptors. The
// agent (a real gdt-agent under a small RLIMIT_NOFILE, next to a real
// gdt-coord) notices that its own endpoint no longer answers and reports
// itself not ready, so a gang submitted meanwhile waits, naming the host,
// instead of being placed where it would fail; once the flood ends the agent
// restarts its listener, becomes ready, and the gang runs there.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

// The agent's descriptor limit (soft and hard, so it cannot raise it) and
// how many idle connections the "job" opens: more than the agent can hold.
constexpr int kAgentOpenFiles = 256;
constexpr int kFloodConnections = 400;

// A hostile job: keeps `count` idle TCP connections to `endpoint` open,
// opening a new one (without waiting for its handshake) whenever the agent
// closes one, until End() or the destructor.
class Flood {
 public:
  Flood(const std::string& endpoint, int count) : count_(count) {
    absl::StatusOr<HostPort> target = ParseHostPort(endpoint);
    EXPECT_TRUE(target.ok()) << endpoint;
    if (!target.ok()) return;
    address_.sin_family = AF_INET;
    address_.sin_port = htons(static_cast<uint16_t>(target->port));
    inet_pton(AF_INET, target->host.c_str(), &address_.sin_addr);
    for (int i = 0; i < count_; ++i) fds_.push_back(Open());
    thread_ = std::thread([this] { Run(); });
  }
  ~Flood() { End(); }
  void End() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
    fds_.clear();
  }

 private:
  int Open() {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
      connect(fd, reinterpret_cast<const sockaddr*>(&address_),
              sizeof(address_));
    }
    return fd;
  }

  void Run() {
    while (!stop_) {
      for (int& fd : fds_) {
        pollfd entry{fd, POLLIN, 0};
        if (fd >= 0 && poll(&entry, 1, 0) <= 0) continue;
        char byte;
        if (fd >= 0 && (entry.revents & (POLLHUP | POLLERR)) == 0 &&
            recv(fd, &byte, 1, MSG_PEEK) > 0) {
          continue;  // The server sent something (HTTP/2 settings): held.
        }
        if (fd >= 0) close(fd);
        fd = Open();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  const int count_;
  sockaddr_in address_{};
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

const nlohmann::json* HostOf(const nlohmann::json& status,
                             const std::string& name) {
  for (const auto& host : status["hosts"]) {
    if (host.value("name", "") == name) return &host;
  }
  return nullptr;
}

const nlohmann::json* GangOf(const nlohmann::json& status,
                             const std::string& group) {
  for (const auto& gang : status["gangs"]) {
    if (gang.value("group_name", "") == group) return &gang;
  }
  return nullptr;
}

// Disabled: in the ASan+UBSan test build the flooded agent is stopped by
// UBSan itself (its vptr check needs a spare descriptor and reports a false
// "invalid vptr" without one, suppressions did not help), so the build this
// suite runs in cannot show the behaviour. Run it with
// --gtest_also_run_disabled_tests against a build without -fsanitize=vptr.
TEST(AgentFloodTest, DISABLED_FloodedAgentTakesNoGangUntilItAnswersAgain) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // UBSan's vptr check needs a spare descriptor (a pipe) to look at memory
  // and reports any virtual call as wrong without one: in a sanitizer build
  // the agent would die of the flood for that alone.
  const std::string suppressions = cluster.dir().Sub("ubsan.supp");
  WriteFile(suppressions, "vptr_check:*\n");
  const char* ubsan = getenv("UBSAN_OPTIONS");
  const bool has_ubsan = ubsan != nullptr && *ubsan != '\0';
  const std::string ubsan_options =
      absl::StrCat(has_ubsan ? ubsan : "", has_ubsan ? ":" : "",
                   "suppressions=", suppressions);
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  agent.member_uid_pool = MemberAccountsIfRoot();
  agent.prefix = {
      "prlimit",
      absl::StrCat("--nofile=", kAgentOpenFiles, ":", kAgentOpenFiles), "--"};
  agent.env = {{"UBSAN_OPTIONS", ubsan_options}};
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(30)).ok()) << cluster.Logs();
  // The agent says how many descriptors it has, and that it is too few.
  EXPECT_THAT(
      cluster.Logs(),
      HasSubstr(absl::StrCat("event=open_files_limit soft=", kAgentOpenFiles,
                             " hard=", kAgentOpenFiles)));

  Flood flood(cluster.AgentEndpoint(0), kFloodConnections);

  // The heartbeat says the host is not ready, and why.
  std::string last;
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<nlohmann::json> status = cluster.Status();
        if (!status.ok()) return false;
        last = status->dump();
        const nlohmann::json* host = HostOf(*status, "local");
        return host != nullptr && host->value("state", "") == "drained" &&
               !host->value("not_ready_reason", "").empty();
      },
      seconds(90)))
      << last << cluster.Logs();
  EXPECT_THAT(last, HasSubstr("does not answer the agent's own check"));

  // A gang submitted now waits, naming the host, and is not placed.
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            "probe:\n"
            "  parallel: 2\n"
            "  timeout: 5 minutes\n"
            "  variables:\n"
            "    GDT_LAUNCHER: none\n"
            "  script:\n"
            "    - echo \"served rank=$GDT_NODE_RANK\"\n");
  std::unique_ptr<Subprocess> run =
      StartRunLocal(cluster, project, "probe", {"--pipeline-id", "500"});
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<nlohmann::json> status = cluster.Status();
        if (!status.ok()) return false;
        last = status->dump();
        const nlohmann::json* gang = GangOf(*status, "probe");
        return gang != nullptr && gang->value("state", "") == "forming" &&
               gang->value("reason", "").find("drained or down") !=
                   std::string::npos;
      },
      seconds(90)))
      << last << cluster.Logs();

  // The flood ends: the idle agent restarts its listener, is ready again,
  // and the gang runs there.
  flood.End();
  CommandResult result = FinishRun(*run, seconds(180));
  EXPECT_TRUE(result.status.success()) << result.output << cluster.Logs();
  EXPECT_THAT(result.output, HasSubstr("served rank="));
  const std::string logs = cluster.Logs();
  EXPECT_THAT(logs, HasSubstr("event=agent_endpoint_unanswered"));
  EXPECT_THAT(logs, HasSubstr("event=agent_listener_restarted"));
  EXPECT_THAT(logs, HasSubstr("event=agent_endpoint_answers"));
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  const nlohmann::json* host = HostOf(*status, "local");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->value("state", ""), "up") << status->dump();
  EXPECT_EQ(host->value("not_ready_reason", "x"), "") << status->dump();
}

}  // namespace
}  // namespace gdt::test
