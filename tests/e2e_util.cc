#include "tests/e2e_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/host_port.h"
#include "gtest/gtest.h"

namespace gdt::test {
namespace fs = std::filesystem;

IdleConnections::~IdleConnections() {
  for (int fd : fds_) close(fd);
}

void IdleConnections::Open(const std::string& endpoint, int count) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(endpoint);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(parsed->port));
  ASSERT_EQ(inet_pton(AF_INET, parsed->host.c_str(), &address.sin_addr), 1)
      << parsed->host;
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    fds_.push_back(fd);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address),
                      sizeof(address)),
              0)
        << i;
  }
}

std::string MakeDdpProject(const TempDir& dir, int nodes, int procs_per_node) {
  const std::string project = dir.Sub("project");
  fs::create_directories(project + "/examples/ddp");
  fs::copy_file(SourceDir() + "/examples/ddp/train.py",
                project + "/examples/ddp/train.py",
                fs::copy_options::overwrite_existing);
  WriteFile(
      project + "/.gitlab-ci.yml",
      absl::StrCat("train:\n"
                   "  parallel: ",
                   nodes,
                   "\n"
                   "  timeout: 5 minutes\n"
                   "  variables:\n"
                   "    GDT_GPUS_PER_NODE: \"0\"\n"
                   "    GDT_NPROC_PER_NODE: \"",
                   procs_per_node,
                   "\"\n"
                   "    GDT_LAUNCHER: torchrun\n"
                   "    DDP_STEPS: \"4\"\n"
                   "  script:\n"
                   "    - echo \"node rank $GDT_NODE_RANK of "
                   "$GDT_NUM_NODES via $PET_MASTER_ADDR:$PET_MASTER_PORT\"\n"
                   "    - torchrun examples/ddp/train.py\n"
                   "  artifacts:\n"
                   "    paths: [out/]\n"
                   "    when: always\n"));
  return project;
}

std::string MakeDdpExampleProject(const TempDir& dir,
                                  const std::string& ci_file) {
  const std::string project = dir.Sub("project");
  fs::create_directories(project + "/examples");
  fs::copy(SourceDir() + "/examples/ddp", project + "/examples/ddp",
           fs::copy_options::recursive);
  WriteFile(project + "/.gitlab-ci.yml", ci_file);
  return project;
}

std::vector<Admission> ReadAdmissions(const std::string& run_dir, int members) {
  // gdt: gang <id> admitted: member i/N is node rank R of N on host H (...),
  // master ADDR:PORT
  static const std::regex kLine(
      R"(gdt: gang (\S+) admitted: member (\d+)/\d+ is node rank (\d+) of \d+ on host (\S+) .*master (\S+))");
  std::vector<Admission> admissions;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(run_dir + "/logs", ignored)) {
    const std::string log = ReadFile(entry.path().string());
    std::smatch match;
    if (!std::regex_search(log, match, kLine)) {
      ADD_FAILURE() << entry.path() << " has no admission line:\n" << log;
      continue;
    }
    Admission admission;
    admission.job_log = entry.path().string();
    admission.gang_id = match[1];
    admission.member_index = std::stoi(match[2]);
    admission.node_rank = std::stoi(match[3]);
    admission.host = match[4];
    admission.master = match[5];
    admissions.push_back(admission);
  }
  EXPECT_EQ(static_cast<int>(admissions.size()), members)
      << "member logs under " << run_dir << "/logs";
  return admissions;
}

void ExpectOneGangWithRanks(const std::vector<Admission>& admissions, int n) {
  ASSERT_EQ(static_cast<int>(admissions.size()), n);
  std::set<int> ranks;
  for (const Admission& a : admissions) {
    EXPECT_EQ(a.gang_id, admissions[0].gang_id) << a.job_log;
    EXPECT_EQ(a.master, admissions[0].master) << a.job_log;
    ranks.insert(a.node_rank);
  }
  std::set<int> expected;
  for (int i = 0; i < n; ++i) expected.insert(i);
  EXPECT_EQ(ranks, expected) << "node ranks must be 0..n-1, each once";
}

void ExpectAdmittedOnlyAfterAllJoined(const std::string& output, int n) {
  size_t last_join = 0;
  int joins = 0;
  for (size_t at = output.find("gdt: joining gang"); at != std::string::npos;
       at = output.find("gdt: joining gang", at + 1)) {
    last_join = at;
    ++joins;
  }
  const size_t first_admission = output.find(" admitted: member ");
  EXPECT_GE(joins, n) << output;
  ASSERT_NE(first_admission, std::string::npos) << output;
  EXPECT_GT(first_admission, last_join)
      << "a member was admitted before every member had joined:\n"
      << output;
}

void ExpectTrainedWithIdenticalParameters(const std::string& run_dir,
                                          int world_size) {
  std::set<int> ranks;
  std::set<std::string> digests;
  std::error_code ignored;
  for (const auto& entry : fs::recursive_directory_iterator(run_dir, ignored)) {
    const std::string name = entry.path().filename().string();
    // Reports kept as artifacts; the builds dirs are gone after cleanup.
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") {
      continue;
    }
    nlohmann::json report =
        nlohmann::json::parse(ReadFile(entry.path().string()), nullptr, false);
    ASSERT_FALSE(report.is_discarded()) << entry.path();
    EXPECT_EQ(report.value("world_size", 0), world_size) << entry.path();
    EXPECT_TRUE(report.value("params_identical", false)) << entry.path();
    EXPECT_GT(report.value("steps", 0), 0) << entry.path();
    ranks.insert(report.value("rank", -1));
    digests.insert(report.value("param_sha256", ""));
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), world_size)
      << "one report per rank expected under " << run_dir;
  EXPECT_EQ(digests.size(), 1u) << "all ranks must end with equal parameters";
}

void ExpectLeasesReleased(GdtCluster& cluster) {
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  for (const auto& host : (*status)["hosts"]) {
    EXPECT_TRUE(host["leased_gpus"].empty()) << host.dump();
    EXPECT_EQ(host.value("members_running", -1), 0) << host.dump();
  }
  ASSERT_FALSE((*status)["gangs"].empty()) << status->dump();
  for (const auto& gang : (*status)["gangs"]) {
    EXPECT_EQ(gang.value("state", ""), "done") << gang.dump();
  }
}

std::map<std::string, std::string> GangEpochStates(
    const nlohmann::json& status) {
  std::map<std::string, std::string> states;
  for (const auto& gang : status["gangs"]) {
    states[absl::StrCat(gang.value("gang_id", ""), " ",
                        gang.value("epoch", 0))] = gang.value("state", "");
  }
  return states;
}

int MembersPresent(const nlohmann::json& status) {
  int present = 0;
  for (const auto& gang : status["gangs"]) {
    if (gang.value("state", "") != "forming") continue;
    for (const auto& member : gang["members"]) {
      if (member.value("present", false)) ++present;
    }
  }
  return present;
}

std::unique_ptr<Subprocess> StartRunLocal(
    const GdtCluster& cluster, const std::string& project,
    const std::string& job, const std::vector<std::string>& extra) {
  SpawnOptions options;
  options.argv = cluster.RunLocalArgv(project, job, extra);
  options.env = CurrentEnvironment();
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Spawn(options);
  EXPECT_TRUE(process.ok()) << process.status();
  return process.ok() ? std::move(*process) : nullptr;
}

CommandResult FinishRun(Subprocess& run, std::chrono::milliseconds timeout) {
  CommandResult result;
  auto collect = [&](OutputSource, std::string_view data) {
    result.output.append(data);
  };
  std::optional<ExitStatus> status =
      run.WaitUntil(std::chrono::steady_clock::now() + timeout, collect);
  if (!status.has_value()) {
    result.output += "\n[test: run-local killed at its deadline]\n";
    status = run.Terminate(std::chrono::milliseconds(3000), collect);
  }
  result.status = *status;
  return result;
}

std::string ProcessInfo::Describe() const {
  return absl::StrCat("pid ", pid, ": ", cmdline);
}

std::vector<ProcessInfo> JobProcesses(const GdtCluster& cluster,
                                      const std::string& env_entry) {
  const std::string& marker = cluster.dir().path();
  const std::string self = std::to_string(getpid());
  std::vector<ProcessInfo> found;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos ||
        name == self) {
      continue;
    }
    const std::string dir = entry.path().string();
    ProcessInfo info;
    info.pid = std::stoi(name);
    info.cmdline = ReadFile(dir + "/cmdline");
    info.environ = ReadFile(dir + "/environ");
    if (info.cmdline.empty()) continue;  // A zombie or a kernel thread.
    const std::string exe = fs::read_symlink(dir + "/exe", ignored).string();
    if (exe == BinaryPath("gdt-coord") || exe == BinaryPath("gdt-agent")) {
      continue;
    }
    if (info.cmdline.find(marker) == std::string::npos &&
        info.environ.find(marker) == std::string::npos) {
      continue;
    }
    if (!env_entry.empty() &&
        info.environ.find('\0' + env_entry + '\0') == std::string::npos &&
        info.environ.rfind(env_entry + '\0', 0) != 0) {
      continue;
    }
    std::replace(info.cmdline.begin(), info.cmdline.end(), '\0', ' ');
    found.push_back(std::move(info));
  }
  return found;
}

std::vector<ProcessInfo> DdpWorkers(const GdtCluster& cluster,
                                    const std::string& env_entry) {
  std::vector<ProcessInfo> workers;
  for (ProcessInfo& process : JobProcesses(cluster, env_entry)) {
    if (process.cmdline.find("/torchrun ") == std::string::npos &&
        process.cmdline.find("examples/ddp/train.py") != std::string::npos) {
      workers.push_back(std::move(process));
    }
  }
  return workers;
}

std::vector<ProcessInfo> MemberRunExecs(const GdtCluster& cluster, int index) {
  std::vector<ProcessInfo> execs;
  for (ProcessInfo& process : JobProcesses(
           cluster, absl::StrCat("CUSTOM_ENV_CI_NODE_INDEX=", index))) {
    if (process.cmdline.find("gdt-executor") != std::string::npos &&
        process.cmdline.find(" run ") != std::string::npos) {
      execs.push_back(std::move(process));
    }
  }
  return execs;
}

std::string DescribeAll(const std::vector<ProcessInfo>& processes) {
  std::string text;
  for (const ProcessInfo& process : processes) {
    absl::StrAppend(&text, process.Describe(), "\n");
  }
  return text;
}

namespace {

// `lines` as the one entry of a script list, a literal block.
std::string ScriptBlock(const std::string& key, const std::string& lines) {
  std::string yaml = absl::StrCat("  ", key, ":\n    - |\n");
  for (absl::string_view line : absl::StrSplit(lines, '\n')) {
    if (!line.empty()) absl::StrAppend(&yaml, "      ", line, "\n");
  }
  return yaml;
}

}  // namespace

std::string GangJobYaml(const GangJob& job) {
  std::string yaml = absl::StrCat(
      job.name, ":\n",
      job.members > 1 ? absl::StrCat("  parallel: ", job.members, "\n")
                      : std::string(),
      "  timeout: 5 minutes\n"
      "  variables:\n"
      "    GDT_GPUS_PER_NODE: \"",
      job.gpus_per_node,
      "\"\n"
      "    GDT_LAUNCHER: none\n",
      job.extra_yaml, ScriptBlock("script", job.script));
  if (!job.after_script.empty()) {
    absl::StrAppend(&yaml, ScriptBlock("after_script", job.after_script));
  }
  return yaml;
}

std::string MakeShellProject(const TempDir& dir, const std::string& script,
                             const std::string& after_script) {
  const std::string project = dir.Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            GangJobYaml({.script = script, .after_script = after_script}));
  return project;
}

void OneHostGangTest::SetUp() {
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  ASSERT_TRUE(cluster_.StartAgent(agent).ok()) << cluster_.Logs();
  ASSERT_TRUE(cluster_.WaitForHosts(1, std::chrono::seconds(20)).ok())
      << cluster_.Logs();
}

std::string OneHostGangTest::MemberLog(int index) {
  return ReadFile(
      absl::StrCat(cluster_.run_dir(), "/logs/train-", index, "-2.log"));
}

}  // namespace gdt::test
