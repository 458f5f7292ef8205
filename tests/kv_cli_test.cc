// gdt-kv against a real gdt-coord server on 127.0.0.1:0: in-process for the
// commands and their exit codes, and once as the real binary with the job's
// environment.
#include "kv/kv_cli.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/coordinator_fixture.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class KvCliTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    env_ = OpenJobGang();
  }

  struct Result {
    int code = -1;
    std::string out;
    std::string err;
  };

  Result Run(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), "gdt-kv");
    std::vector<const char*> argv;
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    std::istringstream in(input);
    std::ostringstream out;
    std::ostringstream err;
    Result result;
    result.code = kv::RunKvCli(
        static_cast<int>(argv.size()), argv.data(),
        [this](const char* name) -> const char* {
          auto it = env_.find(name);
          return it == env_.end() ? nullptr : it->second.c_str();
        },
        in, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  std::map<std::string, std::string> env_;
};

TEST_F(KvCliTest, SetGetAddAndCas) {
  EXPECT_EQ(Run({"set", "k", "hello"}).code, kv::kExitOk);
  Result got = Run({"get", "k"});
  EXPECT_EQ(got.code, kv::kExitOk);
  EXPECT_EQ(got.out, "hello\n");
  EXPECT_EQ(Run({"set", "big", "-"}, "from\nstdin").code, kv::kExitOk);
  EXPECT_EQ(Run({"get", "big"}).out, "from\nstdin\n");

  // --raw: the value exactly, binary included, with no newline added.
  const std::string binary("a\0\xff\n", 4);
  EXPECT_EQ(Run({"set", "bin", "-"}, binary).code, kv::kExitOk);
  Result raw = Run({"get", "bin", "--raw"});
  EXPECT_EQ(raw.code, kv::kExitOk);
  EXPECT_EQ(raw.out, binary);

  EXPECT_EQ(Run({"add", "n", "5"}).out, "5\n");
  EXPECT_EQ(Run({"add", "n", "-2"}).out, "3\n");

  Result lost = Run({"cas", "k", "nope", "x"});
  EXPECT_EQ(lost.code, kv::kExitNoMatch);
  EXPECT_EQ(lost.out, "hello\n");
  EXPECT_EQ(Run({"cas", "k", "hello", "x"}).code, kv::kExitOk);
  EXPECT_EQ(Run({"cas", "--absent", "leader", "me"}).code, kv::kExitOk);
  EXPECT_EQ(Run({"cas", "--absent", "leader", "you"}).code, kv::kExitNoMatch);

  Result json = Run({"get", "leader", "--json"});
  EXPECT_EQ(json.out, "{\"key\":\"leader\",\"value\":\"me\"}\n");
  // A value that is not UTF-8 comes whole, in base64 under its own field.
  Result binary_json = Run({"get", "bin", "--json"});
  EXPECT_EQ(binary_json.code, kv::kExitOk);
  EXPECT_EQ(binary_json.out,
            "{\"key\":\"bin\",\"value_base64\":\"YQD/Cg==\"}\n");
  // A value starting with '-' goes after --.
  EXPECT_EQ(Run({"set", "dash", "--", "-x"}).code, kv::kExitOk);
  EXPECT_EQ(Run({"get", "dash"}).out, "-x\n");
}

TEST_F(KvCliTest, WaitSeesALaterSetAndTimesOut) {
  std::future<Result> waiting = std::async(std::launch::async, [this] {
    return Run({"wait", "ready", "--timeout", "20"});
  });
  // A wait registered on the server, then the key set by another member.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->coordinator().kv().waiter_count() == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(Run({"set", "ready", "yes"}).code, kv::kExitOk);
  Result waited = waiting.get();
  EXPECT_EQ(waited.code, kv::kExitOk);
  EXPECT_EQ(waited.out, "yes\n");

  Result timed_out = Run({"wait", "never", "--timeout", "0.3"});
  EXPECT_EQ(timed_out.code, kv::kExitTimeout);
  EXPECT_THAT(timed_out.err, HasSubstr("kv wait 'never': deadline passed"));
}

TEST_F(KvCliTest, EveryFailureIsOneLineWithItsExitCode) {
  Result missing = Run({"get", "nothing"});
  EXPECT_EQ(missing.code, kv::kExitNoMatch);
  EXPECT_EQ(missing.err, "gdt-kv get: no key 'nothing'\n");

  EXPECT_EQ(Run({"frobnicate"}).code, kv::kExitUsage);
  // An option no command has is named, not what it left missing.
  Result unknown = Run({"set", "-x", "v"});
  EXPECT_EQ(unknown.code, kv::kExitUsage);
  EXPECT_EQ(unknown.err,
            "gdt-kv: unknown option -x (gdt-kv --help; a value starting with "
            "'-' goes after --, as in gdt-kv set KEY -- VALUE)\n");
  EXPECT_EQ(Run({"cas", "k", "only-one"}).code, kv::kExitUsage);
  EXPECT_EQ(Run({"add", "k", "many"}).code, kv::kExitUsage);
  // A coordinator address gRPC would wrap to another port is refused.
  const std::string endpoint = env_["GDT_COORDINATOR"];
  for (const char* address : {"127.0.0.1:99999", "[::1", "host:abc"}) {
    env_["GDT_COORDINATOR"] = address;
    Result bad = Run({"get", "k"});
    EXPECT_EQ(bad.code, kv::kExitUsage) << address;
    EXPECT_THAT(
        bad.err,
        HasSubstr(std::string("GDT_COORDINATOR: coordinator address '") +
                  address + "' is not host:port"));
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  }
  // A coordinator that never answers (nothing listens on port 1) is
  // unavailable, not a deadline that passed during a call.
  env_["GDT_COORDINATOR"] = "127.0.0.1:1";
  Result away = Run({"get", "k", "--timeout", "0.5"});
  EXPECT_EQ(away.code, kv::kExitUnavailable) << away.err;
  EXPECT_EQ(away.err,
            "gdt-kv get: kv get 'k': coordinator 127.0.0.1:1 unavailable: not "
            "reached before the deadline\n");
  env_["GDT_COORDINATOR"] = endpoint;
  // A timeout out of range names its bounds (not the largest double), and
  // NaN is out of every range.
  for (const char* timeout : {"0", "-1", "1e300", "soon", "nan"}) {
    Result bad = Run({"get", "k", "--timeout", timeout});
    EXPECT_EQ(bad.code, kv::kExitUsage) << timeout;
    EXPECT_THAT(bad.err, HasSubstr("not in range 0.001 to 2678400")) << timeout;
    EXPECT_LT(bad.err.size(), 200u) << bad.err;
  }

  env_["GDT_KV_TOKEN"] = "wrong";
  Result denied = Run({"set", "k", "v"});
  EXPECT_EQ(denied.code, kv::kExitRefused);
  EXPECT_EQ(denied.err,
            "gdt-kv set: wrong gang token for gang g-1 epoch 1, or that gang "
            "has no key-value store (not admitted, or ended)\n");

  env_.erase("GDT_KV_TOKEN");
  Result no_token = Run({"get", "k"});
  EXPECT_EQ(no_token.code, kv::kExitUsage);
  EXPECT_THAT(no_token.err, HasSubstr("GDT_KV_TOKEN is not set"));

  env_["GDT_KV_TOKEN"] = "secret";
  env_["GDT_EPOCH"] = "x";
  EXPECT_EQ(Run({"get", "k"}).code, kv::kExitUsage);

  env_["GDT_EPOCH"] = "1";
  EXPECT_EQ(Run({"set", "s", "text"}).code, kv::kExitOk);
  Result not_number = Run({"add", "s", "1"});
  EXPECT_EQ(not_number.code, kv::kExitRefused);
  EXPECT_THAT(not_number.err, HasSubstr("not a decimal integer"));

  // Keys the wire cannot carry, and values above every limit, are one line.
  Result empty = Run({"set", "", "v"});
  EXPECT_EQ(empty.code, kv::kExitUsage);
  EXPECT_EQ(empty.err, "gdt-kv set: the key is empty\n");
  Result binary_key = Run({"set", "k\xff", "v"});
  EXPECT_EQ(binary_key.code, kv::kExitUsage);
  EXPECT_EQ(binary_key.err, "gdt-kv set: the key is not valid UTF-8\n");
  Result huge = Run({"set", "big", "-"}, std::string(5 << 20, 'x'));
  EXPECT_EQ(huge.code, kv::kExitRefused);
  EXPECT_EQ(huge.err,
            "gdt-kv set: value of 5242880 bytes for key 'big' is above the "
            "limit of 65536 bytes\n");

  // A gRPC server that is not the coordinator (here an agent) is named.
  env_["GDT_COORDINATOR"] = agent_address_;
  Result not_coordinator = Run({"get", "k"});
  EXPECT_EQ(not_coordinator.code, kv::kExitUnavailable);
  EXPECT_THAT(not_coordinator.err,
              HasSubstr("gdt-kv get: GDT_COORDINATOR " + agent_address_ +
                        " does not serve the gang key-value store "
                        "(UNIMPLEMENTED"));
  EXPECT_THAT(not_coordinator.err, HasSubstr("is it a gdt coordinator?\n"));
  env_["GDT_COORDINATOR"] = endpoint;

  server_->coordinator().kv().EndGang("g-1");
  Result ended = Run({"get", "k"});
  EXPECT_EQ(ended.code, kv::kExitRefused);
  EXPECT_THAT(ended.err, HasSubstr("has no key-value store"));
}

TEST_F(KvCliTest, TheBinaryReadsTheJobEnvironment) {
  std::map<std::string, std::string> env = CurrentEnvironment();
  for (const auto& [name, value] : env_) env[name] = value;
  SpawnOptions options;
  options.argv = {GDT_KV_BIN, "add", "members", "1"};
  options.env = env;
  options.die_with_parent = true;
  std::string output;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<Subprocess>> child =
        Subprocess::Spawn(options);
    ASSERT_TRUE(child.ok()) << child.status();
    output.clear();
    std::optional<ExitStatus> status =
        (*child)->WaitUntil(std::chrono::steady_clock::now() + 30s,
                            [&output](OutputSource, std::string_view text) {
                              output.append(text);
                            });
    ASSERT_TRUE(status.has_value()) << "gdt-kv did not finish";
    EXPECT_EQ(status->code(), 0) << output;
  }
  EXPECT_EQ(output, "2\n");

  options.argv = {GDT_KV_BIN, "--help"};
  absl::StatusOr<std::unique_ptr<Subprocess>> help = Subprocess::Spawn(options);
  ASSERT_TRUE(help.ok());
  output.clear();
  std::optional<ExitStatus> status = (*help)->WaitUntil(
      std::chrono::steady_clock::now() + 30s,
      [&output](OutputSource, std::string_view text) { output.append(text); });
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->code(), 0);
  EXPECT_THAT(output, HasSubstr("Exit codes"));
}

}  // namespace
}  // namespace gdt
