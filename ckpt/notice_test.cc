#include "ckpt/notice.h"

#include <signal.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::ckpt {
namespace {

using std::chrono::seconds;
using std::chrono::system_clock;
using test::ReadTextFile;
using test::TempDir;
using ::testing::HasSubstr;

TEST(PlanNoticeTest, NoticeIsRelativeToTheJobsStart) {
  absl::Time start;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, "2026-01-01T10:00:00Z",
                              &start, &error));
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "3600"},
                          {"CI_JOB_STARTED_AT", "2026-01-01T10:00:00Z"},
                          {"GDT_CHECKPOINT_NOTICE", "120"},
                          {"GDT_CHECKPOINT_DIR", "/p/checkpoints"}},
                         system_clock::now());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->deadline, absl::ToChronoTime(start) + seconds(3600));
  EXPECT_EQ(*plan->notice_at, absl::ToChronoTime(start) + seconds(3480));
  EXPECT_EQ(plan->flag_file, "/p/checkpoints/.notice");
  EXPECT_EQ(plan->signal, SIGUSR1);
}

TEST(PlanNoticeTest, AStartInTheFutureCountsFromNow) {
  // GitLab's clock ahead of this host's, or a start past what the clock
  // holds (year 2999): the notice is not given at once.
  const system_clock::time_point now = system_clock::now();
  for (const char* started : {"2999-01-01T00:00:00Z", "2100-06-01T00:00:00Z"}) {
    auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "3600"},
                            {"CI_JOB_STARTED_AT", started},
                            {"GDT_CHECKPOINT_NOTICE", "300"},
                            {"GDT_CHECKPOINT_DIR", "/p/checkpoints"}},
                           now);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->deadline, now + seconds(3600)) << started;
    EXPECT_EQ(*plan->notice_at, now + seconds(3300)) << started;
  }
}

TEST(PlanNoticeTest, DefaultsAndNone) {
  const auto now = system_clock::now();
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "600"},
                          {"GDT_CHECKPOINT_SIGNAL", "none"},
                          {"GDT_CHECKPOINT_NOTICE_FILE", "/tmp/flag"}},
                         now);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(*plan->notice_at, now + seconds(300));
  EXPECT_EQ(plan->signal, 0);
  auto no_timeout = PlanNotice({{"GDT_CHECKPOINT_DIR", "/c"}}, now);
  ASSERT_TRUE(no_timeout.ok());
  EXPECT_FALSE(no_timeout->notice_at.has_value());
}

TEST(PlanNoticeTest, BadInputNamesTheVariable) {
  const auto now = system_clock::now();
  const std::map<std::string, std::string> base = {
      {"GDT_CHECKPOINT_DIR", "/c"}};
  auto with = [&](const std::string& key, const std::string& value) {
    auto env = base;
    env[key] = value;
    return PlanNotice(env, now).status();
  };
  EXPECT_THAT(with("CI_JOB_TIMEOUT", "1h").message(),
              HasSubstr("CI_JOB_TIMEOUT=1h"));
  EXPECT_THAT(with("GDT_CHECKPOINT_NOTICE", "-1").message(),
              HasSubstr("GDT_CHECKPOINT_NOTICE=-1"));
  EXPECT_THAT(with("GDT_CHECKPOINT_SIGNAL", "KILL").message(),
              HasSubstr("GDT_CHECKPOINT_SIGNAL=KILL"));
  auto env = base;
  env["CI_JOB_TIMEOUT"] = "60";
  env["CI_JOB_STARTED_AT"] = "yesterday";
  EXPECT_THAT(PlanNotice(env, now).status().message(),
              HasSubstr("CI_JOB_STARTED_AT=yesterday"));
  EXPECT_THAT(PlanNotice({}, now).status().message(),
              HasSubstr("GDT_CHECKPOINT_DIR"));
}

// A job with a 4 s timeout and a 2 s notice: the command sees the flag file
// and SIGUSR1 about 2 s after the start, well before the deadline, and
// checkpoints in reaction.
TEST(RunWithNoticeTest, CommandGetsFlagAndSignalBeforeTheDeadline) {
  TempDir dir;
  const auto start = system_clock::now();
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "4"},
                          {"GDT_CHECKPOINT_NOTICE", "2"},
                          {"GDT_CHECKPOINT_DIR", dir.path() + "/ckpt"}},
                         start);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string script = R"(
trap 'test -f "$GDT_CHECKPOINT_NOTICE_FILE" && echo saved > "$OUT/saved"; exit 0' USR1
for i in $(seq 1 100); do sleep 0.1; done
exit 3)";
  std::ostringstream err;
  const int code = RunWithNotice(
      {"/bin/bash", "-c", script},
      {{"OUT", dir.path()}, {"PATH", "/usr/bin:/bin"}}, *plan, err);
  const auto elapsed = system_clock::now() - start;
  EXPECT_EQ(code, 0) << err.str();
  EXPECT_EQ(ReadTextFile(dir.path() + "/saved"), "saved\n");
  // The checkpoint directory did not exist yet: it is created for the flag.
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/ckpt/.notice"));
  EXPECT_GE(elapsed, seconds(2));
  EXPECT_LT(elapsed, seconds(4));
  EXPECT_THAT(err.str(), HasSubstr("checkpoint notice: the job times out in"));
}

TEST(RunWithNoticeTest, SignalNoneWritesOnlyTheFlag) {
  TempDir dir;
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "2"},
                          {"GDT_CHECKPOINT_NOTICE", "2"},
                          {"GDT_CHECKPOINT_SIGNAL", "none"},
                          {"GDT_CHECKPOINT_DIR", dir.path()}},
                         system_clock::now());
  ASSERT_TRUE(plan.ok());
  // Polls for the flag (what a training loop would do between steps).
  const std::string script = R"(
trap 'exit 9' USR1
for i in $(seq 1 100); do test -f "$GDT_CHECKPOINT_NOTICE_FILE" && exit 0; sleep 0.1; done
exit 3)";
  std::ostringstream err;
  EXPECT_EQ(RunWithNotice({"/bin/bash", "-c", script},
                          {{"PATH", "/usr/bin:/bin"}}, *plan, err),
            0)
      << err.str();
}

// torchrun's shape: a parent that would die on SIGUSR1 (torch 1.13's agent
// installs no handler for it) and waits for a worker that checkpoints on it.
// The notice never kills: in both modes the parent, which leaves SIGUSR1 at
// its default action, is not signalled. `workers` also spares the worker's
// own child (like `gdt-ckpt save`); `group` reaches it, since it handles the
// signal.
TEST(RunWithNoticeTest, NoticeSparesALauncherWithoutAHandler) {
  TempDir dir;
  const std::string worker = dir.path() + "/worker.sh";
  test::WriteTextFile(worker, R"(
bash -c 'trap "echo hit > \"$OUT/grandchild\"" USR1; for i in $(seq 1 20); do sleep 0.1; done' &
trap 'echo saved > "$OUT/saved"; wait; touch "$OUT/done"; exit 0' USR1
for i in $(seq 1 100); do sleep 0.1; done
exit 3
)");
  const std::string launcher = "/bin/bash " + worker + " & wait $!; exit $?";
  for (const char* to : {"workers", "group"}) {
    for (const char* name : {"saved", "done", "grandchild"}) {
      std::filesystem::remove(dir.path() + "/" + name);
    }
    // The notice comes 1 s in, when the worker has set its trap.
    auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "2"},
                            {"GDT_CHECKPOINT_NOTICE", "1"},
                            {"GDT_CHECKPOINT_SIGNAL_TO", to},
                            {"GDT_CHECKPOINT_DIR", dir.path()}},
                           system_clock::now());
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::ostringstream err;
    const int code = RunWithNotice(
        {"/bin/bash", "-c", launcher},
        {{"OUT", dir.path()}, {"PATH", "/usr/bin:/bin"}}, *plan, err);
    EXPECT_EQ(code, 0) << to << ": " << err.str();
    EXPECT_EQ(ReadTextFile(dir.path() + "/saved"), "saved\n") << to;
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/done")) << to;
    EXPECT_EQ(std::filesystem::exists(dir.path() + "/grandchild"),
              std::string(to) == "group")
        << to;
    // The launcher has no handler: the notice says it waits for one.
    if (std::string(to) == "group") {
      EXPECT_THAT(err.str(), HasSubstr("not handle SIGUSR1 yet")) << err.str();
    }
  }
  EXPECT_THAT(PlanNotice({{"GDT_CHECKPOINT_SIGNAL_TO", "agent"},
                          {"GDT_CHECKPOINT_DIR", dir.path()}},
                         system_clock::now())
                  .status()
                  .message(),
              HasSubstr("GDT_CHECKPOINT_SIGNAL_TO=agent: use group or "
                        "workers"));
}

// A command still starting when the notice comes (Python importing torch
// before it installs its handler) is not killed by the signal's default
// action: it gets the signal once it handles it.
TEST(RunWithNoticeTest, ACommandThatHandlesTheSignalLaterGetsItThen) {
  TempDir dir;
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "60"},
                          {"GDT_CHECKPOINT_NOTICE", "60"},
                          {"GDT_CHECKPOINT_DIR", dir.path()}},
                         system_clock::now());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Installs its trap only after the notice was given (the flag exists).
  const std::string script = R"(
for i in $(seq 1 100); do test -f "$GDT_CHECKPOINT_NOTICE_FILE" && break; sleep 0.05; done
sleep 0.5
trap 'echo saved > "$OUT/saved"; exit 0' USR1
for i in $(seq 1 100); do sleep 0.1; done
exit 3)";
  std::ostringstream err;
  const int code = RunWithNotice(
      {"/bin/bash", "-c", script},
      {{"OUT", dir.path()}, {"PATH", "/usr/bin:/bin"}}, *plan, err);
  EXPECT_EQ(code, 0) << err.str();
  EXPECT_EQ(ReadTextFile(dir.path() + "/saved"), "saved\n");
  EXPECT_THAT(err.str(), HasSubstr("1 process does not handle SIGUSR1 yet"));
}

// The gang's shared notice, in memory.
class FakeBroadcast final : public NoticeBroadcast {
 public:
  absl::Status Announce(int64_t deadline_unix_s) override {
    if (!refusal.ok()) return refusal;
    announced_deadline = deadline_unix_s;
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<std::string>> Announced() override {
    if (!refusal.ok()) return refusal;
    ++checks;
    if (!heard) return std::optional<std::string>();
    return std::optional<std::string>(value);
  }

  absl::Status refusal;
  bool heard = false;
  std::string value = "1767225600";  // What a member writes: a deadline.
  int64_t announced_deadline = 0;
  int checks = 0;
};

// Waits for the flag file, as a training loop does between steps.
constexpr char kFlagPoller[] = R"(
for i in $(seq 1 100); do test -f "$GDT_CHECKPOINT_NOTICE_FILE" && exit 0; sleep 0.1; done
exit 3)";

// Another member announced: this one gives notice at once although its own
// notice is minutes away, and says where it came from.
TEST(RunWithNoticeTest, NoticeAnnouncedByAnotherMemberComesAtOnce) {
  TempDir dir;
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "600"},
                          {"GDT_CHECKPOINT_SIGNAL", "none"},
                          {"GDT_CHECKPOINT_DIR", dir.path()}},
                         system_clock::now());
  ASSERT_TRUE(plan.ok());
  FakeBroadcast broadcast;
  broadcast.heard = true;
  std::ostringstream err;
  const auto start = system_clock::now();
  EXPECT_EQ(RunWithNotice({"/bin/bash", "-c", kFlagPoller},
                          {{"PATH", "/usr/bin:/bin"}}, *plan, err, &broadcast),
            0)
      << err.str();
  EXPECT_LT(system_clock::now() - start, seconds(5));
  EXPECT_THAT(err.str(),
              HasSubstr("gdt-ckpt run: checkpoint notice (announced by "
                        "another member of the gang): the job times out in"));
  EXPECT_EQ(broadcast.announced_deadline, 0);  // It did not announce itself.
}

// The coordinator's notice (it preempts the gang) says so and when the gang
// stops, instead of the job's own timeout.
TEST(RunWithNoticeTest, CoordinatorsNoticeNamesWhoPreemptsAndTheDeadline) {
  TempDir dir;
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "600"},
                          {"GDT_CHECKPOINT_SIGNAL", "none"},
                          {"GDT_CHECKPOINT_DIR", dir.path()}},
                         system_clock::now());
  ASSERT_TRUE(plan.ok());
  FakeBroadcast broadcast;
  broadcast.heard = true;
  broadcast.value = absl::StrCat(
      absl::ToUnixSeconds(absl::FromChrono(system_clock::now())) + 120,
      " preempted by the coordinator for gang high-p5-pl78-n1 (priority 5)");
  std::ostringstream err;
  EXPECT_EQ(RunWithNotice({"/bin/bash", "-c", kFlagPoller},
                          {{"PATH", "/usr/bin:/bin"}}, *plan, err, &broadcast),
            0)
      << err.str();
  EXPECT_THAT(err.str(),
              HasSubstr("gdt-ckpt run: checkpoint notice (preempted by the "
                        "coordinator for gang high-p5-pl78-n1 (priority 5)): "
                        "the gang stops in 1"));
  EXPECT_THAT(err.str(), HasSubstr(" s at the latest"));
}

// The first member to reach its notice announces it with its deadline; a
// broadcast that fails is one warning and the member's own notice stands.
TEST(RunWithNoticeTest, OwnNoticeIsAnnouncedAndFailuresAreOneWarning) {
  TempDir dir;
  const auto now = system_clock::now();
  auto plan = PlanNotice({{"CI_JOB_TIMEOUT", "2"},
                          {"GDT_CHECKPOINT_NOTICE", "1"},
                          {"GDT_CHECKPOINT_SIGNAL", "none"},
                          {"GDT_CHECKPOINT_DIR", dir.path()}},
                         now);
  ASSERT_TRUE(plan.ok());
  FakeBroadcast broadcast;
  std::ostringstream err;
  EXPECT_EQ(RunWithNotice({"/bin/bash", "-c", kFlagPoller},
                          {{"PATH", "/usr/bin:/bin"}}, *plan, err, &broadcast),
            0)
      << err.str();
  EXPECT_EQ(broadcast.announced_deadline,
            absl::ToUnixSeconds(absl::FromChrono(plan->deadline)));
  EXPECT_GE(broadcast.checks, 1);

  FakeBroadcast broken;
  broken.refusal = absl::UnavailableError("coordinator c:1 unavailable");
  std::ostringstream err2;
  EXPECT_EQ(RunWithNotice({"/bin/bash", "-c", kFlagPoller},
                          {{"PATH", "/usr/bin:/bin"}},
                          *PlanNotice({{"CI_JOB_TIMEOUT", "2"},
                                       {"GDT_CHECKPOINT_NOTICE", "1"},
                                       {"GDT_CHECKPOINT_SIGNAL", "none"},
                                       {"GDT_CHECKPOINT_DIR", dir.path()}},
                                      system_clock::now()),
                          err2, &broken),
            0)
      << err2.str();
  EXPECT_THAT(err2.str(),
              ::testing::StartsWith(
                  "gdt-ckpt run: warning: the gang's notice is not shared: "
                  "coordinator c:1 unavailable\ngdt-ckpt run: checkpoint "
                  "notice: the job times out in"));
}

TEST(RunWithNoticeTest, MissingCommandIsOneLine) {
  TempDir dir;
  NoticePlan plan;
  plan.flag_file = dir.path() + "/.notice";
  std::ostringstream err;
  EXPECT_EQ(RunWithNotice({"/nonexistent/train"}, {}, plan, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("cannot start /nonexistent/train"));
}

}  // namespace
}  // namespace gdt::ckpt
