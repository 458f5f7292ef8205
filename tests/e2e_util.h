#ifndef GDT_TESTS_E2E_UTIL_H_
#define GDT_TESTS_E2E_UTIL_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cluster.h"

namespace gdt::test {

// A project directory with examples/ddp/train.py and a .gitlab-ci.yml whose
// job `train` runs it as a `nodes`-member gang with `procs_per_node`
// processes per member. Returns its path (inside `dir`).
std::string MakeDdpProject(const TempDir& dir, int nodes, int procs_per_node);

// A project directory with a copy of examples/ddp (train.py and its
// checkpoint helpers) and `ci_file` as its .gitlab-ci.yml. Returns its path
// (inside `dir`).
std::string MakeDdpExampleProject(const TempDir& dir,
                                  const std::string& ci_file);

// What one member's job log says about its admission.
struct Admission {
  std::string job_log;
  std::string gang_id;
  int member_index = 0;
  int node_rank = -1;
  std::string host;
  std::string master;
};

// Parses the admission line of each member log under `run_dir`/logs.
std::vector<Admission> ReadAdmissions(const std::string& run_dir, int members);

// One gang, node ranks 0..n-1 each once, one master for all.
void ExpectOneGangWithRanks(const std::vector<Admission>& admissions, int n);

// In run-local's interleaved output, no member is admitted before all `n`
// members have joined: the gang is admitted as a whole.
void ExpectAdmittedOnlyAfterAllJoined(const std::string& output, int n);

// Every rank's report (an artifact of the job) exists, agrees on the world
// size and says its parameters equal everyone else's.
void ExpectTrainedWithIdenticalParameters(const std::string& run_dir,
                                          int world_size);

// The coordinator holds no GPU, slot or port lease and every gang is done.
void ExpectLeasesReleased(GdtCluster& cluster);

// "<gang id> <epoch>" -> state for every gang in `status` (a
// GdtCluster::Status()), finished ones included.
std::map<std::string, std::string> GangEpochStates(
    const nlohmann::json& status);

// Members of forming gangs whose executors are connected.
int MembersPresent(const nlohmann::json& status);

// Starts run-local in the background; output on its pipes. `extra` are
// further run-local arguments (e.g. --var K=V).
std::unique_ptr<Subprocess> StartRunLocal(
    const GdtCluster& cluster, const std::string& project,
    const std::string& job, const std::vector<std::string>& extra = {});

// Waits for a StartRunLocal() process to end (terminating it at `timeout`);
// returns its exit status and output.
CommandResult FinishRun(Subprocess& run, std::chrono::milliseconds timeout);

// A live process seen in /proc.
struct ProcessInfo {
  int pid = 0;
  std::string cmdline;  // Arguments joined by spaces.
  std::string environ;  // NUL-separated, as in /proc/PID/environ.
  std::string Describe() const;
};

// The processes of the cluster's jobs, in any namespace: everything whose
// command line or environment mentions the cluster's directory (stage
// scripts, launchers, trainers, executors, run-local), except the gdt-coord
// and gdt-agent daemons themselves and this test. When `env_entry` is not
// empty, only those whose environment holds it (e.g. "GDT_NODE_RANK=0").
std::vector<ProcessInfo> JobProcesses(const GdtCluster& cluster,
                                      const std::string& env_entry = "");

// The examples/ddp trainers (workers, not the torchrun wrapper) among
// JobProcesses(cluster, env_entry).
std::vector<ProcessInfo> DdpWorkers(const GdtCluster& cluster,
                                    const std::string& env_entry);

// The gdt-executor `run` execs (a stage the runner runs through the
// executor) of member `index`'s job, among JobProcesses(cluster).
std::vector<ProcessInfo> MemberRunExecs(const GdtCluster& cluster, int index);

// "pid 123: /usr/bin/python3 train.py" lines, for failure messages.
std::string DescribeAll(const std::vector<ProcessInfo>& processes);

// The executor's documented "stopped because a peer failed" code, written
// out rather than taken from common/exit_code.h: a change of the code users
// retry on must fail these tests.
inline constexpr int kPeerFailureExitCode = 75;

// One job of a .gitlab-ci.yml: a gang (2 members unless told) without a
// launcher.
struct GangJob {
  std::string name = "train";
  std::string script;        // Shell lines: the job's one `script:` entry.
  int gpus_per_node = 0;     // 0: CPU members.
  std::string extra_yaml;    // Lines after its variables: more "    K: v"
                             // variables, then "  key: ..." job keys.
  std::string after_script;  // Shell lines; empty = none.
  int members = 2;           // `parallel: N`; 1: a plain job (a gang of one).
};

// The job's YAML (scripts as literal blocks, kept as written).
std::string GangJobYaml(const GangJob& job);

// A project whose job `train` is a 2-member CPU gang running `script` (one
// shell line) without a launcher, and `after_script` (one shell line) after
// it unless empty. Returns its path (inside `dir`).
std::string MakeShellProject(const TempDir& dir, const std::string& script,
                             const std::string& after_script = "");

// TCP connections to an endpoint that send nothing (a descriptor flood);
// closed when it goes (or handed over with Release()).
class IdleConnections {
 public:
  IdleConnections() = default;
  IdleConnections(const IdleConnections&) = delete;
  IdleConnections& operator=(const IdleConnections&) = delete;
  ~IdleConnections();

  // Opens `count` connections to the IPv4 `endpoint` (host:port); fails the
  // test when one cannot be made.
  void Open(const std::string& endpoint, int count);

  // The connections, now the caller's to close.
  std::vector<int> Release() { return std::exchange(fds_, {}); }

 private:
  std::vector<int> fds_;
};

// A coordinator and one agent "local" with 2 CPU slots on loopback, up.
class OneHostGangTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // Member `index`'s job log of the 2-member job `train`.
  std::string MemberLog(int index);

  GdtCluster cluster_;
};

}  // namespace gdt::test

#endif  // GDT_TESTS_E2E_UTIL_H_
