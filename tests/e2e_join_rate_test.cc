// End to end: a coordinator whose per-project join rate is tiny (bursts of
// 1, then 1 join a second) while another gang of the same project floods it
// with joins from this process. The members of a real 3-member job (through
// run-local, gdt-executor and gdt-agent on loopback) are refused for now,
// wait as the coordinator tells them, say so once in their job logs, and
// join once the flood stops: the job succeeds.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "testing/joined_thread.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kWaitingLine[] = "gdt: coordinator refuses joins for now: ";

// How many times the coordinator's log says it refused a join of member
// `index` of gang `group`.
int RefusalsOf(const std::string& coordinator_log, const std::string& group,
               int index) {
  int count = 0;
  for (absl::string_view line : absl::StrSplit(coordinator_log, '\n')) {
    if (absl::StrContains(line, "event=join_rejected") &&
        absl::StrContains(line, absl::StrCat(" member=", index, " ")) &&
        absl::StrContains(line, absl::StrCat(" group=", group)) &&
        absl::StrContains(line, "join_rate_per_project")) {
      ++count;
    }
  }
  return count;
}

int Count(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++count;
  }
  return count;
}

TEST(JoinRateLimitTest, RefusedMembersWaitAndTheJobSucceeds) {
  GdtCluster cluster;
  cluster.SetCoordinatorExtraConfig(
      "join_rate_per_project: 1\njoin_burst_per_project: 1\n");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 3}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            "train:\n"
            "  parallel: 3\n"
            "  timeout: 5 minutes\n"
            "  variables:\n"
            "    GDT_GPUS_PER_NODE: \"0\"\n"
            "    GDT_LAUNCHER: none\n"
            "  script:\n"
            "    - 'echo trained as member $CI_NODE_INDEX'\n");

  // Another gang of the same project (run-local's instance and project 1)
  // takes nearly every join token as soon as it is there: each of its joins
  // gives up after 200 ms.
  std::atomic<bool> flooding{true};
  test::JoinedThread flood(
      [&] {
        std::unique_ptr<v1::Coordinator::Stub> stub = v1::Coordinator::NewStub(
            grpc::CreateChannel(cluster.coordinator_endpoint(),
                                grpc::InsecureChannelCredentials()));
        for (int job = 1; flooding; ++job) {
          v1::JoinGangRequest request;
          request.mutable_key()->set_instance("http://gitlab.local");
          request.mutable_key()->set_project_id(1);
          request.mutable_key()->set_pipeline_id(999);
          request.mutable_key()->set_group_name("flood");
          request.mutable_key()->set_size(8);
          request.set_member_index(static_cast<uint32_t>(1 + job % 8));
          request.set_job_id(900000 + job);
          request.set_job_name("flood");
          request.set_procs_per_node(1);
          request.set_launcher(v1::LAUNCHER_NONE);
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               milliseconds(200));
          std::unique_ptr<grpc::ClientReader<v1::JoinGangEvent>> reader =
              stub->JoinGang(&context, request);
          v1::JoinGangEvent event;
          while (reader->Read(&event)) {
          }
          reader->Finish().ok();
          // About 50 joins a second: the bucket is empty for all but a few
          // milliseconds of each second.
          std::this_thread::sleep_for(milliseconds(20));
        }
      },
      [&] { flooding = false; });

  std::unique_ptr<Subprocess> run = StartRunLocal(cluster, project, "train");
  ASSERT_NE(run, nullptr);
  const std::string coordinator_log = cluster.dir().Sub("coord-0.log");
  // Until the gang's members were refused six times between them: some
  // member more than once.
  const bool refused = WaitFor(
      [&] {
        const std::string log = ReadFile(coordinator_log);
        return RefusalsOf(log, "train", 1) + RefusalsOf(log, "train", 2) +
                   RefusalsOf(log, "train", 3) >=
               6;
      },
      seconds(60));
  flooding = false;
  flood.Join();
  ASSERT_TRUE(refused) << cluster.Logs();

  CommandResult result = FinishRun(*run, seconds(120));
  ASSERT_TRUE(result.status.success()) << result.output << cluster.Logs();
  const std::string log = ReadFile(coordinator_log);
  int lines = 0;
  for (int index = 1; index <= 3; ++index) {
    const std::string member_log = ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-3.log"));
    EXPECT_THAT(member_log,
                HasSubstr(absl::StrCat("trained as member ", index)))
        << member_log;
    const int refusals = RefusalsOf(log, "train", index);
    const int waiting = Count(member_log, kWaitingLine);
    // A refused member says so in one line with the coordinator's reason and
    // when it asks again; repeats within 30 s add no line.
    EXPECT_EQ(waiting, refusals > 0 ? 1 : 0)
        << "member " << index << " was refused " << refusals << " times:\n"
        << member_log;
    if (refusals > 0) {
      EXPECT_THAT(member_log,
                  HasSubstr("joins faster than 1 members a second (bursts of "
                            "1) (join_rate_per_project, "
                            "join_burst_per_project)"))
          << member_log;
      EXPECT_THAT(member_log, HasSubstr("; retrying in ")) << member_log;
    }
    lines += waiting;
  }
  EXPECT_GE(lines, 1);
}

}  // namespace
}  // namespace gdt::test
