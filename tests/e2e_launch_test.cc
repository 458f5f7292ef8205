// End to end for gdt-launch and gdt-rsh: real Dask (Debian's
// python3-dask, python3-distributed) and real OpenMPI (openmpi-bin,
// python3-mpi4py) over three members on hosts in separate network (and UTS)
// namespaces, started through gdt-ci run-local, the executor and the
// agents. Needs root, like every netns test.
#include <signal.h>

#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
        NetworkNamespaces::Create(4);
    ASSERT_TRUE(hosts.ok()) << hosts.status();
    hosts_ = *std::move(hosts);
    cluster_ = std::make_unique<GdtCluster>(hosts_.get(), /*control_host=*/0);
    ASSERT_TRUE(cluster_->StartCoordinator().ok()) << cluster_->Logs();
    for (int i = 1; i <= 3; ++i) {
      ASSERT_TRUE(cluster_
                      ->StartAgent({.name = "host" + std::to_string(i),
                                    .host = i,
                                    .cpu_slots = 1,
                                    .network_interface = "eth0",
                                    .uts_hostname = "host" + std::to_string(i),
                                    .member_uid_pool = MemberAccountsIfRoot()})
                      .ok())
          << cluster_->Logs();
    }
    ASSERT_TRUE(cluster_->WaitForHosts(3, seconds(20)).ok())
        << cluster_->Logs();
  }

  void TearDown() override {
    // No head, worker or script outlives its gang.
    if (cluster_ != nullptr) {
      EXPECT_TRUE(
          WaitFor([&] { return JobProcesses(*cluster_).empty(); }, seconds(10)))
          << DescribeAll(JobProcesses(*cluster_));
    }
  }

  // A project whose 3-member job `cluster` runs `rank0_command` on rank 0
  // through `recipe`, with examples/`example` copied in and `variables`
  // (YAML lines) added. gdt-launch and gdt-rsh are put on PATH.
  std::string MakeProject(const std::string& rank0_command,
                          const std::string& recipe = "dask",
                          const std::string& example = "dask/job.py",
                          const std::string& variables = "") {
    const std::string project = cluster_->dir().Sub("project");
    const fs::path file = fs::path(project) / "examples" / example;
    fs::create_directories(file.parent_path());
    fs::copy_file(SourceDir() + "/examples/" + example, file);
    const std::string bin_dir = fs::path(GDT_LAUNCH_BIN).parent_path();
    WriteFile(project + "/.gitlab-ci.yml",
              absl::StrCat("cluster:\n"
                           "  parallel: 3\n"
                           "  timeout: 5 minutes\n"
                           "  variables:\n"
                           "    GDT_LAUNCHER: none\n",
                           variables, "    GDT_LAUNCHERS_DIR: ", SourceDir(),
                           "/launch/recipes\n"
                           "  script:\n"
                           "    - export PATH=",
                           bin_dir,
                           ":$PATH\n"
                           "    - gdt-launch ",
                           recipe, " -- ", rank0_command,
                           "\n"
                           "  artifacts:\n"
                           "    paths: [out/]\n"
                           "    when: always\n"));
    return project;
  }

  std::unique_ptr<NetworkNamespaces> hosts_;
  std::unique_ptr<GdtCluster> cluster_;
};

TEST_F(LaunchTest, ComputationRunsOnEveryWorkerAcrossThreeHosts) {
  const std::string project =
      MakeProject("/usr/bin/python3 examples/dask/job.py");

  CommandResult run = cluster_->RunLocal(project, "cluster", {}, seconds(240));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_->Logs();
  ExpectOneGangWithRanks(ReadAdmissions(cluster_->run_dir(), 3), 3);
  EXPECT_THAT(run.output, HasSubstr("dask: 2 workers joined after"));
  // The job's result, kept as rank 0's artifact: both workers, on two
  // different hosts, computed chunks of a correct total.
  std::string result_path;
  for (const auto& entry : fs::recursive_directory_iterator(
           cluster_->run_dir(),
           fs::directory_options::skip_permission_denied)) {
    if (entry.path().filename() == "dask-result.json") {
      result_path = entry.path().string();
    }
  }
  ASSERT_FALSE(result_path.empty()) << run.output;
  nlohmann::json result =
      nlohmann::json::parse(ReadFile(result_path), nullptr, false);
  ASSERT_FALSE(result.is_discarded()) << ReadFile(result_path);
  EXPECT_TRUE(result.value("correct", false)) << result.dump();
  ASSERT_EQ(result["workers"].size(), 2u) << result.dump();
  EXPECT_GT(result["workers"]["rank-1"].value("chunks", 0), 0);
  EXPECT_GT(result["workers"]["rank-2"].value("chunks", 0), 0);
  // Each on its own member's host (namespace addresses 10.200.0.2-4).
  EXPECT_NE(result["workers"]["rank-1"].value("host", ""),
            result["workers"]["rank-2"].value("host", ""))
      << result.dump();
  EXPECT_THAT(result["workers"]["rank-1"].value("host", ""),
              ::testing::StartsWith("10.200.0."));
  // Workers were stopped because rank 0 finished, not by a failure.
  EXPECT_THAT(run.output,
              HasSubstr("rank 0's script ended with code 0; stopping the "
                        "worker on rank 1"));
  ExpectLeasesReleased(*cluster_);
}

TEST_F(LaunchTest, RankZeroFailureFailsEveryMember) {
  const std::string project = MakeProject("/bin/sh -c 'exit 3'");

  CommandResult run = cluster_->RunLocal(project, "cluster", {}, seconds(240));

  EXPECT_FALSE(run.status.success()) << run.output;
  // Each of the three job logs carries the same root cause: rank 0's code.
  for (const Admission& a : ReadAdmissions(cluster_->run_dir(), 3)) {
    EXPECT_THAT(ReadFile(a.job_log),
                ContainsRegex("gang [^ ]+ failed: member [0-9]/3 \\(job "
                              "[0-9]+ on host host[1-3]\\) exited 3 "))
        << a.job_log;
  }
}

TEST_F(LaunchTest, KilledWorkerFailsTheGangWithItsCause) {
  // Rank 0's command runs until the gang is stopped.
  const std::string project =
      MakeProject("/bin/sh -c 'while :; do sleep 1; done'");
  std::unique_ptr<Subprocess> run =
      StartRunLocal(*cluster_, project, "cluster");
  ASSERT_NE(run, nullptr);
  std::string output;
  auto collect = [&](OutputSource, std::string_view data) {
    output.append(data);
  };
  // Until the workers joined (or run-local ended early, failing below).
  ASSERT_TRUE(WaitFor(
      [&] {
        run->PumpOutput(milliseconds(10), collect);
        return output.find("2 workers joined") != std::string::npos ||
               run->TryWait().has_value();
      },
      seconds(180)))
      << output << cluster_->Logs();
  ASSERT_FALSE(run->exit_status().has_value())
      << "run-local ended before the workers joined:\n"
      << output << cluster_->Logs();
  std::vector<ProcessInfo> workers;
  for (const ProcessInfo& p : JobProcesses(*cluster_, "GDT_NODE_RANK=2")) {
    if (p.cmdline.find("dask-worker") != std::string::npos) {
      workers.push_back(p);
    }
  }
  ASSERT_EQ(workers.size(), 1u) << DescribeAll(JobProcesses(*cluster_));
  ASSERT_EQ(kill(workers[0].pid, SIGKILL), 0);

  std::optional<ExitStatus> status =
      run->WaitUntil(std::chrono::steady_clock::now() + seconds(60), collect);
  if (!status.has_value()) status = run->Terminate(milliseconds(3000), collect);
  EXPECT_FALSE(status->success()) << output;
  EXPECT_THAT(output, HasSubstr("dask: the worker on rank 2 exited with "
                                "signal 9 before rank 0's script finished"));
  EXPECT_THAT(output, ContainsRegex("failed: member [0-9]/3 \\(job [0-9]+ on "
                                    "host host[1-3]\\) exited 137 "));
}

// MPI through gdt-rsh: rank 0's mpirun starts the other ranks'
// daemons through the agents on their hosts; no sshd runs anywhere.
TEST_F(LaunchTest, MpiAllreduceThroughGdtRshAcrossThreeHosts) {
  ASSERT_FALSE(
      fs::exists("/usr/sbin/sshd") &&
      RunProcess({"pgrep", "-x", "sshd"}, {}, seconds(10)).status.success())
      << "this test must run without an SSH server";
  const std::string project =
      MakeProject("mpirun -np 3 /usr/bin/python3 examples/mpi/allreduce.py",
                  "mpi", "mpi/allreduce.py",
                  "    OMPI_ALLOW_RUN_AS_ROOT: \"1\"\n"
                  "    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: \"1\"\n");

  CommandResult run = cluster_->RunLocal(project, "cluster", {}, seconds(240));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_->Logs();
  // Three MPI ranks, one in each gdt member, each with the right sum.
  for (int member = 0; member < 3; ++member) {
    EXPECT_THAT(run.output, ContainsRegex(absl::StrCat(
                                "mpi\\[rank [0-2]/3\\] in gdt member ", member,
                                ": allreduce 6 \\(expected 6\\)")))
        << run.output;
  }
  EXPECT_THAT(run.output, HasSubstr("gdt-rsh: serving commands for 10.200.0."));
  ExpectLeasesReleased(*cluster_);
}

}  // namespace
}  // namespace gdt::test
