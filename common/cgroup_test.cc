#include "common/cgroup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/device_nodes.h"
#include "testing/free_ports.h"

namespace gdt {
namespace {

using std::chrono::seconds;
using std::chrono::steady_clock;

// A tree of this test's own below the process's cgroup, or a skip saying
// why there is none.
class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> own = OwnCgroupDir();
    if (!own.ok()) GTEST_SKIP() << "no cgroup v2 here: " << own.status();
    parent_ = absl::StrCat(*own, "/gdt-cgroup-test-", getpid());
    absl::StatusOr<std::unique_ptr<CgroupTree>> tree =
        CgroupTree::Open(parent_);
    if (!tree.ok()) {
      GTEST_SKIP() << "cgroup v2 is not writable for this user: "
                   << tree.status();
    }
    tree_ = std::move(*tree);
  }
  void TearDown() override {
    if (tree_ != nullptr) tree_->RemoveParent();
  }

  std::string parent_;
  std::unique_ptr<CgroupTree> tree_;
};

TEST_F(CgroupTest, DestroyEndsProcessesThatLeftTheirGroupAndRemovesIt) {
  absl::StatusOr<std::string> dir = tree_->Create("member");
  ASSERT_TRUE(dir.ok()) << dir.status();
  SpawnOptions spawn;
  // The shell leaves a session-leading sleep behind and exits at once.
  spawn.argv = {"/bin/sh", "-c",
                "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"};
  spawn.env = {{"PATH", "/usr/bin:/bin"}};
  spawn.cgroup_procs = *dir + "/cgroup.procs";
  absl::StatusOr<std::unique_ptr<Subprocess>> shell = Subprocess::Spawn(spawn);
  ASSERT_TRUE(shell.ok()) << shell.status();
  std::string output;
  const ExitStatus exit = (*shell)->Wait(
      [&](OutputSource, std::string_view data) { output.append(data); });
  ASSERT_TRUE(exit.success()) << output;
  const pid_t escaped = std::stoi(output);
  ASSERT_EQ(kill(escaped, 0), 0) << "the sleep should still run";
  EXPECT_EQ(tree_->Children(), std::vector<std::string>{"member"});

  absl::StatusOr<size_t> killed =
      tree_->Destroy("member", steady_clock::now() + seconds(10));

  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1u);
  EXPECT_FALSE(std::filesystem::exists(*dir));
  EXPECT_TRUE(tree_->Children().empty());
  // Gone or a zombie of init's, no longer running.
  const std::string stat = [&] {
    std::ifstream file(absl::StrCat("/proc/", escaped, "/stat"));
    std::string text;
    std::getline(file, text);
    return text;
  }();
  EXPECT_TRUE(stat.empty() || stat.find(") Z ") != std::string::npos) << stat;
  // Again: nothing there, nothing to do.
  EXPECT_EQ(
      tree_->Destroy("member", steady_clock::now() + seconds(1)).value_or(9),
      0u);
}

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST_F(CgroupTest, PidsLimitCapsAMembersProcessesWhereTheControllerIsThere) {
  const absl::Status limited = tree_->LimitPids(16);
  absl::StatusOr<std::string> dir = tree_->Create("member");
  ASSERT_TRUE(dir.ok()) << dir.status();

  if (!limited.ok()) {
    // Refused only where no level up to the hierarchy's root offers the
    // controller (it is bound to cgroup v1, as on hybrid hosts); members
    // then start without a limit.
    EXPECT_EQ(limited.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(limited.message()),
                ::testing::HasSubstr("pids controller"));
    for (std::filesystem::path level = parent_;
         std::filesystem::exists(level / "cgroup.controllers");
         level = level.parent_path()) {
      EXPECT_THAT(ReadAll((level / "cgroup.controllers").string()),
                  ::testing::Not(::testing::HasSubstr("pids")))
          << level;
      if (level == level.parent_path()) break;
    }
    EXPECT_EQ(tree_->pids_max(), 0u);
    EXPECT_FALSE(std::filesystem::exists(*dir + "/pids.max"));
  } else {
    EXPECT_EQ(tree_->pids_max(), 16u);
    EXPECT_EQ(ReadAll(*dir + "/pids.max"), "16\n");
    // A fork bomb in the member stops at the limit.
    SpawnOptions spawn;
    spawn.argv = {"/bin/sh", "-c",
                  "i=0; while [ $i -lt 40 ]; do sleep 60 & i=$((i+1)); done"};
    spawn.env = {{"PATH", "/usr/bin:/bin"}};
    spawn.cgroup_procs = *dir + "/cgroup.procs";
    absl::StatusOr<std::unique_ptr<Subprocess>> shell =
        Subprocess::Spawn(spawn);
    ASSERT_TRUE(shell.ok()) << shell.status();
    const ExitStatus exit = (*shell)->Wait();
    EXPECT_FALSE(exit.success()) << "40 forks succeeded under pids.max 16";
    EXPECT_THAT(ReadAll(*dir + "/pids.events"),
                ::testing::Not(::testing::HasSubstr("max 0")));
  }
  absl::StatusOr<size_t> killed =
      tree_->Destroy("member", steady_clock::now() + seconds(10));
  EXPECT_TRUE(killed.ok()) << killed.status();
}

TEST_F(CgroupTest,
       MemoryLimitKillsAMemberThatExceedsItWhereTheControllerIsThere) {
  const absl::Status limited = tree_->LimitMemory(32 << 20);
  absl::StatusOr<std::string> dir = tree_->Create("member");
  ASSERT_TRUE(dir.ok()) << dir.status();

  if (!limited.ok()) {
    // Refused only where no level up to the hierarchy's root offers the
    // controller; members then start without a memory limit.
    EXPECT_EQ(limited.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(limited.message()),
                ::testing::HasSubstr("memory controller"));
    EXPECT_EQ(tree_->memory_max(), 0u);
  } else {
    EXPECT_EQ(tree_->memory_max(), 32u << 20);
    EXPECT_EQ(ReadAll(*dir + "/memory.max"), absl::StrCat(32 << 20, "\n"));
    EXPECT_EQ(ReadAll(*dir + "/memory.oom.group"), "1\n");
    // A member that touches 256 MiB is killed by the kernel (SIGKILL), all
    // of it (the shell too), and memory.events counts the kill.
    SpawnOptions spawn;
    spawn.argv = {"/bin/sh", "-c",
                  "dd if=/dev/zero of=/dev/null bs=256M count=1 "
                  "2>/dev/null; echo survived"};
    spawn.env = {{"PATH", "/usr/bin:/bin"}};
    spawn.cgroup_procs = *dir + "/cgroup.procs";
    absl::StatusOr<std::unique_ptr<Subprocess>> shell =
        Subprocess::Spawn(spawn);
    ASSERT_TRUE(shell.ok()) << shell.status();
    std::string output;
    const ExitStatus exit =
        (*shell)
            ->WaitUntil(steady_clock::now() + seconds(60),
                        [&](OutputSource, std::string_view data) {
                          output.append(data);
                        })
            .value_or(ExitStatus{});
    EXPECT_EQ(exit.signal, SIGKILL) << output;
    EXPECT_THAT(output, ::testing::Not(::testing::HasSubstr("survived")));
    EXPECT_THAT(ReadAll(*dir + "/memory.events"),
                ::testing::Not(::testing::HasSubstr("oom_kill 0")));
  }
  absl::StatusOr<size_t> killed =
      tree_->Destroy("member", steady_clock::now() + seconds(10));
  EXPECT_TRUE(killed.ok()) << killed.status();
}

TEST_F(CgroupTest, GuardedDevicesOpenOnlyWhereAllowed) {
  if (geteuid() != 0) GTEST_SKIP() << "making device nodes needs root";
  const uint32_t major = gdt::testing::UnusedCharMajor();
  ASSERT_NE(major, 0u) << "no free character major in 234..254";
  char dir_template[] = "/tmp/gdt-devices-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string nodes = dir_template;
  const std::string gpu0 = nodes + "/gpu0";
  const std::string gpu1 = nodes + "/gpu1";
  ASSERT_EQ(mknod(gpu0.c_str(), S_IFCHR | 0666, makedev(major, 0)), 0);
  ASSERT_EQ(mknod(gpu1.c_str(), S_IFCHR | 0666, makedev(major, 1)), 0);
  ASSERT_EQ(CharDeviceOf(gpu1).value_or(DeviceNumber{}),
            (DeviceNumber{major, 1}));
  EXPECT_EQ(CharDeviceOf(nodes).status().code(),
            absl::StatusCode::kFailedPrecondition);

  const absl::Status guarded =
      tree_->GuardDevices({{major, 1}, {major, 0}, {major, 1}});
  ASSERT_TRUE(guarded.ok()) << guarded;
  EXPECT_EQ(tree_->guarded_devices(),
            (std::vector<DeviceNumber>{{major, 0}, {major, 1}}));
  EXPECT_TRUE(tree_->Children().empty()) << "the probe cgroup is left";
  absl::StatusOr<std::string> dir = tree_->Create("member");
  ASSERT_TRUE(dir.ok()) << dir.status();

  // What a process in the member sees opening each node, and /dev/null.
  auto opens = [&] {
    SpawnOptions spawn;
    spawn.argv = {"/bin/sh", "-c",
                  "for d in \"$0\" \"$1\" /dev/null; do "
                  "(exec 3<\"$d\") 2>/dev/null && echo \"$d: opened\" || "
                  "cat \"$d\" 2>&1 | sed 's/.*: //'; done",
                  gpu0, gpu1};
    spawn.env = {{"PATH", "/usr/bin:/bin"}, {"LC_ALL", "C"}};
    spawn.cgroup_procs = *dir + "/cgroup.procs";
    absl::StatusOr<std::unique_ptr<Subprocess>> shell =
        Subprocess::Spawn(spawn);
    EXPECT_TRUE(shell.ok()) << shell.status();
    if (!shell.ok()) return std::string();
    std::string output;
    (*shell)->Wait(
        [&](OutputSource, std::string_view data) { output.append(data); });
    return output;
  };
  const std::string refused = "Operation not permitted\n";
  const std::string passed = "No such device or address\n";  // No driver.
  const std::string null_ok = "/dev/null: opened\n";
  EXPECT_EQ(opens(), refused + refused + null_ok) << "a new member";

  ASSERT_TRUE(tree_->AllowDevices("member", {{major, 0}}).ok());
  EXPECT_EQ(opens(), passed + refused + null_ok) << "allowed GPU 0";
  ASSERT_TRUE(tree_->AllowDevices("member", {{major, 1}}).ok());
  EXPECT_EQ(opens(), refused + passed + null_ok) << "allowed GPU 1 instead";

  // Outside the member nothing is refused.
  std::string outside;
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", "cat \"$0\" 2>&1 | sed 's/.*: //'", gpu1};
  spawn.env = {{"PATH", "/usr/bin:/bin"}, {"LC_ALL", "C"}};
  absl::StatusOr<std::unique_ptr<Subprocess>> shell = Subprocess::Spawn(spawn);
  ASSERT_TRUE(shell.ok()) << shell.status();
  (*shell)->Wait(
      [&](OutputSource, std::string_view data) { outside.append(data); });
  EXPECT_EQ(outside, passed);

  EXPECT_TRUE(tree_->Destroy("member", steady_clock::now() + seconds(10)).ok());
  std::filesystem::remove_all(nodes);
}

// What binding each of `targets` ("4 <host> <port>" or "6 <host> <port>")
// gives a process in `cgroup_procs` (empty = outside every member): "ok" or
// the errno's name, one line per target.
std::string BindsFrom(const std::string& cgroup_procs,
                      const std::vector<std::string>& targets) {
  SpawnOptions spawn;
  spawn.argv = {"python3", "-c",
                "import errno, socket, sys\n"
                "for t in sys.argv[1:]:\n"
                "    fam, host, port = t.split()\n"
                "    s = socket.socket(socket.AF_INET6 if fam == '6' else "
                "socket.AF_INET)\n"
                "    try:\n"
                "        s.bind((host, int(port))); r = 'ok'\n"
                "    except OSError as e:\n"
                "        r = errno.errorcode.get(e.errno, str(e.errno))\n"
                "    s.close()\n"
                "    print(t, r)\n"};
  spawn.argv.insert(spawn.argv.end(), targets.begin(), targets.end());
  spawn.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"LC_ALL", "C"}};
  spawn.cgroup_procs = cgroup_procs;
  absl::StatusOr<std::unique_ptr<Subprocess>> python = Subprocess::Spawn(spawn);
  EXPECT_TRUE(python.ok()) << python.status();
  if (!python.ok()) return std::string();
  std::string output;
  (*python)->Wait(
      [&](OutputSource, std::string_view data) { output.append(data); });
  return output;
}

TEST_F(CgroupTest, GuardedPortsAreRefusedToBindExceptTheAllowedOne) {
  if (absl::Status check = tree_->CheckPortGuard(); !check.ok()) {
    ASSERT_NE(geteuid(), 0u) << check;
    GTEST_SKIP() << "bind programs need privilege: " << check;
  }
  EXPECT_TRUE(tree_->Children().empty()) << "the probe cgroup is left";
  // The middle of a range of 9 free ports.
  const int first = test::FreePortRange(9);
  ASSERT_NE(first, 0) << "no 9 free ports in a row";
  const int port = first + 4;
  const PortRange range{static_cast<uint16_t>(port - 4),
                        static_cast<uint16_t>(port + 4)};
  const std::string leased = absl::StrCat(port);
  const std::string other = absl::StrCat(port - 4);
  const std::string last = absl::StrCat(port + 4);
  // Each family and address form, on the range's ends, on the allowed port
  // and on port 0.
  const std::vector<std::string> targets = {
      "4 0.0.0.0 " + other,           "4 127.0.0.1 " + last,   "6 :: " + other,
      "6 ::ffff:127.0.0.1 " + last,   "4 127.0.0.1 " + leased, "6 :: " + leased,
      "6 ::ffff:127.0.0.1 " + leased, "4 0.0.0.0 0",           "6 :: 0"};
  auto expect = [&](const std::vector<std::string>& results) {
    std::string text;
    for (size_t i = 0; i < targets.size(); ++i) {
      absl::StrAppend(&text, targets[i], " ", results[i], "\n");
    }
    return text;
  };

  absl::StatusOr<std::string> dir = tree_->Create("member");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string procs = *dir + "/cgroup.procs";
  ASSERT_TRUE(tree_
                  ->GuardPorts("member", {.range = range,
                                          .bind = static_cast<uint16_t>(port)})
                  .ok());
  EXPECT_EQ(BindsFrom(procs, targets),
            expect({"EPERM", "EPERM", "EPERM", "EPERM", "ok", "ok", "ok", "ok",
                    "ok"}))
      << "the member's own port only";

  // Another port allowed instead: the first one is refused now.
  ASSERT_TRUE(
      tree_->GuardPorts("member", {.range = range, .bind = range.first}).ok());
  EXPECT_EQ(BindsFrom(procs, targets),
            expect({"ok", "EPERM", "ok", "EPERM", "EPERM", "EPERM", "EPERM",
                    "ok", "ok"}))
      << "the range's first port allowed";

  // None allowed; ports outside the range stay open.
  ASSERT_TRUE(tree_->GuardPorts("member", {.range = range}).ok());
  EXPECT_EQ(BindsFrom(procs, targets),
            expect({"EPERM", "EPERM", "EPERM", "EPERM", "EPERM", "EPERM",
                    "EPERM", "ok", "ok"}))
      << "no port allowed";
  EXPECT_EQ(
      tree_->GuardPorts("member", {.range = {range.last, range.first}}).code(),
      absl::StatusCode::kInvalidArgument);

  // Outside the member nothing is refused.
  EXPECT_EQ(BindsFrom("", targets),
            expect({"ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok"}));

  EXPECT_TRUE(tree_->Destroy("member", steady_clock::now() + seconds(10)).ok());
}

TEST_F(CgroupTest, SpawnIntoAMissingCgroupFails) {
  SpawnOptions spawn;
  spawn.argv = {"/bin/true"};
  spawn.cgroup_procs = parent_ + "/absent/cgroup.procs";
  EXPECT_FALSE(Subprocess::Spawn(spawn).ok());
}

// What connecting over TCP ("t4"/"t6" <host> <port>) or sending a UDP
// datagram ("u4"/"u6") to each of `targets` gives a process in
// `cgroup_procs` (empty = outside every member): "ok" or the errno's name,
// one line per target.
std::string ConnectsFrom(const std::string& cgroup_procs,
                         const std::vector<std::string>& targets) {
  SpawnOptions spawn;
  spawn.argv = {"python3", "-c",
                "import errno, socket, sys\n"
                "for t in sys.argv[1:]:\n"
                "    kind, host, port = t.split()\n"
                "    s = socket.socket(socket.AF_INET6 if kind[1] == '6' else "
                "socket.AF_INET, socket.SOCK_STREAM if kind[0] == 't' else "
                "socket.SOCK_DGRAM)\n"
                "    s.settimeout(10)\n"
                "    try:\n"
                "        if kind[0] == 't':\n"
                "            s.connect((host, int(port)))\n"
                "        else:\n"
                "            s.sendto(b'x', (host, int(port)))\n"
                "        r = 'ok'\n"
                "    except OSError as e:\n"
                "        r = errno.errorcode.get(e.errno, str(e.errno))\n"
                "    s.close()\n"
                "    print(t, r)\n"};
  spawn.argv.insert(spawn.argv.end(), targets.begin(), targets.end());
  spawn.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"LC_ALL", "C"}};
  spawn.cgroup_procs = cgroup_procs;
  absl::StatusOr<std::unique_ptr<Subprocess>> python = Subprocess::Spawn(spawn);
  EXPECT_TRUE(python.ok()) << python.status();
  if (!python.ok()) return std::string();
  std::string output;
  (*python)->Wait(
      [&](OutputSource, std::string_view data) { output.append(data); });
  return output;
}

// A dual-stack TCP listener on `port` (0 = one the kernel picks); returns
// its port, or 0 when the port is taken.
int Listen(int port, std::vector<int>& fds) {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  const int no = 0;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return 0;
  }
  fds.push_back(fd);
  return ntohs(address.sin6_port);
}

TEST_F(CgroupTest, GuardedPortsAreReachedOnlyAtTheAllowedEndpoint) {
  if (absl::Status check = tree_->CheckConnectGuard(); !check.ok()) {
    ASSERT_NE(geteuid(), 0u) << check;
    GTEST_SKIP() << "connect programs need privilege: " << check;
  }
  // Listeners (outside the member) on the middle and both ends of a range
  // of 9 free ports, and on one port outside it.
  std::vector<int> fds;
  const int free_ports = test::FreePortRange(9);
  ASSERT_NE(free_ports, 0) << "no 9 free ports in a row";
  const int port = free_ports + 4;
  ASSERT_EQ(Listen(port, fds), port) << "taken meanwhile";
  const PortRange range{static_cast<uint16_t>(port - 4),
                        static_cast<uint16_t>(port + 4)};
  ASSERT_EQ(Listen(range.first, fds), range.first) << "taken meanwhile";
  ASSERT_EQ(Listen(range.last, fds), range.last) << "taken meanwhile";
  int outside = 0;
  while (outside == 0 || (outside >= range.first && outside <= range.last)) {
    outside = Listen(0, fds);
    ASSERT_NE(outside, 0);
  }
  const std::string leased = absl::StrCat(" ", port);
  const std::string first = absl::StrCat(" ", range.first);
  const std::string last = absl::StrCat(" ", range.last);
  const std::string free = absl::StrCat(" ", outside);
  const std::vector<std::string> targets = {"t4 127.0.0.1" + leased,
                                            "t4 127.0.0.2" + leased,
                                            "t6 ::1" + leased,
                                            "t6 ::ffff:127.0.0.1" + leased,
                                            "t4 0.0.0.0" + leased,
                                            "t6 ::" + leased,
                                            "t4 127.0.0.1" + first,
                                            "t6 ::1" + last,
                                            "t6 ::ffff:127.0.0.1" + first,
                                            "u4 127.0.0.1" + leased,
                                            "u6 ::1" + last,
                                            "u6 ::ffff:127.0.0.1" + first,
                                            "t4 127.0.0.1" + free,
                                            "t6 ::1" + free,
                                            "u4 127.0.0.1" + free};
  auto expect = [&](const std::string& results) {
    std::vector<std::string> each = absl::StrSplit(results, ' ');
    EXPECT_EQ(each.size(), targets.size());
    std::string text;
    for (size_t i = 0; i < targets.size() && i < each.size(); ++i) {
      absl::StrAppend(&text, targets[i], " ", each[i], "\n");
    }
    return text;
  };
  auto prefixes = [](const std::vector<std::string>& texts) {
    std::vector<IpPrefix> out;
    for (const std::string& text : texts) {
      absl::StatusOr<IpPrefix> prefix = ParseIpPrefix(text);
      EXPECT_TRUE(prefix.ok()) << prefix.status();
      if (prefix.ok()) out.push_back(*prefix);
    }
    return out;
  };

  absl::StatusOr<std::string> dir = tree_->Create("member");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string procs = *dir + "/cgroup.procs";
  const uint16_t own = static_cast<uint16_t>(port);
  ASSERT_TRUE(tree_
                  ->GuardPorts("member",
                               {.range = range,
                                .connect = own,
                                .connect_to = prefixes({"127.0.0.0/8", "::1"})})
                  .ok());
  EXPECT_EQ(ConnectsFrom(procs, targets),
            expect("ok ok ok ok EPERM EPERM EPERM EPERM EPERM ok EPERM EPERM "
                   "ok ok ok"))
      << "the member's own master at loopback only";

  // Its master elsewhere: the same port here is another gang's.
  ASSERT_TRUE(
      tree_
          ->GuardPorts("member", {.range = range,
                                  .bind = own,
                                  .connect = own,
                                  .connect_to = prefixes({"192.0.2.7"})})
          .ok());
  EXPECT_EQ(ConnectsFrom(procs, targets),
            expect("EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM "
                   "EPERM EPERM EPERM ok ok ok"))
      << "the master on another host";

  // An IPv6 prefix that is not a whole address (:: and ::1).
  ASSERT_TRUE(tree_
                  ->GuardPorts("member", {.range = range,
                                          .connect = own,
                                          .connect_to = prefixes({"::/127"})})
                  .ok());
  EXPECT_EQ(ConnectsFrom(procs, targets),
            expect("EPERM EPERM ok EPERM EPERM ok EPERM EPERM EPERM EPERM "
                   "EPERM EPERM ok ok ok"))
      << "::/127";

  // Any address for the port; then none at all.
  ASSERT_TRUE(
      tree_->GuardPorts("member", {.range = range, .connect = range.last})
          .ok());
  EXPECT_EQ(ConnectsFrom(procs, targets),
            expect("EPERM EPERM EPERM EPERM EPERM EPERM EPERM ok EPERM EPERM "
                   "ok EPERM ok ok ok"))
      << "the last port at any address";
  ASSERT_TRUE(tree_->GuardPorts("member", {.range = range}).ok());
  EXPECT_EQ(ConnectsFrom(procs, targets),
            expect("EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM EPERM "
                   "EPERM EPERM EPERM ok ok ok"))
      << "no port allowed";
  // A kernel without the connect programs: binds only.
  ASSERT_TRUE(
      tree_->GuardPorts("member", {.range = range, .connections = false}).ok());
  EXPECT_EQ(ConnectsFrom(procs, targets),
            expect("ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok"))
      << "connections not guarded";
  EXPECT_EQ(BindsFrom(procs, {"4 127.0.0.1" + first}),
            absl::StrCat("4 127.0.0.1", first, " EPERM\n"));
  IpPrefix bad = *ParseIpPrefix("10.0.0.0/8");
  bad.length = 33;
  EXPECT_EQ(
      tree_
          ->GuardPorts("member",
                       {.range = range, .connect = own, .connect_to = {bad}})
          .code(),
      absl::StatusCode::kInvalidArgument);

  // Outside the member nothing is refused.
  EXPECT_EQ(ConnectsFrom("", targets),
            expect("ok ok ok ok ok ok ok ok ok ok ok ok ok ok ok"));

  EXPECT_TRUE(tree_->Destroy("member", steady_clock::now() + seconds(10)).ok());
  for (const int fd : fds) close(fd);
}

TEST(IpPrefixTest, ParsesAddressesWithAndWithoutALength) {
  absl::StatusOr<IpPrefix> loopback = ParseIpPrefix("127.0.0.0/8");
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_FALSE(loopback->ipv6);
  EXPECT_EQ(loopback->length, 8);
  EXPECT_EQ(FormatIpPrefix(*loopback), "127.0.0.0/8");
  EXPECT_EQ(FormatIpPrefix(*ParseIpPrefix("::1")), "::1/128");
  EXPECT_EQ(FormatIpPrefix(*ParseIpPrefix("192.0.2.1")), "192.0.2.1/32");
  for (const char* bad : {"", "host", "10.0.0.0/33", "10.0.0.0/0", "::/129",
                          "::1/x", "1.2.3.4/"}) {
    EXPECT_EQ(ParseIpPrefix(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace gdt
