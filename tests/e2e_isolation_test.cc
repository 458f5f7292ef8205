// End to end: what a job script can do to the host and to other jobs on it.
// The agent runs as root with a pool of member accounts; each attack is made
// from a real job (run-local → executor → agent) or, for the agent's own
// API, by a real gRPC client, and must fail.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/isolation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/agent_client.h"
#include "testing/cluster.h"
#include "testing/device_nodes.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

std::string MemberLogOf(const GdtCluster& cluster, int index) {
  return ReadFile(
      absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
}

// A live, non-zombie process with this pid runs `sleep <seconds>`.
bool SleepAlive(int pid, const std::string& seconds_arg) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (stat.empty() || paren == std::string::npos || paren + 2 >= stat.size() ||
      stat[paren + 2] == 'Z') {
    return false;
  }
  return ReadFile(absl::StrCat("/proc/", pid, "/cmdline")) ==
         std::string("sleep\0", 6) + seconds_arg + std::string(1, '\0');
}

// A coordinator that requires host tokens and one root agent "local" with
// two CPU slots, the test member accounts, its host token in a 0600 file
// and its config 0600: the deployment docs/admin-guide.md describes.
class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the agent switches members to other "
                      "accounts and makes cgroups (CI runs the suite as root)";
    }
    const std::string admin = cluster_.dir().Sub("admin.token");
    WriteFile(admin, "isolation-admin-secret\n");
    chmod(admin.c_str(), 0600);
    cluster_.SetCoordinatorExtraConfig(
        absl::StrCat("admin_token_file: ", admin,
                     "\nrequire_host_tokens: true\n", coordinator_yaml_));
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    // --output writes the token 0600 (a redirection would leave 0644).
    token_file_ = cluster_.dir().Sub("host.token");
    CommandResult created =
        RunProcess({BinaryPath("gdt-coord"), "hosts", "token", "create",
                    "local", "--coordinator", cluster_.coordinator_endpoint(),
                    "--output", token_file_},
                   {{"GDT_ADMIN_TOKEN_FILE", admin}}, seconds(20));
    ASSERT_TRUE(created.status.success()) << created.output;
    EXPECT_EQ(created.output, absl::StrCat("host token of local written to ",
                                           token_file_, " (mode 0600)\n"));
    struct stat info = {};
    ASSERT_EQ(stat(token_file_.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600u);
    token_ = std::string(absl::StripAsciiWhitespace(ReadFile(token_file_)));
    ASSERT_EQ(token_.size(), 64u);
    StartAgent(token_file_);
  }

  void StartAgent(const std::string& token_file) {
    AgentSpec agent;
    agent.name = "local";
    agent.cpu_slots = cpu_slots_;
    agent.host_token_file = token_file;
    agent.member_uid_pool = accounts_;
    agent.gpu_list = gpu_list_;
    agent.extra_yaml = agent_yaml_;
    // A secret in the agent's own environment, and a setting the
    // operator passes on to jobs.
    agent.env = {{"GDT_TEST_AGENT_SECRET", kAgentSecret},
                 {"GDT_TEST_FOR_JOBS", "passed-on"}};
    agent.stage_environment_passthrough = {"GDT_TEST_FOR_*"};
    ASSERT_TRUE(cluster_.StartAgent(agent).ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
    // Without a writable cgroup v2 the agent falls back to process groups,
    // and escapes would go unnoticed: this test needs the real thing.
    ASSERT_THAT(cluster_.Logs(), HasSubstr("event=cgroups_on"))
        << "the agent found no writable cgroup v2 hierarchy; these tests "
           "need one (mount cgroup2, run as root)\n"
        << cluster_.Logs();
  }

  // A project whose job `train` is a 2-member CPU gang running `script`
  // (shell lines) without a launcher.
  std::string MakeProject(const std::string& script,
                          const std::string& extra_yaml = "") {
    const std::string project = cluster_.dir().Sub("project");
    fs::create_directories(project);
    WriteFile(project + "/.gitlab-ci.yml",
              GangJobYaml({.script = script, .extra_yaml = extra_yaml}));
    return project;
  }

  // A directory every member can write (like /tmp), for the members'
  // own rendezvous.
  std::string SharedDir(const std::string& name) {
    const std::string dir = cluster_.dir().Sub(name);
    fs::create_directories(dir);
    chmod(dir.c_str(), 01777);
    return dir;
  }

  static constexpr const char* kAgentSecret = "agent-env-secret-4711";
  std::vector<std::string> accounts_ = TestMemberAccounts();
  int cpu_slots_ = 2;
  std::vector<AgentSpec::Gpu> gpu_list_;  // GPUs of the agent's host.
  std::string agent_yaml_;                // More agent config lines.
  std::string coordinator_yaml_;          // More coordinator config lines.
  GdtCluster cluster_;
  std::string token_;
  std::string token_file_;
};

TEST_F(IsolationTest, JobReadsNeitherTheAgentsSecretsNorAnotherMembersEnv) {
  const std::string barrier = SharedDir("barrier");
  const std::string config = cluster_.dir().Sub("agent-local.yaml");
  // Both members look while both run (a barrier before and after), and
  // print "leak-2-..." only for what they could read; the marker is
  // computed so that the echoed script text never matches.
  const std::string script = absl::StrReplaceAll(
      R"sh(wait_for() { end=$((SECONDS+60)); while [ ! -e "B/$1-1" ] || [ ! -e "B/$1-2" ]; do [ $SECONDS -lt $end ] || break; sleep 0.1; done; }
echo "member $CI_NODE_INDEX runs as uid $(id -u)"
touch "B/ready-$CI_NODE_INDEX"; wait_for ready
mark="leak-$((1+1))"
cat "C" >/dev/null 2>&1 && echo "$mark-agent-config"
cat "T" >/dev/null 2>&1 && echo "$mark-host-token"
ls "$(dirname "$HOME")" >/dev/null 2>&1 && echo "$mark-scratch-root-listed"
for p in $(pgrep -f -- "--config C"); do cat "/proc/$p/environ" >/dev/null 2>&1 && echo "$mark-agent-environ"; done
for f in /proc/[0-9]*/environ; do e=$(tr "\000" "\n" 2>/dev/null < "$f") || continue; r=$(echo "$e" | sed -n "s/^GDT_NODE_RANK=//p"); [ -z "$r" ] || [ "$r" = "$GDT_NODE_RANK" ] || echo "$mark-other-member-environ $f"; done
touch "B/done-$CI_NODE_INDEX"; wait_for done
echo "member $CI_NODE_INDEX looked"
)sh",
      {{"B/", barrier + "/"},
       {"\"C\"", "\"" + config + "\""},
       {"--config C", "--config " + config},
       {"\"T\"", "\"" + token_file_ + "\""}});
  const std::string project = MakeProject(script);

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  std::set<std::string> uids;
  static const std::regex kUid(R"(member \d runs as uid (\d+)\n)");
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    std::smatch match;
    ASSERT_TRUE(std::regex_search(log, match, kUid)) << log;
    EXPECT_NE(match[1].str(), "0") << log;
    uids.insert(match[1].str());
    EXPECT_THAT(log, HasSubstr(absl::StrCat("member ", index, " looked\n")))
        << log;
    EXPECT_THAT(log, Not(HasSubstr("leak-2"))) << log;
    EXPECT_THAT(log, Not(HasSubstr(token_)));
  }
  EXPECT_EQ(uids.size(), 2u) << "members of one host share an account";
}

TEST_F(IsolationTest, JobGetsABaseEnvironmentNotTheAgents) {
  const std::string project = MakeProject(
      "env | sort | sed 's/^/env: /'\n"
      "echo \"path is $PATH\"\n");

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  const std::string log = MemberLogOf(cluster_, 1);
  EXPECT_THAT(log, Not(HasSubstr(kAgentSecret))) << log;
  EXPECT_THAT(log, Not(HasSubstr("env: GDT_TEST_AGENT_SECRET"))) << log;
  EXPECT_THAT(log, HasSubstr("env: GDT_TEST_FOR_JOBS=passed-on\n")) << log;
  EXPECT_THAT(log, HasSubstr("env: PATH=")) << log;
  // And what gdt and the runner set.
  EXPECT_THAT(log, HasSubstr("env: GDT_NODE_RANK=")) << log;
  EXPECT_THAT(log, HasSubstr("env: CI_JOB_ID=")) << log;
}

// The checkout belongs to root while members run as pool accounts: git
// would call it "of dubious ownership", and the copy into each member's
// builds dir would fall back to the whole directory, ignored build trees
// included (gigabytes per member). Each member gets what a fetch brings:
// tracked and untracked files, not ignored ones, in a git repository at the
// pipeline's commit.
TEST_F(IsolationTest, PoolAccountGetsTheCheckoutsFilesNotItsIgnoredOnes) {
  const std::string project = MakeProject(
      "for f in tracked.txt untracked.txt build/big.bin; do\n"
      "  if [ -e \"$f\" ]; then echo \"has $f\"; else echo \"lacks $f\"; fi\n"
      "done\n"
      "echo \"at $(git rev-parse HEAD) for $CI_COMMIT_SHA\"\n");
  WriteFile(project + "/.gitignore", "build/\n");
  WriteFile(project + "/tracked.txt", "tracked\n");
  fs::create_directories(project + "/build");
  WriteFile(project + "/build/big.bin", "a build tree\n");
  const std::vector<std::string> git = {
      "git", "-C", project, "-c", "user.name=gdt", "-c", "user.email=gdt@test"};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"init", "-q"},
        {"add", ".gitignore", ".gitlab-ci.yml", "tracked.txt"},
        {"commit", "-q", "-m", "project"}}) {
    std::vector<std::string> argv = git;
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult result = RunProcess(argv, {}, seconds(20));
    ASSERT_TRUE(result.status.success()) << result.output;
  }
  WriteFile(project + "/untracked.txt", "not yet added\n");
  std::vector<std::string> rev_parse = git;
  rev_parse.insert(rev_parse.end(), {"rev-parse", "HEAD"});
  const CommandResult head = RunProcess(rev_parse, {}, seconds(20));
  ASSERT_TRUE(head.status.success()) << head.output;
  const std::string sha = head.output.substr(0, 40);

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    EXPECT_THAT(log, HasSubstr("has tracked.txt\n")) << log;
    EXPECT_THAT(log, HasSubstr("has untracked.txt\n")) << log;
    EXPECT_THAT(log, HasSubstr("lacks build/big.bin\n")) << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("at ", sha, " for ", sha, "\n")))
        << log;
  }
}

TEST_F(IsolationTest, MemberCgroupCapsItsProcessesWhereTheHostCan) {
  const std::string project = MakeProject(
      "d=\"$(findmnt -rn -t cgroup2 -o TARGET | head -1)$(sed -n "
      "'s/^0:://p' /proc/self/cgroup)\"\n"
      "echo \"pids.max is $(cat \"$d/pids.max\" 2>/dev/null || echo "
      "absent)\"\n");

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  const std::string log = MemberLogOf(cluster_, 1);
  const std::string logs = cluster_.Logs();
  static const std::regex kLimit(
      R"(event=member_pids_limit_on pids_max=(\d+))");
  std::smatch limit;
  if (std::regex_search(logs, limit, kLimit)) {
    EXPECT_THAT(log,
                HasSubstr(absl::StrCat("pids.max is ", limit[1].str(), "\n")))
        << log;
    // Both members at their limit (this host runs two at once) still leave
    // pids to the agent and the host: on a kernel with pid_max 32768 the
    // default of 32768 each would not.
    uint64_t pid_max = 0;
    ASSERT_TRUE(absl::SimpleAtoi(
        absl::StripAsciiWhitespace(ReadFile("/proc/sys/kernel/pid_max")),
        &pid_max));
    uint64_t pids_max = 0;
    ASSERT_TRUE(absl::SimpleAtoi(limit[1].str(), &pids_max));
    EXPECT_LT(2 * pids_max, pid_max) << logs;
  } else {
    // A host whose pids controller is bound to cgroup v1: one warning at
    // start, and members run without a limit.
    EXPECT_THAT(log, HasSubstr("pids.max is absent\n")) << log;
    const size_t first = logs.find("event=member_pids_limit_off");
    ASSERT_NE(first, std::string::npos) << logs;
    EXPECT_EQ(logs.find("event=member_pids_limit_off", first + 1),
              std::string::npos)
        << logs;
  }
}

// A host with two GPUs whose device nodes are stand-ins (an unused major:
// no driver answers them) and an agent that confines members to their
// GPUs. Each member of a two-GPU gang tries to open both nodes.
class GpuConfinementTest : public IsolationTest {
 protected:
  void SetUp() override {
    if (geteuid() == 0) {
      const uint32_t major = gdt::testing::UnusedCharMajor();
      ASSERT_NE(major, 0u) << "no free character major in 234..254";
      for (uint32_t minor = 0; minor < 2; ++minor) {
        const std::string node = cluster_.dir().Sub(absl::StrCat("gpu", minor));
        ASSERT_EQ(mknod(node.c_str(), S_IFCHR | 0666, makedev(major, minor)), 0)
            << node << ": " << std::strerror(errno);
        gpu_list_.push_back({absl::StrCat("GPU-gdt-test-", minor), node});
      }
      agent_yaml_ = "confine_gpu_devices: true\n";
    }
    IsolationTest::SetUp();
  }
};

TEST_F(GpuConfinementTest, AMemberOpensOnlyItsOwnGpu) {
  ASSERT_THAT(cluster_.Logs(), HasSubstr("event=gpu_confinement_on gpus=2"))
      << cluster_.Logs();
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            GangJobYaml(
                {.script = absl::StrCat(
                     "echo \"visible=$CUDA_VISIBLE_DEVICES\"\n"
                     "for d in ",
                     gpu_list_[0].device, " ", gpu_list_[1].device,
                     "; do\n"
                     "  if (exec 3<\"$d\") 2>/dev/null; then\n"
                     "    echo \"$(basename $d): opened\"\n"
                     "  else\n"
                     "    echo \"$(basename $d): $(LC_ALL=C cat \"$d\" 2>&1 | "
                     "sed 's/.*: //')\"\n"
                     "  fi\n"
                     "done\n"),
                 .gpus_per_node = 1}));

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  std::set<std::string> visible;
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    // Each member is named its GPU by UUID and may open only its node; the
    // other GPU's node is refused by the member's cgroup (EPERM), its own
    // passes the cgroup and finds no driver behind the stand-in (ENXIO).
    const bool first = absl::StrContains(log, "visible=GPU-gdt-test-0\n");
    const bool second = absl::StrContains(log, "visible=GPU-gdt-test-1\n");
    ASSERT_NE(first, second) << log;
    visible.insert(first ? "0" : "1");
    EXPECT_THAT(log, HasSubstr(first ? "gpu0: No such device or address\n"
                                     : "gpu0: Operation not permitted\n"))
        << log;
    EXPECT_THAT(log, HasSubstr(first ? "gpu1: Operation not permitted\n"
                                     : "gpu1: No such device or address\n"))
        << log;
  }
  EXPECT_EQ(visible, (std::set<std::string>{"0", "1"}));
  // Outside the members nothing is refused.
  const std::string outside =
      RunProcess({"/bin/sh", "-c",
                  absl::StrCat("LC_ALL=C cat ", gpu_list_[1].device,
                               " 2>&1 | sed 's/.*: //'")},
                 {}, seconds(10))
          .output;
  EXPECT_EQ(outside, "No such device or address\n");
}

// The next members given the same pooled accounts find nothing of the
// earlier ones outside their own directories: no file in /dev/shm or
// /tmp, no link planted for them, no System V IPC object.
class AccountReuseTest : public IsolationTest {
 protected:
  // Accounts no other test uses: a concurrent test's members must not
  // share them (the purge leaves an account alone while it has processes).
  void SetUp() override {
    accounts_ = {"61011:61011", "61012:61012"};
    tag_ = absl::StrCat("gdt-reuse-", getpid());
    // What members of an agent that died left: the next agent removes it
    // at start, before any member gets the account.
    // (Without root the base skips the test.)
    stale_ = absl::StrCat("/dev/shm/", tag_, "-stale");
    if (geteuid() == 0) {
      WriteFile(stale_, "left by a dead agent's member\n");
      ASSERT_EQ(chown(stale_.c_str(), 61011, 61011), 0);
    }
    IsolationTest::SetUp();
  }
  void TearDown() override {
    // Whatever a failed run left.
    agent::PurgeOptions options;
    options.roots = {"/dev/shm", "/tmp", "/run/lock"};
    for (uid_t uid : {61011u, 61012u}) {
      (void)agent::PurgeAccountLeftovers(uid, uid, options);
    }
  }

  // Rows of /proc/sysvipc/<kind> owned or created by the test accounts.
  static int IpcObjectsOfTheAccounts() {
    int count = 0;
    for (const char* kind : {"shm", "sem", "msg"}) {
      const std::vector<std::string> lines =
          absl::StrSplit(ReadFile(absl::StrCat("/proc/sysvipc/", kind)), '\n',
                         absl::SkipEmpty());
      if (lines.empty()) continue;
      const std::vector<std::string> header =
          absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
      for (size_t row = 1; row < lines.size(); ++row) {
        const std::vector<std::string> fields =
            absl::StrSplit(lines[row], ' ', absl::SkipEmpty());
        for (size_t i = 0; i < header.size() && i < fields.size(); ++i) {
          if ((header[i] == "uid" || header[i] == "cuid") &&
              (fields[i] == "61011" || fields[i] == "61012")) {
            ++count;
            break;
          }
        }
      }
    }
    return count;
  }

  // The entries of `dir` whose names start with the tag.
  std::vector<std::string> Left(const std::string& dir) const {
    std::vector<std::string> left;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(tag_, 0) == 0) left.push_back(entry.path().string());
    }
    return left;
  }

  std::string tag_;
  std::string stale_;
  // The host has a lock directory everyone may write to (1777).
  const bool lock_dir_ = [] {
    struct stat info = {};
    return lstat("/run/lock", &info) == 0 && S_ISDIR(info.st_mode) &&
           (info.st_mode & S_IWOTH) != 0;
  }();
};

TEST_F(AccountReuseTest, ALaterGangFindsNothingAnEarlierOneLeft) {
  EXPECT_FALSE(fs::exists(stale_));
  EXPECT_THAT(cluster_.Logs(),
              ::testing::ContainsRegex("event=member_account_purged member=- "
                                       "uid=61011 files=1 dirs=0"))
      << cluster_.Logs();
  const int ipc_before = IpcObjectsOfTheAccounts();
  ASSERT_EQ(ipc_before, 0) << "objects of the test accounts from elsewhere";
  const std::string t = tag_;
  const std::string leave = absl::StrCat(
      "umask 077\n"
      "echo \"earlier-secret-$CI_JOB_ID\" > /dev/shm/",
      t, "-$(id -u)\n", "mkdir /tmp/", t, "-dir-$(id -u) && echo x > /tmp/", t,
      "-dir-$(id -u)/f\n", "ln -s /dev/shm/", t, "-collect-$(id -u) /tmp/", t,
      "-trap-$(id -u)\n",
      "ipcmk -S 4 && ipcmk -Q && ipcmk -M 4096 && echo \"ipc made\"\n",
      // The lock directory everyone may write to, where the host has one.
      lock_dir_
          ? absl::StrCat("echo \"earlier-secret-$CI_JOB_ID\" > /run/lock/", t,
                         "-$(id -u)\n")
          : "",
      "echo \"left state as uid $(id -u)\"\n");
  CommandResult earlier =
      cluster_.RunLocal(MakeProject(leave), "train", {}, seconds(120));
  ASSERT_TRUE(earlier.status.success()) << earlier.output << cluster_.Logs();
  std::set<std::string> earlier_uids;
  static const std::regex kUid(R"(as uid (\d+)\n)");
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    EXPECT_THAT(log, HasSubstr("ipc made")) << log;
    std::smatch match;
    ASSERT_TRUE(std::regex_search(log, match, kUid)) << log;
    earlier_uids.insert(match[1].str());
  }
  EXPECT_EQ(earlier_uids, (std::set<std::string>{"61011", "61012"}));

  // Teardown answered after the purge: nothing is left by now.
  EXPECT_THAT(Left("/dev/shm"), ::testing::IsEmpty());
  EXPECT_THAT(Left("/tmp"), ::testing::IsEmpty());
  EXPECT_THAT(Left("/run/lock"), ::testing::IsEmpty());
  EXPECT_EQ(IpcObjectsOfTheAccounts(), 0);
  for (const char* uid : {"61011", "61012"}) {
    EXPECT_THAT(cluster_.Logs(),
                ::testing::ContainsRegex(absl::StrCat(
                    "event=member_account_purged member=[^ ]+ uid=", uid,
                    " files=", lock_dir_ ? 4 : 3,
                    " dirs=1 shm=1 sem=1 msg=1 mounts=0 failed=0")))
        << cluster_.Logs();
  }

  // The later gang gets the same accounts and looks.
  const std::string look = absl::StrCat(
      "mark=\"found-$((1+1))\"\n"
      "cat /dev/shm/",
      t, "-$(id -u) 2>/dev/null && echo \"$mark-secret\"\n", "cat /run/lock/",
      t, "-$(id -u) 2>/dev/null && echo \"$mark-lock\"\n", "echo later > /tmp/",
      t, "-trap-$(id -u)\n", "[ -e /dev/shm/", t,
      "-collect-$(id -u) ] && echo \"$mark-link\"\n",
      "[ -z \"$(ipcs -c | awk -v u=$(id -u) '$3==u || $5==u')\" ] || "
      "echo \"$mark-ipc\"\n",
      "echo \"looked as uid $(id -u)\"\n");
  fs::remove_all(cluster_.run_dir());
  CommandResult later =
      cluster_.RunLocal(MakeProject(look), "train", {}, seconds(120));
  ASSERT_TRUE(later.status.success()) << later.output << cluster_.Logs();
  std::set<std::string> later_uids;
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    EXPECT_THAT(log, Not(HasSubstr("found-2"))) << log;
    EXPECT_THAT(log, Not(HasSubstr("earlier-secret"))) << log;
    std::smatch match;
    ASSERT_TRUE(std::regex_search(log, match, kUid)) << log;
    later_uids.insert(match[1].str());
  }
  EXPECT_EQ(later_uids, earlier_uids);
  // What the later gang wrote went with it too.
  EXPECT_THAT(Left("/tmp"), ::testing::IsEmpty());
  EXPECT_THAT(Left("/dev/shm"), ::testing::IsEmpty());
}

TEST_F(IsolationTest, SetsidProcessDoesNotOutliveTeardown) {
  const std::string project = MakeProject(
      "setsid sleep 313 </dev/null >/dev/null 2>&1 &\n"
      "echo \"escaped pid $!\"\n");

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  std::vector<int> pids;
  static const std::regex kPid(R"(escaped pid (\d+)\n)");
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    EXPECT_THAT(log, HasSubstr("Job succeeded")) << log;
    std::smatch match;
    ASSERT_TRUE(std::regex_search(log, match, kPid)) << log;
    pids.push_back(std::stoi(match[1].str()));
  }
  for (int pid : pids) {
    // Teardown waited for the member's cgroup to be empty before the job
    // ended; only the reaping of the zombie may lag.
    EXPECT_TRUE(WaitFor([&] { return !SleepAlive(pid, "313"); }, seconds(2)))
        << "pid " << pid << " (setsid sleep 313) outlived its job";
    if (SleepAlive(pid, "313")) kill(pid, SIGKILL);
  }
}

// gitlab-runner dies with every executor (kill -9; its host rebooted)
// while member 1 trains and member 2, whose script exited 0, waits in the
// exit barrier, with a setsid child of its job running on under its pooled
// account. No cleanup will come for either member. Member 1 goes at once
// (its stream to the agent broke); member 2 ran no stage, so its agent
// tears it down once the coordinator lets it go (member_gone_after_seconds,
// shortened here): the child is killed, its files are purged and its
// account is free, so the next gang gets both accounts and finds nothing.
class RunnerLossTest : public IsolationTest {
 protected:
  void SetUp() override {
    accounts_ = {"61021:61021", "61022:61022"};  // This test's own.
    tag_ = absl::StrCat("gdt-runner-loss-", getpid());
    // Longer than the gaps between a live runner's stages (an exec starts
    // under ASan on a loaded machine), or a member would count as gone
    // while its runner still works.
    coordinator_yaml_ = "member_gone_after_seconds: 8\n";
    IsolationTest::SetUp();
  }
  void TearDown() override {
    agent::PurgeOptions options;
    options.roots = {"/dev/shm", "/tmp", "/run/lock"};
    for (uid_t uid : {61021u, 61022u}) {
      (void)agent::PurgeAccountLeftovers(uid, uid, options);
    }
  }
  std::string tag_;
};

TEST_F(RunnerLossTest, WhatAJobLeftRunningDiesWithItsRunner) {
  const std::string flags = SharedDir("flags");
  const std::string started = flags + "/member-1-started";
  const std::string escaped = "sleep 317";
  // Each member leaves a secret in its project dir (its builds dir, which
  // the agent keeps when it tears a member down itself) and says where.
  const std::string project = MakeProject(absl::StrCat(
      "echo \"builds-secret-$CI_JOB_ID\" > \"$CI_PROJECT_DIR/", tag_,
      "-secret\"\n", "echo \"$CI_PROJECT_DIR\" > ", flags,
      "/project-dir-$CI_NODE_INDEX\n",
      "if [ \"$CI_NODE_INDEX\" = 2 ]; then\n"
      "  echo left > /tmp/",
      tag_,
      "-$(id -u)\n"
      "  setsid ",
      escaped,
      " </dev/null >/dev/null 2>&1 &\n"
      // The stage's group is killed when its script exits: exit once the
      // child has left the group.
      "  child=$!\n"
      "  until [ \"$(ps -o sid= -p $child | tr -d \" \")\" = $child ]; do "
      "sleep 0.05; done\n"
      "  exit 0\n"
      "fi\n"
      "touch ",
      started, "; sleep 127\n"));
  std::unique_ptr<Subprocess> run =
      StartRunLocal(cluster_, project, "train", {"--pipeline-id", "5151"});
  ASSERT_NE(run, nullptr);
  const auto escaped_pids = [&] {
    std::vector<int> pids;
    for (const ProcessInfo& p : JobProcesses(cluster_)) {
      if (p.cmdline == escaped + " ") pids.push_back(p.pid);
    }
    return pids;
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        return fs::exists(started) && escaped_pids().size() == 1 &&
               MemberLogOf(cluster_, 2).find("waiting for 1 other member") !=
                   std::string::npos;
      },
      seconds(90)))
      << MemberLogOf(cluster_, 2) << DescribeAll(JobProcesses(cluster_))
      << cluster_.Logs();

  // The runner and all its execs die; nobody will run cleanup.
  ASSERT_EQ(kill(run->pid(), SIGKILL), 0);
  for (const ProcessInfo& p : JobProcesses(cluster_)) {
    if (p.cmdline.find("gdt-executor") != std::string::npos) {
      kill(p.pid, SIGKILL);
    }
  }
  FinishRun(*run, seconds(10));
  const auto killed_at = std::chrono::steady_clock::now();

  // member_gone_after_seconds (8) plus a heartbeat or two (2 s each);
  // generous for a loaded machine.
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(40)))
      << DescribeAll(JobProcesses(cluster_)) << cluster_.Logs();
  const auto gone_after = std::chrono::steady_clock::now() - killed_at;
  // Logged once the purge is done, just after the cgroup was emptied.
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_.Logs().find("event=left_member_torn_down") !=
               std::string::npos;
      },
      seconds(10)))
      << cluster_.Logs();
  RecordProperty(
      "escaped_child_gone_ms",
      static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(gone_after)
              .count()));
  for (int pid : escaped_pids()) kill(pid, SIGKILL);  // A failed run's.
  EXPECT_FALSE(fs::exists(absl::StrCat("/tmp/", tag_, "-61021")));
  EXPECT_FALSE(fs::exists(absl::StrCat("/tmp/", tag_, "-61022")));
  for (int index = 1; index <= 2; ++index) {
    EXPECT_FALSE(ReadFile(absl::StrCat(flags, "/project-dir-", index)).empty())
        << MemberLogOf(cluster_, index);
  }

  // The next gang gets both accounts (none is held by a dead member) and
  // finds no process or file of the earlier one under them.
  fs::remove_all(cluster_.run_dir());
  const std::string look = MakeProject(absl::StrCat(
      "mark=\"found-$((1+1))\"\n"
      // A killed process its new parent has not reaped yet (a zombie:
      // this host's pid 1 reaps late) runs nothing.
      "ps -u \"$(id -u)\" -o stat=,comm= | grep -v '^Z' | grep -qw sleep && "
      "echo \"$mark-process\"\n"
      "[ -e /tmp/",
      tag_, "-$(id -u) ] && echo \"$mark-file\"\n",
      // The builds dirs the earlier gang's members left, with the accounts
      // the later one has: nothing in them is readable.
      "for f in ", flags, "/project-dir-*; do cat \"$(cat \"$f\")/", tag_,
      "-secret\" 2>/dev/null && echo \"$mark-builds-dir\"; done\n",
      "echo \"looked as uid $(id -u)\"\n"));
  CommandResult later = cluster_.RunLocal(look, "train", {}, seconds(120));
  ASSERT_TRUE(later.status.success()) << later.output << cluster_.Logs();
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    EXPECT_THAT(log, HasSubstr("looked as uid 6102")) << log;
    EXPECT_THAT(log, Not(HasSubstr("found-2"))) << log;
  }
}

TEST_F(IsolationTest, HangEvidenceIsNotWrittenThroughTheJobsDirectory) {
  // The job points its gdt-evidence at a directory it may not write; the
  // agent collects evidence as root, so it must not follow the job there.
  const std::string victim = cluster_.dir().Sub("not-the-jobs");
  fs::create_directories(victim);
  chmod(victim.c_str(), 0755);
  const std::string project = MakeProject(
      absl::StrCat("ln -s ", victim,
                   " gdt-evidence\n"
                   "touch \"$GDT_PROGRESS_FILE\"; echo stuck; sleep 122\n"),
      "    GDT_HANG_TIMEOUT: \"3\"\n");

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  EXPECT_FALSE(run.status.success()) << run.output;
  EXPECT_THAT(MemberLogOf(cluster_, 1), HasSubstr("hung: no progress"));
  EXPECT_TRUE(fs::is_empty(victim))
      << "the agent wrote evidence into " << victim;
  // It was collected, in the agent's own scratch dir.
  EXPECT_THAT(cluster_.Logs(),
              HasSubstr(absl::StrCat("event=evidence_collected")));
  EXPECT_THAT(cluster_.Logs(),
              HasSubstr(cluster_.dir().Sub("agent-local") + "/.evidence/"));
  EXPECT_TRUE(JobProcesses(cluster_).empty())
      << DescribeAll(JobProcesses(cluster_));
}

// What a job uploads is taken with its own account, and what run-local
// reads of it as a more privileged one (root here: its dotenv report) is
// read without following the job's links. The job plants, as artifacts,
// links to /etc/shadow, to a root-only file and directory, to another
// process's environment, a FIFO, a hard link, a name with a newline and
// patterns leaving the project; and it tries to make its dotenv report's
// directory in the store beforehand, read-only so that the upload could not
// clear it, holding a link to a root-only file of KEY=VALUE lines beside
// the file the upload writes. No byte of the root-only file may reach a
// later job or the store.
TEST_F(IsolationTest, UploadsFollowNoLinkOfTheJobsAndReadNoSpecialFile) {
  const std::string secret_dir = cluster_.dir().Sub("root-only");
  fs::create_directories(secret_dir);
  chmod(secret_dir.c_str(), 0700);
  const std::string secret = secret_dir + "/secret.env";
  constexpr const char* kSecret = "root-only-secret-5813";
  WriteFile(secret, absl::StrCat("GDT_LEAKED=", kSecret, "\n"));
  chmod(secret.c_str(), 0600);
  const std::string store = cluster_.run_dir() + "/artifacts";
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project);
  const std::string job_head =
      "  timeout: 5 minutes\n"
      "  variables:\n"
      "    GDT_GPUS_PER_NODE: \"0\"\n"
      "    GDT_LAUNCHER: none\n"
      "  script:\n"
      "    - |\n";
  WriteFile(
      project + "/.gitlab-ci.yml",
      absl::StrCat(
          "stages: [build, test]\n"
          "plant:\n"
          "  stage: build\n",
          job_head,
          "      d=\"$STORE/$CI_JOB_ID.dotenv\"\n"
          "      if mkdir -p \"$d\" 2>/dev/null; then\n"
          "        printf 'GOOD=1\\n' > \"$d/1\"; chmod 0666 \"$d/1\"\n"
          "        printf 'build.env\\n' > \"$d/paths\"; chmod 0666 "
          "\"$d/paths\"\n"
          "        ln -s ",
          secret,
          " \"$d/2\"\n"
          "        chmod 0555 \"$d\"\n"
          "      else echo cannot-plant-in-store; fi\n"
          "      printf 'GOOD=1\\n' > build.env\n"
          "      ln -s /etc/shadow shadow-link\n"
          "      ln -s ",
          secret, " secret-link\n      ln -s ", secret_dir,
          " secret-dir-link\n"
          "      ln -s /proc/1/environ environ-link\n"
          "      mkfifo fifo\n"
          "      ln ",
          secret,
          " hard 2>&1 || echo no-hard-link\n"
          "      touch \"$(printf 'new\\nline')\"\n"
          "      echo planted\n"
          "  artifacts:\n"
          "    paths: [shadow-link, secret-link, secret-dir-link, "
          "environ-link, fifo, hard, \"new*\", \"../outside\", "
          "/etc/passwd]\n"
          "    reports:\n"
          "      dotenv: build.env\n"
          "read:\n"
          "  stage: test\n"
          "  when: always\n",
          job_head,
          "      echo \"leaked: ${GDT_LEAKED:-nothing} good: ${GOOD:-unset}\"\n"
          "      cat secret-link secret-dir-link/secret.env 2>&1 || true\n"
          "      ls -la\n"));

  CommandResult run = cluster_.RunLocal(
      project, "plant", {"--job", "read", "--var", "STORE=" + store},
      seconds(120));

  std::string logs;
  for (const auto& entry :
       fs::directory_iterator(cluster_.run_dir() + "/logs")) {
    absl::StrAppend(&logs, "== ", entry.path().filename().string(), "\n",
                    ReadFile(entry.path().string()));
  }
  ASSERT_THAT(logs, HasSubstr("planted")) << run.output << logs;
  EXPECT_THAT(logs, HasSubstr("no-hard-link")) << logs;
  EXPECT_THAT(run.output + logs, Not(HasSubstr(kSecret))) << run.output << logs;
  // The store is run-local's: the job cannot make its report's directory
  // beforehand (which is how it got a link read before; the reader refuses
  // links too, DotenvTest).
  EXPECT_THAT(logs, HasSubstr("cannot-plant-in-store")) << logs;
  // The artifacts are stored as the job left them: links as links (as
  // gitlab-runner archives them), the FIFO as a FIFO; none of the root-only
  // bytes is in a file of the store.
  std::string stored_leak;
  int links = 0;
  for (auto it = fs::recursive_directory_iterator(store);
       it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_symlink()) {
      ++links;
      continue;
    }
    if (it->is_regular_file() &&
        absl::StrContains(ReadFile(it->path().string()), kSecret)) {
      stored_leak = it->path().string();
    }
  }
  EXPECT_EQ(stored_leak, "");
  EXPECT_GE(links, 4);
  EXPECT_TRUE(JobProcesses(cluster_).empty())
      << DescribeAll(JobProcesses(cluster_));
}

// The artifact store is run-local's: a job of one pipeline cannot put a
// dotenv report or artifacts under a job id another pipeline will use (ids
// are the pipeline id times 1000 plus the job's number), which that
// pipeline's later jobs would take as their own. Both pipelines share the
// work dir here; on a shared host the path is in the process list.
TEST_F(IsolationTest, AJobCannotPlantArtifactsUnderAnotherJobsId) {
  const std::string store = cluster_.run_dir() + "/artifacts";
  const std::string head =
      "  timeout: 5 minutes\n"
      "  variables:\n"
      "    GDT_GPUS_PER_NODE: \"0\"\n"
      "    GDT_LAUNCHER: none\n"
      "  script:\n"
      "    - |\n";
  const std::string attacker = cluster_.dir().Sub("attacker");
  fs::create_directories(attacker);
  WriteFile(
      attacker + "/.gitlab-ci.yml",
      absl::StrCat(
          "plant:\n", head,
          "      v=\"$STORE/701001.dotenv\"; a=\"$STORE/701001\"\n"
          "      if mkdir -p \"$v\" \"$a\" 2>/dev/null; then\n"
          "        printf 'X=1\\n' > \"$v/1\"; chmod 0666 \"$v/1\"\n"
          "        printf 'b\\n' > \"$v/paths\"; chmod 0666 \"$v/paths\"\n"
          "        printf 'EVIL=injected\\n' > \"$v/2\"; chmod 0555 \"$v\"\n"
          "        chmod 0777 \"$a\"; echo poison > \"$a/poisoned.txt\"\n"
          "      else echo cannot-plant-in-store; fi\n"));
  CommandResult planted = cluster_.RunLocal(
      attacker, "plant", {"--pipeline-id", "700", "--var", "STORE=" + store},
      seconds(120));
  ASSERT_TRUE(planted.status.success()) << planted.output << cluster_.Logs();
  EXPECT_THAT(planted.output, HasSubstr("cannot-plant-in-store"));

  const std::string victim = cluster_.dir().Sub("victim");
  fs::create_directories(victim);
  WriteFile(victim + "/.gitlab-ci.yml",
            absl::StrCat("stages: [build, test]\n"
                         "make:\n"
                         "  stage: build\n",
                         head,
                         "      printf 'GOOD=1\\n' > build.env; echo made > "
                         "out.txt\n"
                         "  artifacts:\n"
                         "    paths: [out.txt]\n"
                         "    reports:\n"
                         "      dotenv: build.env\n"
                         "use:\n"
                         "  stage: test\n",
                         head,
                         "      echo \"evil: ${EVIL:-none} good: "
                         "${GOOD:-unset}\"\n"
                         "      cat out.txt; ls\n"));
  CommandResult run = cluster_.RunLocal(
      victim, "make", {"--job", "use", "--pipeline-id", "701"}, seconds(120));
  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  const std::string use = ReadFile(cluster_.run_dir() + "/logs/use.log");
  EXPECT_THAT(use, HasSubstr("evil: none good: 1")) << use;
  EXPECT_THAT(use, HasSubstr("\nmade\n")) << use;
  EXPECT_THAT(use, Not(HasSubstr("poisoned"))) << use;
}

// A job fills the file system of its builds dir. As on a host that keeps
// /var/lib/gdt/builds and /var/lib/gdt/agent on one disk, the builds root and
// the agent's scratch dir (members' homes, the agent's exit outbox and
// process records) share one small tmpfs here. Four pool accounts and four
// CPU slots: a bystander gang runs beside the one that fills the disk.
class DiskFullTest : public IsolationTest {
 protected:
  // Its own accounts: tests run two at a time, and a teardown purges what
  // its accounts left (a test derived from it sets its own).
  DiskFullTest() {
    accounts_ = {"61031:61031", "61032:61032", "61033:61033", "61034:61034"};
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a tmpfs";
    cpu_slots_ = 4;
    disk_ = cluster_.dir().Sub("disk");
    fs::create_directories(disk_);
    ASSERT_EQ(mount("tmpfs", disk_.c_str(), "tmpfs", 0, "size=64m,mode=0755"),
              0)
        << "mount tmpfs on " << disk_ << ": " << strerror(errno);
    mounts_.push_back(disk_);
    for (const char* name : {"builds", "agent-local"}) {
      const std::string source = disk_ + "/" + name;
      const std::string target = cluster_.dir().Sub(name);
      fs::create_directories(source);
      fs::create_directories(target);
      ASSERT_EQ(
          mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr), 0)
          << "bind " << source << " on " << target << ": " << strerror(errno);
      mounts_.push_back(target);
    }
    IsolationTest::SetUp();
  }
  void TearDown() override {
    // Detached: processes that still use them let go when they end.
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) {
      umount2(it->c_str(), MNT_DETACH);
    }
  }

  // Until the coordinator's status shows a gang running (60 s).
  void WaitForARunningGang() {
    ASSERT_FALSE(cluster_.WaitForRunningGang(seconds(60)).empty())
        << cluster_.Logs();
  }

  uint64_t FreeBytes() const {
    struct statvfs info = {};
    if (statvfs(disk_.c_str(), &info) != 0) return 0;
    return static_cast<uint64_t>(info.f_bavail) * info.f_frsize;
  }

  std::string disk_;
  std::vector<std::string> mounts_;
};

TEST_F(DiskFullTest, AJobThatFillsTheDiskEndsCleanlyAndOthersGoOn) {
  const std::string flags = SharedDir("flags");
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project);
  auto job = [](const std::string& name, const std::string& script,
                const std::string& after_script = "") {
    return GangJobYaml(
        {.name = name, .script = script, .after_script = after_script});
  };
  WriteFile(
      project + "/.gitlab-ci.yml",
      absl::StrCat(
          job("bystander",
              absl::StrCat("for i in $(seq 600); do ls ", flags,
                           " | grep -q full && break; sleep 0.1; done\n"
                           "ls ",
                           flags,
                           " | grep -q full || { echo never-full; exit 9; }\n"
                           "echo bystander-ran-on-a-full-disk\n"),
              // A stage that starts while the disk is full.
              "echo bystander-after-script-ran"),
          job("fill",
              absl::StrCat("dd if=/dev/zero of=\"$CI_PROJECT_DIR/"
                           "fill\" bs=1M 2>&1 | tail -n 1 || true\n"
                           "df -k \"$CI_PROJECT_DIR\" | tail -n 1\n"
                           "touch ",
                           flags,
                           "/full-$CI_NODE_INDEX\n"
                           // Takes every page freed meanwhile.
                           "for i in $(seq 900); do [ -e ",
                           flags,
                           "/release ] && break; cat /dev/zero >> "
                           "\"$CI_PROJECT_DIR/fill\" 2>/dev/null || true; "
                           "sleep 0.05; done\n"
                           "echo filled-the-disk\n")),
          job("next", "echo next-ran\n")));
  const uint64_t free_at_start = FreeBytes();

  std::unique_ptr<Subprocess> bystander =
      StartRunLocal(cluster_, project, "bystander", {"--pipeline-id", "300"});
  ASSERT_NE(bystander, nullptr);
  ASSERT_NO_FATAL_FAILURE(WaitForARunningGang());
  std::unique_ptr<Subprocess> filler =
      StartRunLocal(cluster_, project, "fill", {"--pipeline-id", "301"});
  ASSERT_NE(filler, nullptr);
  // The bystander ends (its last stages run) while the disk is full; the
  // filling job holds it full until then.
  CommandResult stood_by = FinishRun(*bystander, seconds(90));
  WriteFile(flags + "/release", "");
  CommandResult fill = FinishRun(*filler, seconds(90));
  for (int index = 1; index <= 2; ++index) {
    const std::string log = ReadFile(
        absl::StrCat(cluster_.run_dir(), "/logs/fill-", index, "-2.log"));
    EXPECT_THAT(log, HasSubstr("filled-the-disk")) << log;
  }
  // The job exits 0 after the disk was full: its exit reaches the
  // coordinator and the job succeeds.
  EXPECT_TRUE(fill.status.success()) << fill.output << cluster_.Logs();
  // Another gang's member, running on the same host meanwhile, is not
  // failed by it: its stages start on the full disk (the agent writes
  // their scripts into space it set aside).
  EXPECT_TRUE(stood_by.status.success()) << stood_by.output << cluster_.Logs();
  for (int index = 1; index <= 2; ++index) {
    const std::string log = ReadFile(
        absl::StrCat(cluster_.run_dir(), "/logs/bystander-", index, "-2.log"));
    EXPECT_THAT(log, HasSubstr("bystander-ran-on-a-full-disk")) << log;
    EXPECT_THAT(log, HasSubstr("\nbystander-after-script-ran"))
        << log << cluster_.Logs();
  }
  EXPECT_THAT(cluster_.Logs(), Not(HasSubstr("event=stage_rejected")))
      << cluster_.Logs();
  EXPECT_THAT(cluster_.Logs(), HasSubstr("event=disk_full"));
  // Teardown freed the space: the members' builds dirs are gone.
  EXPECT_TRUE(WaitFor([&] { return FreeBytes() + (4 << 20) >= free_at_start; },
                      seconds(10)))
      << "free " << FreeBytes() << " of " << free_at_start << " at start";
  // The agent goes on: the next gang runs there.
  CommandResult next =
      cluster_.RunLocal(project, "next", {"--pipeline-id", "302"}, seconds(90));
  EXPECT_TRUE(next.status.success()) << next.output << cluster_.Logs();
}

// With member_disk_max, a job that writes without end (here about 5 MB/s
// per member, like a job saving checkpoints in a loop) is stopped at its
// bound, long before it fills the disk, and a member of another gang on the
// same host writes its files (its checkout, its TMPDIR) and succeeds. The
// same small file system as DiskFullTest.
class DiskLimitTest : public DiskFullTest {
 protected:
  DiskLimitTest() {
    accounts_ = {"61095:61095", "61096:61096", "61097:61097", "61098:61098"};
    agent_yaml_ = "member_disk_max: 8M\n";
  }

  // Runs the 2-member gang `name`, whose `script` writes without end, beside
  // the 2-member gang "writer" (pipelines `pipeline` and `pipeline` + 1).
  // Once `name` is stopped (or, were it not, the disk is full) the writer
  // writes its checkout and TMPDIR. Expects the writer to succeed, `name`
  // to fail as a script does with the disk-limit line in a member's log,
  // and the space to be free again after.
  void ExpectStoppedBesideAWriter(const std::string& name,
                                  const std::string& script, int pipeline) {
    const std::string flags = SharedDir("flags");
    const std::string project = cluster_.dir().Sub("project");
    fs::create_directories(project);
    auto job = [](const std::string& job_name, const std::string& body) {
      return GangJobYaml({.name = job_name, .script = body});
    };
    WriteFile(
        project + "/.gitlab-ci.yml",
        absl::StrCat(
            job("writer",
                absl::StrCat(
                    "for i in $(seq 1200); do [ -e ", flags,
                    "/go ] && break; sleep 0.1; done\n"
                    "[ -e ",
                    flags,
                    "/go ] || { echo never-told; exit 9; }\n"
                    "dd if=/dev/zero of=\"$CI_PROJECT_DIR/data\" bs=1M "
                    "count=4 status=none || { echo checkout-write-failed; "
                    "exit 7; }\n"
                    "dd if=/dev/zero of=\"$TMPDIR/data\" bs=1M count=2 "
                    "status=none || { echo tmpdir-write-failed; exit 7; }\n"
                    "echo writer-wrote-its-files\n")),
            job(name, script)));

    std::unique_ptr<Subprocess> writer =
        StartRunLocal(cluster_, project, "writer",
                      {"--pipeline-id", std::to_string(pipeline)});
    ASSERT_NE(writer, nullptr);
    ASSERT_NO_FATAL_FAILURE(WaitForARunningGang());
    std::unique_ptr<Subprocess> filler =
        StartRunLocal(cluster_, project, name,
                      {"--pipeline-id", std::to_string(pipeline + 1)});
    ASSERT_NE(filler, nullptr);
    // The filling job was stopped (the first of its members stopped fails
    // its gang, which stops the other), or, without a bound, the disk is
    // full: the writer writes then.
    ASSERT_TRUE(WaitFor(
        [&] {
          return absl::StrContains(cluster_.Logs(),
                                   "event=member_disk_limit ") ||
                 FreeBytes() < (1 << 20);
        },
        seconds(60)))
        << "free " << FreeBytes() << cluster_.Logs();
    WriteFile(flags + "/go", "");
    CommandResult wrote = FinishRun(*writer, seconds(90));
    CommandResult fill = FinishRun(*filler, seconds(120));

    EXPECT_TRUE(wrote.status.success()) << wrote.output << cluster_.Logs();
    for (int index = 1; index <= 2; ++index) {
      const std::string log = ReadFile(
          absl::StrCat(cluster_.run_dir(), "/logs/writer-", index, "-2.log"));
      EXPECT_THAT(log, HasSubstr("writer-wrote-its-files")) << log;
    }
    // The filling job fails as a script does, the log of each member the
    // watch stopped ending in why.
    EXPECT_FALSE(fill.status.success()) << fill.output;
    EXPECT_THAT(fill.output, HasSubstr("script_failure")) << fill.output;
    EXPECT_THAT(fill.output, Not(HasSubstr("system_failure"))) << fill.output;
    const std::regex line(
        "\ngdt: disk limit: this member holds [0-9]+ bytes in /[^\n]*, "
        "above member_disk_max \\(8388608 bytes, in the agent's config\\); "
        "its processes were stopped\n");
    int stopped = 0;
    std::string logs;
    for (int index = 1; index <= 2; ++index) {
      const std::string log = ReadFile(absl::StrCat(
          cluster_.run_dir(), "/logs/", name, "-", index, "-2.log"));
      if (std::regex_search(log, line)) ++stopped;
      EXPECT_THAT(log, Not(HasSubstr("wrote-for-a-minute"))) << log;
      logs += log;
    }
    EXPECT_GE(stopped, 1) << logs;
    EXPECT_THAT(cluster_.Logs(), HasSubstr("event=member_disk_limit "));
    // Teardown freed the space.
    EXPECT_TRUE(WaitFor([&] { return FreeBytes() > (48 << 20); }, seconds(10)))
        << "free " << FreeBytes();
  }
};

TEST_F(DiskLimitTest, AJobThatWritesWithoutEndIsStoppedAndOthersWrite) {
  ExpectStoppedBesideAWriter(
      "fill",
      "for i in $(seq 450); do dd if=/dev/zero bs=1M count=1 "
      "status=none >> \"$CI_PROJECT_DIR/fill\" || true; "
      "sleep 0.2; done\n"
      "echo wrote-for-a-minute\n",
      310);
}

// Accounts of its own.
class DiskLimitOpenTest : public DiskLimitTest {
 protected:
  DiskLimitOpenTest() {
    accounts_ = {"61108:61108", "61109:61109", "61110:61110", "61111:61111"};
  }
};

// A job that deletes the file it writes to (while it keeps it open) leaves
// no name for the agent's walk to find; the space it takes counts all the
// same (found through its processes' descriptors): it is stopped at its
// bound, and a member of another gang writes its files and succeeds.
TEST_F(DiskLimitOpenTest, AJobWritingToAFileItDeletedIsStopped) {
  ASSERT_NO_FATAL_FAILURE(ExpectStoppedBesideAWriter(
      "hide",
      "exec 3>\"$TMPDIR/hidden\"\n"
      "rm \"$TMPDIR/hidden\"\n"
      "for i in $(seq 450); do dd if=/dev/zero bs=1M count=1 "
      "status=none >&3 || true; sleep 0.2; done\n"
      "echo wrote-for-a-minute\n",
      315));
  // What the agent counted was the deleted file's.
  const std::regex event(
      "event=member_disk_limit member=[^ ]+ bytes=[0-9]+ "
      "deleted_open_bytes=[1-9][0-9]{6,} ");
  EXPECT_TRUE(std::regex_search(cluster_.Logs(), event)) << cluster_.Logs();
}

// Accounts of its own.
class DiskLimitMapTest : public DiskLimitTest {
 protected:
  DiskLimitMapTest() {
    accounts_ = {"61120:61120", "61121:61121", "61122:61122", "61123:61123"};
  }
};

// A job that maps each file it writes, then closes and deletes it, holds
// their space with neither a name for the agent's walk nor a descriptor
// (Python's own mmap keeps a descriptor, so libc's is called): the space
// counts all the same (found through its processes' memory maps), it is
// stopped at its bound, and a member of another gang writes its files and
// succeeds.
TEST_F(DiskLimitMapTest, AJobMappingFilesItDeletedIsStopped) {
  ASSERT_NO_FATAL_FAILURE(ExpectStoppedBesideAWriter(
      "map",
      "python3 -c '\n"
      "import ctypes, os, time\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "libc.mmap.restype = ctypes.c_void_p\n"
      "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, "
      "ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
      "path = os.environ[\"TMPDIR\"] + \"/hidden\"\n"
      "for i in range(450):\n"
      "    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)\n"
      "    os.write(fd, bytes(1 << 20))\n"
      "    address = libc.mmap(None, 1 << 20, 1, 1, fd, 0)\n"
      "    if address in (None, ctypes.c_void_p(-1).value):\n"
      "        raise SystemExit(\"mmap: \" + os.strerror(ctypes.get_errno()))\n"
      "    os.close(fd)\n"
      "    os.unlink(path)\n"
      "    time.sleep(0.2)\n"
      "'\n"
      "echo wrote-for-a-minute\n",
      317));
  // What the agent counted was the deleted files'.
  const std::regex event(
      "event=member_disk_limit member=[^ ]+ bytes=[0-9]+ "
      "deleted_open_bytes=[1-9][0-9]{6,} ");
  EXPECT_TRUE(std::regex_search(cluster_.Logs(), event)) << cluster_.Logs();
}

// Accounts of its own, and its files in /tmp go even when the agent's
// teardown did not purge them (the test failed).
class DiskLimitTmpTest : public DiskLimitTest {
 protected:
  DiskLimitTmpTest() {
    accounts_ = {"61100:61100", "61101:61101", "61102:61102", "61103:61103"};
  }
  void TearDown() override {
    for (int index = 1; index <= 2; ++index) {
      std::error_code ignored;
      fs::remove(absl::StrCat(kTmpFile, index), ignored);
    }
    DiskLimitTest::TearDown();
  }
  // The file of member N is kTmpFile + N (its job id is 32000N).
  static constexpr const char* kTmpFile = "/tmp/gdt-disk-limit-32000";
};

// What a member's pool account writes into /tmp counts towards its bound
// too (not only its builds and scratch dirs), and it goes at teardown.
TEST_F(DiskLimitTmpTest, FilesOfItsAccountInTmpCount) {
  const std::string project = MakeProject(
      "dd if=/dev/zero of=/tmp/gdt-disk-limit-$CI_JOB_ID bs=1M count=12 "
      "status=none\n"
      "for i in $(seq 300); do sleep 0.1; done\n"
      "echo kept-12M-in-tmp\n");
  CommandResult run = cluster_.RunLocal(project, "train",
                                        {"--pipeline-id", "320"}, seconds(90));
  EXPECT_FALSE(run.status.success()) << run.output;
  // The first member stopped fails the gang; the other one may be stopped
  // for that before the watch gets to it.
  int stopped = 0;
  for (int index = 1; index <= 2; ++index) {
    const std::string log = MemberLogOf(cluster_, index);
    if (absl::StrContains(log,
                          "its account's files in /dev/shm, /tmp, "
                          "/var/tmp, above member_disk_max")) {
      ++stopped;
    }
    EXPECT_THAT(log, Not(HasSubstr("kept-12M-in-tmp"))) << log;
    EXPECT_FALSE(fs::exists(absl::StrCat(kTmpFile, index))) << "left in /tmp";
  }
  EXPECT_GE(stopped, 1) << MemberLogOf(cluster_, 1) << MemberLogOf(cluster_, 2);
}

// The agent's own API, called directly: an agent without host tokens takes
// calls from anyone, yet it creates and deletes only under its builds root.
TEST(IsolationApiTest, BuildsDirOutsideTheRootIsRefusedAndNothingElseDeleted) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  const std::string victim = cluster.dir().Sub("victim");
  fs::create_directories(victim);
  WriteFile(victim + "/precious", "keep me\n");
  const std::string builds = cluster.dir().Sub("builds");
  const std::string existing = builds + "/not-made-by-the-agent";
  fs::create_directories(existing);
  WriteFile(existing + "/precious", "keep me too\n");
  // A link inside the root that leads out of it.
  fs::create_directory_symlink(victim, builds + "/link");
  rendezvous::AgentClient agent(cluster.AgentEndpoint(0));

  for (const std::string& outside : {victim, builds + "/../victim", builds}) {
    v1::SetupMemberRequest setup;
    setup.set_member_id("attacker");
    setup.set_builds_dir(outside);
    const absl::Status status = agent.SetupMember(setup, seconds(10));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << outside << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("builds_root")) << status;
  }
  // A dir under the root that the agent did not create is used, not owned.
  v1::SetupMemberRequest setup;
  setup.set_member_id("attacker");
  setup.set_builds_dir(existing);
  EXPECT_TRUE(agent.SetupMember(setup, seconds(10)).ok());
  v1::TeardownMemberRequest teardown;
  teardown.set_member_id("attacker");
  teardown.set_remove_builds_dir(true);
  EXPECT_TRUE(agent.TeardownMember(teardown, seconds(10)).ok());

  EXPECT_EQ(ReadFile(victim + "/precious"), "keep me\n");
  EXPECT_EQ(ReadFile(existing + "/precious"), "keep me too\n");
  // What it did create, it removes.
  setup.set_member_id("member");
  setup.set_builds_dir(builds + "/made-by-the-agent");
  ASSERT_TRUE(agent.SetupMember(setup, seconds(10)).ok());
  EXPECT_TRUE(fs::is_directory(builds + "/made-by-the-agent"));
  teardown.set_member_id("member");
  EXPECT_TRUE(agent.TeardownMember(teardown, seconds(10)).ok());
  EXPECT_FALSE(fs::exists(builds + "/made-by-the-agent"));
}

// A job that tries to bind every port of the host's master_port_range
// (here all 40 of the test coordinator's), on IPv4 and IPv6, gets only the
// master port leased to its own gang: every other bind is refused with
// EPERM by its cgroup's bind program. Another gang whose rank 0 is placed
// on the same host meanwhile is leased a port at once, and its rank 0
// binds it.
class MasterPortSquatTest : public IsolationTest {
 protected:
  void SetUp() override {
    accounts_ = {"61041:61041", "61042:61042", "61043:61043", "61044:61044"};
    cpu_slots_ = 4;
    IsolationTest::SetUp();
  }
};

TEST_F(MasterPortSquatTest, AJobCannotBindTheMasterPortsOfOtherGangs) {
  const int first_port = TestMasterPortBase();
  const std::string flags = SharedDir("flags");
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project);
  const std::string squat = absl::StrCat(
      "python3 -c '\n"
      "      import errno, socket, time, os\n"
      "      held, refused = [], 0\n"
      "      for p in range(",
      first_port, ", ", first_port + 40,
      "):\n"
      "          for fam in (socket.AF_INET, socket.AF_INET6):\n"
      "              s = socket.socket(fam)\n"
      "              try:\n"
      "                  s.bind((\"::\" if fam == socket.AF_INET6 else "
      "\"0.0.0.0\", p)); s.listen(); held.append(s)\n"
      "              except OSError as e:\n"
      "                  refused += e.errno == errno.EPERM\n"
      "      print(\"squatting\", len(held), \"refused\", refused, "
      "flush=True)\n"
      "      open(\"",
      flags,
      "/squatting\", \"w\").close()\n"
      "      for i in range(600):\n"
      "          if os.path.exists(\"",
      flags,
      "/release\"): break\n"
      "          time.sleep(0.1)\n"
      "      '\n");
  const std::string bind_own =
      "python3 -c 'import os, socket; s = socket.socket(socket.AF_INET6); "
      "s.bind((\"::\", int(os.environ[\"GDT_MASTER_PORT\"]))); "
      "print(\"victim bound its master port\")'";
  WriteFile(
      project + "/.gitlab-ci.yml",
      absl::StrCat("squat:\n"
                   "  timeout: 5 minutes\n"
                   "  variables:\n"
                   "    GDT_GPUS_PER_NODE: \"0\"\n"
                   "    GDT_LAUNCHER: none\n"
                   "  script:\n"
                   "    - |\n"
                   "      ",
                   squat,
                   GangJobYaml({.name = "victim",
                                .script = absl::StrCat(
                                    "echo \"victim rank $GDT_NODE_RANK port "
                                    "$GDT_MASTER_PORT\"\n"
                                    "if [ \"$GDT_NODE_RANK\" = 0 ]; then ",
                                    bind_own, "; fi\n")})));
  std::unique_ptr<Subprocess> squatter =
      StartRunLocal(cluster_, project, "squat", {"--pipeline-id", "400"});
  ASSERT_NE(squatter, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return fs::exists(flags + "/squatting"); }, seconds(60)))
      << cluster_.Logs();
  // The other gang runs while the squatter still holds what it could.
  std::unique_ptr<Subprocess> victim =
      StartRunLocal(cluster_, project, "victim", {"--pipeline-id", "401"});
  ASSERT_NE(victim, nullptr);
  CommandResult victimised = FinishRun(*victim, seconds(90));
  WriteFile(flags + "/release", "");
  CommandResult squatted = FinishRun(*squatter, seconds(90));
  EXPECT_TRUE(squatted.status.success()) << squatted.output;
  // Its own port on IPv4 (the dual-stack IPv6 bind of it then finds it
  // taken); the 39 others refused on both.
  EXPECT_THAT(squatted.output, HasSubstr("squatting 1 refused 78"));
  EXPECT_TRUE(victimised.status.success()) << victimised.output;
  EXPECT_THAT(victimised.output,
              Not(HasSubstr("waiting for a free master port")));
  EXPECT_THAT(victimised.output, HasSubstr("victim bound its master port"));
}

// A job of one gang cannot reach the master port of another gang that runs
// on the same host: torch's TCPStore there checks no credential, so whoever
// connects could read and write the other gang's rendezvous keys. Its own
// gang's master it reaches; the other gang finishes untouched.
class MasterPortConnectTest : public IsolationTest {
 protected:
  void SetUp() override {
    accounts_ = {"61061:61061", "61062:61062", "61063:61063", "61064:61064"};
    cpu_slots_ = 4;
    IsolationTest::SetUp();
  }
};

TEST_F(MasterPortConnectTest, AJobCannotConnectToAnotherGangsMasterPort) {
  if (absl::StrContains(cluster_.Logs(), "event=master_connect_guard_off")) {
    GTEST_SKIP() << "this kernel refuses the connect programs:\n"
                 << cluster_.Logs();
  }
  const std::string flags = SharedDir("flags");
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project);
  // The victim's rank 0 serves its master port until its rank 1 says
  // hello; anything else that arrives first fails the gang.
  WriteFile(flags + "/victim.py", absl::StrCat(R"(import os, socket, sys, time
flags = ")",
                                               flags, R"("
port = int(os.environ["GDT_MASTER_PORT"])
if os.environ["GDT_NODE_RANK"] == "0":
    s = socket.socket(socket.AF_INET6)
    s.bind(("::", port))
    s.listen()
    s.settimeout(120)
    with open(flags + "/victim_port.tmp", "w") as f:
        f.write(str(port))
    os.rename(flags + "/victim_port.tmp", flags + "/victim_port")
    while True:
        c, peer = s.accept()
        c.settimeout(30)
        data = c.recv(64)
        if data == b"rank1":
            print("victim rank 0 met its rank 1", flush=True)
            break
        if data:
            print("victim rank 0 got", data, "from", peer, flush=True)
            sys.exit(1)
else:
    deadline = time.time() + 120
    while not os.path.exists(flags + "/attacked") and time.time() < deadline:
        time.sleep(0.1)
    while True:
        try:
            c = socket.create_connection((os.environ["GDT_MASTER_ADDR"], port), 5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    c.sendall(b"rank1")
    print("victim rank 1 met its rank 0", flush=True)
)"));
  // The intruder tries every way to the victim's port, then its own
  // master (it is rank 0 of a gang of one).
  WriteFile(flags + "/intruder.py",
            absl::StrCat(R"(import errno, os, socket, time
flags = ")",
                         flags, R"("
deadline = time.time() + 120
while not os.path.exists(flags + "/victim_port") and time.time() < deadline:
    time.sleep(0.1)
port = int(open(flags + "/victim_port").read())
for kind, host in (("tcp", "127.0.0.1"), ("tcp", "::1"),
                   ("tcp", "::ffff:127.0.0.1"), ("tcp", "0.0.0.0"),
                   ("udp", "127.0.0.1")):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                      socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(10)
    try:
        if kind == "tcp":
            s.connect((host, port))
            s.sendall(b"intruder")
        else:
            s.sendto(b"intruder", (host, port))
        r = "reached"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    s.close()
    print("intruder", kind, host, r, flush=True)
own = int(os.environ["GDT_MASTER_PORT"])
server = socket.socket(socket.AF_INET6)
server.bind(("::", own))
server.listen()
socket.create_connection((os.environ["GDT_MASTER_ADDR"], own), 10).close()
print("intruder reached its own master", flush=True)
open(flags + "/attacked", "w").close()
)"));
  WriteFile(
      project + "/.gitlab-ci.yml",
      GangJobYaml({.name = "victim",
                   .script = absl::StrCat("python3 ", flags, "/victim.py")}) +
          GangJobYaml(
              {.name = "intruder",
               .script = absl::StrCat("python3 ", flags, "/intruder.py"),
               .members = 1}));
  std::unique_ptr<Subprocess> victim =
      StartRunLocal(cluster_, project, "victim", {"--pipeline-id", "410"});
  ASSERT_NE(victim, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return fs::exists(flags + "/victim_port"); }, seconds(90)))
      << cluster_.Logs();
  std::unique_ptr<Subprocess> intruder =
      StartRunLocal(cluster_, project, "intruder", {"--pipeline-id", "411"});
  ASSERT_NE(intruder, nullptr);
  CommandResult intruded = FinishRun(*intruder, seconds(90));
  WriteFile(flags + "/attacked", "");
  CommandResult victimised = FinishRun(*victim, seconds(90));
  EXPECT_TRUE(intruded.status.success()) << intruded.output;
  for (const char* way : {"tcp 127.0.0.1", "tcp ::1", "tcp ::ffff:127.0.0.1",
                          "tcp 0.0.0.0", "udp 127.0.0.1"}) {
    EXPECT_THAT(intruded.output,
                HasSubstr(absl::StrCat("intruder ", way, " EPERM")));
  }
  EXPECT_THAT(intruded.output, HasSubstr("intruder reached its own master"));
  EXPECT_TRUE(victimised.status.success()) << victimised.output;
  EXPECT_THAT(victimised.output, HasSubstr("victim rank 0 met its rank 1"));
  EXPECT_THAT(victimised.output, Not(HasSubstr("victim rank 0 got")));
}

// Job variables named like the loader's, the shell's or the search path
// (LD_PRELOAD, BASH_ENV, PATH) reach the job's own scripts only: no process
// of gdt or run-local that runs with more privilege (the executor, run-local
// itself, the agent's own commands, the upload and download stages' helpers
// as root) loads, sources or runs what they name.
class JobEnvironmentInjectionTest : public IsolationTest {
 protected:
  void SetUp() override {
    accounts_ = {"61045:61045", "61046:61046"};
    IsolationTest::SetUp();
  }
};

TEST_F(JobEnvironmentInjectionTest, VariablesReachOnlyTheJobsOwnProcesses) {
  const std::string flags = SharedDir("flags");
  const std::string bin = flags + "/bin";
  fs::create_directories(bin);
  chmod(bin.c_str(), 0755);
  // Each fake records who ran it, then runs the real command.
  for (const char* name :
       {"cp", "mkdir", "rm", "find", "ps", "py-spy", "git", "chmod", "cat"}) {
    const std::string fake = absl::StrCat(bin, "/", name);
    WriteFile(fake, absl::StrCat("#!/bin/sh\necho \"", name,
                                 " $(/usr/bin/id -u)\" >> ", flags,
                                 "/ran\nPATH=/usr/bin:/bin exec ", name,
                                 " \"$@\"\n"));
    chmod(fake.c_str(), 0755);
  }
  // Every member (and anything else) may append its records.
  WriteFile(flags + "/ran", "");
  chmod((flags + "/ran").c_str(), 0666);
  const std::string bash_env = flags + "/bash_env";
  WriteFile(bash_env, absl::StrCat("echo \"bash_env $(/usr/bin/id -u)\" >> ",
                                   flags, "/ran\n"));
  chmod(bash_env.c_str(), 0644);
  const std::string preload = flags + "/no-such-gdt-probe.so";
  const std::string project = MakeProject(
      "echo \"script uid $(id -u) path $PATH\"\n"
      "echo made > artifact.txt\n"
      "bash -c true\n",
      absl::StrCat("    LD_PRELOAD: ", preload, "\n    BASH_ENV: ", bash_env,
                   "\n    PATH: ", bin, ":/usr/local/bin:/usr/bin:/bin\n",
                   "  artifacts:\n    paths: [artifact.txt]\n"));

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  EXPECT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  EXPECT_THAT(run.output, HasSubstr("script uid 6104"));
  // The job's own processes saw its variables (its shells read BASH_ENV)...
  const std::string ran = ReadFile(flags + "/ran");
  EXPECT_THAT(ran, HasSubstr("bash_env 61045")) << ran;
  EXPECT_THAT(ran, HasSubstr("bash_env 61046")) << ran;
  EXPECT_THAT(run.output, HasSubstr("no-such-gdt-probe.so")) << run.output;
  // ...and nothing else did: no record of root, and no process of gdt or
  // run-local complained about the preload library (each would).
  for (absl::string_view line : absl::StrSplit(ran, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::EndsWith(line, " 61045") ||
                absl::EndsWith(line, " 61046"))
        << line << "\n"
        << ran;
  }
  EXPECT_THAT(cluster_.Logs(), Not(HasSubstr("no-such-gdt-probe")));
}

}  // namespace
}  // namespace gdt::test
