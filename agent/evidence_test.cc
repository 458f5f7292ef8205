#include "agent/evidence.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(LastLinesTest, KeepsTheLastLines) {
  EXPECT_EQ(LastLines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(LastLines("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(LastLines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(LastLines("", 3), "");
  EXPECT_EQ(LastLines("a\n", 0), "");
}

class EvidenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    // A process group like a stage's: a shell and a Python child.
    SpawnOptions spawn;
    spawn.argv = {
        "/bin/bash", "-c",
        "/usr/bin/python3 -c 'import time; time.sleep(60)' & sleep 60"};
    spawn.env = CurrentEnvironment();
    absl::StatusOr<std::unique_ptr<Subprocess>> child =
        Subprocess::Spawn(spawn);
    ASSERT_TRUE(child.ok()) << child.status();
    child_ = std::move(*child);
  }
  void TearDown() override {
    child_.reset();  // Kills the group.
  }

  EvidenceRequest Request(const std::string& path) {
    EvidenceRequest request;
    request.dir = dir_ + "/evidence";
    request.process_group = child_->pid();
    request.why = "no progress for 3 s";
    for (int i = 1; i <= 150; ++i) {
      request.output_tail += "line " + std::to_string(i) + "\n";
    }
    request.path = path;
    return request;
  }

  // Waits (bounded) until the group's Python child shows in ps.
  bool PythonStarted() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      std::string output;
      absl::StatusOr<ExitStatus> status = RunCommand(
          {"ps", "-e", "-o", "pgid=,args="}, std::chrono::seconds(5), &output);
      std::istringstream lines(output);
      for (std::string line; status.ok() && std::getline(lines, line);) {
        std::istringstream fields(line);
        std::string pgid, program;
        fields >> pgid >> program;
        if (pgid == std::to_string(child_->pid()) &&
            program == "/usr/bin/python3") {
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  test::TempDir temp_;
  const std::string dir_ = temp_.path();
  std::unique_ptr<Subprocess> child_;
};

TEST_F(EvidenceTest, WritesTheTreeTheLastLinesAndSaysPySpyIsMissing) {
  ASSERT_TRUE(PythonStarted());
  absl::StatusOr<std::vector<std::string>> files =
      CollectEvidence(Request(dir_ + "/empty-path"));

  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, UnorderedElementsAre("processes.txt", "last-lines.txt",
                                           "summary.txt"));
  const fs::path evidence = dir_ + "/evidence";
  const std::string tree = Slurp(evidence / "processes.txt");
  EXPECT_THAT(tree,
              HasSubstr("/usr/bin/python3 -c import time; time.sleep(60)"));
  EXPECT_THAT(tree, HasSubstr("sleep 60"));
  const std::string last = Slurp(evidence / "last-lines.txt");
  EXPECT_THAT(last, HasSubstr("line 51\n"));
  EXPECT_THAT(last, HasSubstr("line 150\n"));
  EXPECT_THAT(last, Not(HasSubstr("line 50\n")));
  const std::string summary = Slurp(evidence / "summary.txt");
  EXPECT_THAT(summary, HasSubstr("why: no progress for 3 s\n"));
  EXPECT_THAT(summary, HasSubstr("py-spy: not installed"));
}

TEST_F(EvidenceTest, DumpsPythonStacksWhenPySpyIsOnThePath) {
  ASSERT_TRUE(PythonStarted());
  // A stand-in py-spy that prints its arguments.
  const std::string bin = dir_ + "/bin";
  fs::create_directories(bin);
  {
    std::ofstream script(bin + "/py-spy");
    script << "#!/bin/sh\necho \"fake py-spy $*\"\n";
  }
  chmod((bin + "/py-spy").c_str(), 0755);

  absl::StatusOr<std::vector<std::string>> files =
      CollectEvidence(Request(bin));

  ASSERT_TRUE(files.ok()) << files.status();
  std::string dump;
  for (const std::string& name : *files) {
    if (name.rfind("py-spy-", 0) == 0) dump = Slurp(dir_ + "/evidence/" + name);
  }
  EXPECT_THAT(dump, HasSubstr("fake py-spy dump --pid "));
  EXPECT_THAT(Slurp(dir_ + "/evidence/summary.txt"),
              HasSubstr("dumped 1 Python process(es)"));
}

}  // namespace
}  // namespace gdt::agent
