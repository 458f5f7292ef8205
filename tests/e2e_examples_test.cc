// End to end: every example under examples/ runs green with its own
// .gitlab-ci.yml (the parallel:distributed form) under gdt-ci run-local,
// through a real coordinator and agent, torchrun/gloo on CPU, on loopback.
#include <filesystem>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

// A project holding examples/<name>/, with that example's .gitlab-ci.yml as
// the project's CI file (scripts name their files from the project root).
std::string MakeExampleProject(const TempDir& dir, const std::string& name) {
  const std::string project = dir.Sub("project");
  fs::create_directories(project + "/examples");
  fs::copy(SourceDir() + "/examples/" + name, project + "/examples/" + name,
           fs::copy_options::recursive);
  fs::copy_file(project + "/examples/" + name + "/.gitlab-ci.yml",
                project + "/.gitlab-ci.yml");
  return project;
}

// Files named `prefix`* among the artifacts every member uploaded.
std::vector<fs::path> Artifacts(const std::string& run_dir,
                                const std::string& prefix) {
  std::vector<fs::path> files;
  std::error_code ignored;
  for (const auto& entry :
       fs::recursive_directory_iterator(run_dir + "/artifacts", ignored)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) {
      files.push_back(entry.path());
    }
  }
  return files;
}

class ExamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    // As root, members run as unprivileged accounts, each in its cgroup.
    ASSERT_TRUE(cluster_
                    .StartAgent({.name = "local",
                                 .cpu_slots = 2,
                                 .member_uid_pool = MemberAccountsIfRoot()})
                    .ok())
        << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  }

  // Job scripts run `$PYTHON`: the interpreter that has Debian's torch.
  // `later_jobs` run after `job` in the same pipeline.
  CommandResult RunExample(const std::string& example, const std::string& job,
                           const std::vector<std::string>& later_jobs = {}) {
    const std::string project = MakeExampleProject(cluster_.dir(), example);
    std::vector<std::string> extra = {"--var", "PYTHON=/usr/bin/python3"};
    for (const std::string& later : later_jobs) {
      extra.push_back("--job");
      extra.push_back(later);
    }
    return cluster_.RunLocal(project, job, extra, seconds(240));
  }

  GdtCluster cluster_;
};

TEST_F(ExamplesTest, DdpTrainsToIdenticalParameters) {
  const CommandResult run = RunExample("ddp", "train-ddp");

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  ExpectOneGangWithRanks(ReadAdmissions(cluster_.run_dir(), 2), 2);
  ExpectTrainedWithIdenticalParameters(cluster_.run_dir(), /*world_size=*/2);
  ExpectLeasesReleased(cluster_);
}

TEST_F(ExamplesTest, FsdpRanksEachKeepTheirShardAsACheckpoint) {
  const CommandResult run = RunExample("fsdp", "train-sharded");

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  ExpectOneGangWithRanks(ReadAdmissions(cluster_.run_dir(), 2), 2);
  std::set<std::pair<int, int>> ranges;
  for (const fs::path& path : Artifacts(cluster_.run_dir(), "fsdp-rank-")) {
    const nlohmann::json report = nlohmann::json::parse(ReadFile(path));
    ranges.emplace(report["range"][0].get<int>(),
                   report["range"][1].get<int>());
    EXPECT_LT(report["last_loss"].get<double>(),
              0.5 * report["first_loss"].get<double>())
        << path;
  }
  // Two disjoint shards that together are all 64 parameters.
  EXPECT_THAT(ranges, ::testing::ElementsAre(std::make_pair(0, 32),
                                             std::make_pair(32, 64)));
  std::set<std::string> shards;
  for (const fs::path& path : Artifacts(cluster_.run_dir(), "shard-")) {
    EXPECT_EQ(path.parent_path().filename(), "checkpoints") << path;
    shards.insert(path.filename().string());
  }
  EXPECT_THAT(shards,
              ::testing::ElementsAre("shard-0-of-2.pt", "shard-1-of-2.pt"));
  ExpectLeasesReleased(cluster_);
}

TEST_F(ExamplesTest, BatchInferencePredictsEveryInputExactlyOnce) {
  const CommandResult run = RunExample("batch-inference", "infer");

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  EXPECT_THAT(run.output, ::testing::HasSubstr("40 of 40 in total"));
  std::multiset<std::string> expected;
  std::istringstream inputs(
      ReadFile(SourceDir() + "/examples/batch-inference/inputs.jsonl"));
  for (std::string line; std::getline(inputs, line);) {
    expected.insert(nlohmann::json::parse(line)["id"].get<std::string>());
  }
  std::multiset<std::string> predicted;
  const std::vector<fs::path> parts = Artifacts(cluster_.run_dir(), "part-");
  for (const fs::path& path : parts) {
    std::istringstream lines(ReadFile(path));
    for (std::string line; std::getline(lines, line);) {
      predicted.insert(nlohmann::json::parse(line)["id"].get<std::string>());
    }
  }
  EXPECT_EQ(parts.size(), 2u);
  EXPECT_EQ(expected.size(), 40u);
  EXPECT_EQ(predicted, expected);
  ExpectLeasesReleased(cluster_);
}

TEST_F(ExamplesTest, WorkflowPassesTheCheckpointFromTrainToPublish) {
  const CommandResult run =
      RunExample("workflow", "train", {"evaluate", "publish"});

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  EXPECT_THAT(run.output, ::testing::HasSubstr("[evaluate] evaluate: held-out "
                                               "mse"));
  EXPECT_THAT(run.output,
              ::testing::HasSubstr("[publish] publish: released model"));
  // The gang's checkpoint, the evaluation of it, and the release of it are
  // one file: same bytes in train's and publish's artifacts.
  const std::vector<fs::path> trained = Artifacts(cluster_.run_dir(), "model");
  std::vector<std::string> checkpoint;
  std::vector<std::string> released;
  for (const fs::path& path : trained) {
    (path.parent_path().filename() == "release" ? released : checkpoint)
        .push_back(ReadFile(path));
  }
  ASSERT_EQ(checkpoint.size(), 1u) << "only rank 0 saves model.pt";
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0], checkpoint[0]);
  const std::vector<fs::path> metrics =
      Artifacts(cluster_.run_dir(), "metrics.json");
  ASSERT_EQ(metrics.size(), 2u);  // eval/ and release/.
  EXPECT_LT(nlohmann::json::parse(ReadFile(metrics[0]))["mse"].get<double>(),
            0.01);
  ExpectLeasesReleased(cluster_);
}

}  // namespace
}  // namespace gdt::test
