// The operator's gdt-coord as a user runs it (the real binary through
// /bin/sh) against a real in-process coordinator on loopback: what each
// command prints and its exit code, over a slow link too.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/operator_input.h"
#include "testing/cli_run.h"
#include "testing/coordinator_fixture.h"

namespace gdt::test {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kAdminToken[] = "admin-secret-for-cli-tests";

// A loopback TCP proxy that holds every chunk `delay` before passing it on,
// each way: a far-away coordinator (round trip 2 * delay).
class DelayProxy {
 public:
  DelayProxy(int target_port, std::chrono::milliseconds delay)
      : target_port_(target_port), delay_(delay) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = Loopback(0);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&address),
             sizeof(address)) != 0 ||
        listen(listener_, 16) != 0) {
      return;
    }
    socklen_t length = sizeof(address);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    accepting_ = std::thread([this] { Accept(); });
  }

  ~DelayProxy() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    if (accepting_.joinable()) accepting_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : sockets_) shutdown(fd, SHUT_RDWR);
      for (auto& pipe : pipes_) pipe->Close();
    }
    for (std::thread& thread : threads_) thread.join();
    close(listener_);
    for (int fd : sockets_) close(fd);
  }

  // 0 when it could not listen.
  int port() const { return port_; }

 private:
  using Clock = std::chrono::steady_clock;

  // One direction: chunks read from `from`, written to `to` when due.
  struct Pipe {
    std::mutex mu;
    std::condition_variable changed;
    std::deque<std::pair<Clock::time_point, std::string>> chunks;
    bool closed = false;
    void Close() {
      std::lock_guard<std::mutex> lock(mu);
      closed = true;
      changed.notify_all();
    }
  };

  static sockaddr_in Loopback(int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return address;
  }

  void Accept() {
    while (!stopping_) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in target = Loopback(target_port_);
      if (connect(server, reinterpret_cast<sockaddr*>(&target),
                  sizeof(target)) != 0) {
        close(client);
        close(server);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        close(client);
        close(server);
        return;
      }
      sockets_.push_back(client);
      sockets_.push_back(server);
      for (const auto& [from, to] :
           {std::pair{client, server}, std::pair{server, client}}) {
        auto pipe = std::make_shared<Pipe>();
        pipes_.push_back(pipe);
        threads_.emplace_back([this, pipe, in = from] { Read(*pipe, in); });
        threads_.emplace_back([this, pipe, out = to] { Write(*pipe, out); });
      }
    }
  }

  void Read(Pipe& pipe, int from) {
    char buffer[65536];
    while (true) {
      const ssize_t n = read(from, buffer, sizeof(buffer));
      if (n <= 0) break;
      std::lock_guard<std::mutex> lock(pipe.mu);
      pipe.chunks.emplace_back(Clock::now() + delay_,
                               std::string(buffer, static_cast<size_t>(n)));
      pipe.changed.notify_all();
    }
    pipe.Close();
  }

  void Write(Pipe& pipe, int to) {
    std::unique_lock<std::mutex> lock(pipe.mu);
    while (true) {
      pipe.changed.wait(lock,
                        [&] { return pipe.closed || !pipe.chunks.empty(); });
      if (pipe.chunks.empty()) break;  // Closed and everything passed on.
      const Clock::time_point due = pipe.chunks.front().first;
      if (Clock::now() < due) {
        pipe.changed.wait_until(lock, due);
        continue;
      }
      std::string chunk = std::move(pipe.chunks.front().second);
      pipe.chunks.pop_front();
      lock.unlock();
      const bool sent = send(to, chunk.data(), chunk.size(), MSG_NOSIGNAL) ==
                        static_cast<ssize_t>(chunk.size());
      lock.lock();
      if (!sent || stopping_) break;
    }
    shutdown(to, SHUT_WR);
  }

  const int target_port_;
  const std::chrono::milliseconds delay_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<int> sockets_;
  std::vector<std::shared_ptr<Pipe>> pipes_;
  std::thread accepting_;
  std::vector<std::thread> threads_;  // Accept() adds (under mu_).
};

class CoordCliTest : public InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    SetAdminToken(kAdminToken);
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    admin_ = ClientWith("authorization", std::string("Bearer ") + kAdminToken);
  }

  // gdt-coord `args`, keeping `stream` ("stdout" or "stderr"); `env` is
  // put before the command (NAME=value ...).
  CliRun Coord(const std::vector<std::string>& args, const std::string& stream,
               const std::string& env = "") {
    return RunCli(env + " " + GDT_COORD_BIN, args, stream, 60s);
  }

  // `args` against this test's coordinator, with its admin token.
  CliRun Admin(std::vector<std::string> args, const std::string& stream) {
    for (const std::string& flag :
         {std::string("--coordinator"), endpoint(),
          std::string("--admin-token-file"), config_.admin_token_file}) {
      args.push_back(flag);
    }
    return Coord(args, stream);
  }

  std::unique_ptr<rendezvous::CoordinatorClient> admin_;
};

int PortOf(const std::string& endpoint) {
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

// A port nothing listens on: bound by the kernel's choice, then closed.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

// A round trip of 0.6 s: gRPC used to give up on connecting after 0.2 s
// and the command said "cannot reach" at once although its deadline is 5 s.
TEST_F(CoordCliTest, StatusWorksOverASlowLink) {
  DelayProxy proxy(PortOf(endpoint()), 300ms);
  ASSERT_NE(proxy.port(), 0);
  const std::string far = absl::StrCat("127.0.0.1:", proxy.port());
  const CliRun run = Coord({"status", "--json", "--coordinator", far,
                            "--admin-token-file", config_.admin_token_file},
                           "stdout");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(nlohmann::json::parse(run.output).contains("summary"))
      << run.output;
}

// Nothing listening is still a clear error, and a fast one: a call with a
// long deadline ends as soon as the connection is refused.
TEST_F(CoordCliTest, RefusedConnectionFailsFast) {
  const std::string nowhere = absl::StrCat("127.0.0.1:", ClosedPort());
  const CliRun run = Coord({"status", "--coordinator", nowhere}, "stderr");
  EXPECT_EQ(run.code, 3) << run.output;
  EXPECT_THAT(run.output,
              StartsWith(absl::StrCat("gdt-coord: cannot reach coordinator at ",
                                      nowhere, ": ")));
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1)
      << run.output;

  rendezvous::CoordinatorClient client(nowhere);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::GetStatusResponse> status =
      client.GetStatus(v1::GetStatusRequest(), 60s);
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
}

// A replica whose host is off answers nothing and refuses nothing. With
// several addresses a call gives each untried one a share of its deadline
// for connecting, so it reaches the next replica instead of spending the
// whole deadline on the silent one.
TEST_F(CoordCliTest, SilentFirstAddressIsPassedOverWithinItsShare) {
  // Listening without ever accepting: the kernel completes the TCP
  // handshake, and nothing ever answers gRPC's.
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      bind(silent, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(silent, 16), 0);
  socklen_t length = sizeof(address);
  getsockname(silent, reinterpret_cast<sockaddr*>(&address), &length);
  const std::string endpoints =
      absl::StrCat("127.0.0.1:", ntohs(address.sin_port), ",", endpoint());

  rendezvous::CoordinatorClient client(endpoints);
  client.AddMetadata("authorization", std::string("Bearer ") + kAdminToken);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::GetStatusResponse> status =
      client.GetStatus(v1::GetStatusRequest(), 8s);
  const auto took = std::chrono::steady_clock::now() - start;
  close(silent);
  ASSERT_TRUE(status.ok()) << status.status();
  // Half of the 8 s for the silent one, then the answer: before the
  // deadline, which the call used to spend on it and fail.
  EXPECT_LT(took, 7s);
  EXPECT_EQ(client.current_endpoint(), endpoint());
}

TEST_F(CoordCliTest, WatchJsonPrintsJsonLines) {
  const CliRun run = Admin(
      {"status", "--watch", "--json", "--count", "2", "--interval", "0.1"},
      "stdout");
  ASSERT_EQ(run.code, 0) << run.output;
  const std::vector<std::string> lines = absl::StrSplit(run.output, '\n');
  ASSERT_EQ(lines.size(), 3u) << run.output;  // Two lines, each ended.
  EXPECT_EQ(lines[2], "");
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(nlohmann::json::parse(lines[i]).contains("hosts")) << lines[i];
  }
}

TEST_F(CoordCliTest, CountAndIntervalWithoutWatchAreRefused) {
  const CliRun count = Admin({"status", "--count", "3"}, "stderr");
  EXPECT_EQ(count.code, 2);
  EXPECT_EQ(count.output,
            "gdt-coord: --count only applies to --watch (add --watch, or "
            "drop it)\n");
  const CliRun interval = Admin({"status", "--interval", "9"}, "stderr");
  EXPECT_EQ(interval.code, 2);
  EXPECT_EQ(interval.output,
            "gdt-coord: --interval only applies to --watch (add --watch, or "
            "drop it)\n");
}

TEST_F(CoordCliTest, CancelReasonIsLimitedToOneKibibyte) {
  const std::string long_reason(rendezvous::kMaxCancelReasonBytes + 1, 'r');
  const std::string refusal =
      "the cancel reason is 1025 bytes; at most 1024 (1 KiB) are allowed";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"cancel", "g-1", "--reason", long_reason},
        {"cancel", "--forming", "--reason", long_reason}}) {
    const CliRun run = Admin(args, "stderr");
    EXPECT_EQ(run.code, 2) << args[1];
    EXPECT_EQ(run.output, "gdt-coord: " + refusal + "\n");
  }
  const CliRun fits =
      Admin({"cancel", "--forming", "--reason",
             std::string(rendezvous::kMaxCancelReasonBytes, 'r')},
            "stdout");
  EXPECT_EQ(fits.code, 0);
  EXPECT_EQ(fits.output, "cancelled 0 forming gangs\n");

  // The coordinator refuses it from any client.
  v1::CancelGangRequest one;
  one.set_gang_id("g-1");
  one.set_reason(long_reason);
  absl::StatusOr<std::string> cancelled = admin_->CancelGang(one, 10s);
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cancelled.status().message(), refusal);
  v1::CancelFormingGangsRequest forming;
  forming.set_reason(long_reason);
  absl::StatusOr<uint32_t> bulk = admin_->CancelFormingGangs(forming, 10s);
  EXPECT_EQ(bulk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bulk.status().message(), refusal);
}

TEST_F(CoordCliTest, HostTokenNameMustBeOnePrintableLine) {
  const std::string refusal =
      "host name 'gpu\\n01' must be one line of printable text (no newline "
      "or other control character)";
  const CliRun run = Admin({"hosts", "token", "create", "gpu\n01"}, "stderr");
  EXPECT_EQ(run.code, 2);
  EXPECT_EQ(run.output, "gdt-coord: " + refusal + "\n");
  for (const char* name : {"gpu\n01", "gpu\x1b[2J", "gpu\t01"}) {
    absl::StatusOr<std::string> token = admin_->CreateHostToken(name, 10s);
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
  absl::StatusOr<std::string> token = admin_->CreateHostToken("gpu\n01", 10s);
  EXPECT_EQ(token.status().message(), refusal);
  EXPECT_TRUE(admin_->CreateHostToken("gpu-01", 10s).ok());
}

TEST_F(CoordCliTest, AdminTokenFileThatIsADirectoryOrUnreadableIsNamed) {
  const CliRun dir = Coord({"status", "--coordinator", endpoint()}, "stderr",
                           "GDT_ADMIN_TOKEN_FILE=" + temp_.path());
  EXPECT_EQ(dir.code, 2);
  EXPECT_EQ(dir.output, "gdt-coord: GDT_ADMIN_TOKEN_FILE " + temp_.path() +
                            " is a directory, not a token file\n");
  // Opens, then every read fails: the gdt-coord process's own memory.
  const CliRun unreadable = Coord({"hosts", "list", "--coordinator", endpoint(),
                                   "--admin-token-file", "/proc/self/mem"},
                                  "stderr");
  EXPECT_EQ(unreadable.code, 2);
  EXPECT_EQ(unreadable.output,
            "gdt-coord: cannot read --admin-token-file /proc/self/mem: "
            "Input/output error\n");
}

// Every command's --help names its exit codes.
TEST_F(CoordCliTest, EveryHelpStatesItsExitCodes) {
  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"serve"},
                                             {"status"},
                                             {"hosts"},
                                             {"hosts", "list"},
                                             {"hosts", "drain"},
                                             {"hosts", "undrain"},
                                             {"hosts", "remove"},
                                             {"hosts", "token"},
                                             {"hosts", "token", "create"},
                                             {"hosts", "token", "list"},
                                             {"hosts", "token", "revoke"},
                                             {"cancel"},
                                             {"gangs"},
                                             {"gangs", "gc"},
                                             {"simulate"}}) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    const CliRun help = Coord(args, "stdout");
    const std::string name = absl::StrJoin(command, " ");
    EXPECT_EQ(help.code, 0) << name;
    EXPECT_THAT(help.output, HasSubstr("Exit codes: 0 ")) << name;
    EXPECT_THAT(help.output, HasSubstr(", 2 ")) << name;
  }
  const CliRun drain = Coord({"hosts", "drain", "--help"}, "stdout");
  EXPECT_THAT(drain.output, HasSubstr("4 refused: an unknown host"));
}

}  // namespace
}  // namespace gdt::test
