// The real gdt-rsh binary against a real coordinator's key-value store and an
// agent on loopback: a signal while the remote command runs ends gdt-rsh at
// once with 128 + the signal, and the agent sees the call cancelled (it then
// stops the command's process group, as agent_service_test checks).
#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/kv_client.h"
#include "testing/coordinator_fixture.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// The gang store of the job whose environment is `env`.
absl::StatusOr<rendezvous::KvTarget> KvTargetOf(
    const std::map<std::string, std::string>& env) {
  return rendezvous::KvTargetFromEnvironment([&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

class RshSignalTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    env_ = OpenJobGang();
  }
  std::map<std::string, std::string> env_;
};

TEST_F(RshSignalTest, TermIntAndHupEndTheCommandWithTheirCode) {
  absl::StatusOr<rendezvous::KvTarget> target = KvTargetOf(env_);
  ASSERT_TRUE(target.ok()) << target.status();
  rendezvous::KvClient kv(*target);
  ASSERT_TRUE(kv.Set("gdt/rsh/agent/10.9.9.9", agent_address_,
                     std::chrono::system_clock::now() + 30s)
                  .ok());

  std::map<std::string, std::string> env = CurrentEnvironment();
  for (const auto& [name, value] : env_) env[name] = value;
  SpawnOptions options;
  options.argv = {GDT_RSH_BIN, "10.9.9.9", "sleep", "600"};
  options.env = env;
  options.die_with_parent = true;
  int cancels = 0;
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(signal);
    absl::StatusOr<std::unique_ptr<Subprocess>> rsh =
        Subprocess::Spawn(options);
    ASSERT_TRUE(rsh.ok()) << rsh.status();
    std::string output;
    auto collect = [&output](OutputSource, std::string_view text) {
      output.append(text);
    };
    // The command runs on the "remote" side once its output arrives.
    const auto started_by = std::chrono::steady_clock::now() + 60s;
    while (output.find("running") == std::string::npos &&
           std::chrono::steady_clock::now() < started_by) {
      ASSERT_FALSE(
          (*rsh)
              ->WaitUntil(std::chrono::steady_clock::now() + 100ms, collect)
              .has_value())
          << output;
    }
    ASSERT_THAT(output, HasSubstr("running"));
    ASSERT_TRUE((*rsh)->SignalGroup(signal));
    std::optional<ExitStatus> status =
        (*rsh)->WaitUntil(std::chrono::steady_clock::now() + 30s, collect);
    ASSERT_TRUE(status.has_value()) << "gdt-rsh ignored the signal";
    EXPECT_EQ(status->code(), 128 + signal) << output;
    EXPECT_THAT(output, HasSubstr("gdt-rsh: stopped by signal"));
    ++cancels;
    const auto seen_by = std::chrono::steady_clock::now() + 30s;
    while (agent_.exec_cancels() < cancels &&
           std::chrono::steady_clock::now() < seen_by) {
      std::this_thread::sleep_for(20ms);  // Polls the agent's count.
    }
    EXPECT_EQ(agent_.exec_cancels(), cancels);
  }
}

// A token the store refuses is named as such, not as a member that is
// missing.
TEST_F(RshSignalTest, AWrongTokenIsNamed) {
  std::map<std::string, std::string> env = CurrentEnvironment();
  for (const auto& [name, value] : env_) env[name] = value;
  env["GDT_KV_TOKEN"] = "wrong";
  SpawnOptions options;
  options.argv = {GDT_RSH_BIN, "10.9.9.9", "true"};
  options.env = env;
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> rsh = Subprocess::Spawn(options);
  ASSERT_TRUE(rsh.ok()) << rsh.status();
  std::string output;
  std::optional<ExitStatus> status = (*rsh)->WaitUntil(
      std::chrono::steady_clock::now() + 60s,
      [&output](OutputSource, std::string_view text) { output.append(text); });
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), 255);
  EXPECT_EQ(output,
            "gdt-rsh: the gang's key-value store refused to look up "
            "10.9.9.9: wrong gang token for gang g-1 epoch 1, or that gang "
            "has no key-value store (not admitted, or ended)\n");
}

// gdt-rsh keeps its keys under gdt/, apart from the job's own quota: a
// store full of user keys still takes a member's publication, and a member
// an older gdt-rsh published under gdt-rsh/agent/ is still found.
class RshFullStoreTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    config_.kv_max_keys_per_gang = 1;
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    env_ = CurrentEnvironment();
    for (const auto& [name, value] : OpenJobGang()) env_[name] = value;
  }

  // Runs gdt-rsh with `args` and `extra` environment until it exits.
  std::pair<int, std::string> Rsh(
      std::vector<std::string> args,
      const std::map<std::string, std::string>& extra) {
    SpawnOptions options;
    options.argv = {GDT_RSH_BIN};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.env = env_;
    for (const auto& [name, value] : extra) options.env[name] = value;
    options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> rsh =
        Subprocess::Spawn(options);
    if (!rsh.ok()) return {-1, std::string(rsh.status().message())};
    std::string output;
    std::optional<ExitStatus> status =
        (*rsh)->WaitUntil(std::chrono::steady_clock::now() + 60s,
                          [&output](OutputSource, std::string_view text) {
                            output.append(text);
                          });
    return {status.has_value() ? status->code() : -1, output};
  }

  std::map<std::string, std::string> env_;
};

TEST_F(RshFullStoreTest, ServesFromAFullStoreAndFindsOlderPublications) {
  absl::StatusOr<rendezvous::KvTarget> target = KvTargetOf(env_);
  ASSERT_TRUE(target.ok()) << target.status();
  rendezvous::KvClient kv(*target);
  // An older gdt-rsh's publication takes the store's one user key.
  ASSERT_TRUE(kv.Set("gdt-rsh/agent/10.9.9.8", agent_address_,
                     std::chrono::system_clock::now() + 30s)
                  .ok());
  ASSERT_EQ(
      kv.Set("user-key", "x", std::chrono::system_clock::now() + 30s).code(),
      absl::StatusCode::kResourceExhausted);

  SpawnOptions serve;
  serve.argv = {GDT_RSH_BIN, "--serve"};
  serve.env = env_;
  serve.env["GDT_SELF_ADDR"] = "10.9.9.9";
  serve.env["GDT_AGENT_ENDPOINT"] = agent_address_;
  serve.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> server = Subprocess::Spawn(serve);
  ASSERT_TRUE(server.ok()) << server.status();
  // Published (under gdt/) once --ready sees both members.
  const std::map<std::string, std::string> peers = {
      {"GDT_PEERS", "10.9.9.9\n10.9.9.8\n"}};
  std::pair<int, std::string> ready;
  const auto ready_by = std::chrono::steady_clock::now() + 60s;
  do {
    ready = Rsh({"--ready"}, peers);
  } while (ready.first != 0 && std::chrono::steady_clock::now() < ready_by);
  EXPECT_EQ(ready.first, 0) << ready.second;
  EXPECT_EQ(ready.second, "2 of 2 members serve gdt-rsh\n");
  absl::StatusOr<std::string> published =
      kv.Get("gdt/rsh/agent/10.9.9.9", std::chrono::system_clock::now() + 30s);
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(*published, agent_address_);
  ASSERT_TRUE((*server)->SignalGroup(SIGTERM));
  std::optional<ExitStatus> ended =
      (*server)->WaitUntil(std::chrono::steady_clock::now() + 30s,
                           [](OutputSource, std::string_view) {});
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->code(), 0);
}

}  // namespace
}  // namespace gdt
