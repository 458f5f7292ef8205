#include "ctl/status.h"

#include <sstream>

#include "absl/strings/str_split.h"
#include "common/exit_code.h"
#include "common/terminal_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gdt::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kNow = 1'000'000'000;

v1::MemberStatus* AddMember(v1::GangStatus* gang, uint32_t index,
                            int32_t rank = -1) {
  v1::MemberStatus* member = gang->add_members();
  member->set_member_index(index);
  member->set_job_id(100 + index);
  member->set_job_name(absl::StrCat(gang->key().group_name(), " ", index, "/",
                                    gang->key().size()));
  member->set_present(true);
  member->set_node_rank(rank);
  member->set_exit_code(-1);
  return member;
}

v1::GangStatus* AddGang(v1::GetStatusResponse& status, const std::string& id,
                        v1::GangState state, uint32_t size,
                        int64_t created_ms) {
  v1::GangStatus* gang = status.add_gangs();
  gang->set_gang_id(id);
  gang->mutable_key()->set_group_name("train");
  gang->mutable_key()->set_size(size);
  gang->mutable_key()->set_pipeline_id(77);
  gang->mutable_key()->set_project_id(5);
  gang->set_state(state);
  gang->set_epoch(1);
  gang->set_created_unix_ms(created_ms);
  return gang;
}

v1::GetStatusResponse SampleStatus() {
  v1::GetStatusResponse status;
  v1::HostStatus* host = status.add_hosts();
  host->mutable_host()->set_name("gpu-01");
  host->mutable_host()->set_address("10.0.0.1");
  (*host->mutable_host()->mutable_labels())["rack"] = "r1";
  for (int i = 0; i < 8; ++i) host->mutable_host()->add_gpus()->set_index(i);
  host->set_state(v1::HOST_STATE_UP);
  host->add_leased_gpus(0);
  host->add_leased_gpus(1);
  host->set_last_heartbeat_unix_ms(kNow - 3000);
  v1::HostStatus* down = status.add_hosts();
  down->mutable_host()->set_name("cpu-02");
  down->mutable_host()->set_cpu_slots(4);
  down->set_state(v1::HOST_STATE_DOWN);

  v1::GangStatus* forming = AddGang(status, "train-p5-pl78-n3",
                                    v1::GANG_STATE_FORMING, 3, kNow - 12'000);
  forming->set_reason("waiting for members 2, 3 to join (1/3 present)");
  AddMember(forming, 1);

  v1::GangStatus* running = AddGang(status, "train-p5-pl77-n2",
                                    v1::GANG_STATE_RUNNING, 2, kNow - 300'000);
  running->set_master_addr("10.0.0.1");
  running->set_master_port(29510);
  for (uint32_t index : {1u, 2u}) {
    v1::MemberStatus* member = AddMember(running, index, index - 1);
    member->set_host_name("gpu-01");
    member->add_gpu_indices(index - 1);
  }

  v1::GangStatus* failed = AddGang(status, "eval-p5-pl70-n2",
                                   v1::GANG_STATE_FAILED, 2, kNow - 7'200'000);
  failed->set_reason(
      "gang eval-p5-pl70-n2 failed: member 2/2 (job 102 on host gpu-01) "
      "exited 137 at 10:42:13 UTC; stopping");
  for (uint32_t index : {1u, 2u}) AddMember(failed, index, 0)->set_left(true);

  v1::GangStatus* done = AddGang(status, "lint-p5-pl69-n1", v1::GANG_STATE_DONE,
                                 1, kNow - 9'000'000);
  AddMember(done, 1, 0)->set_left(true);
  return status;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n');
}

// --limit cuts the HOSTS and GANGS lists, saying how many were left out;
// the summary still counts everything and JSON stays complete.
TEST(StatusCommandTest, LimitCutsHostsAndGangsButNotTheSummaryOrJson) {
  v1::GetStatusResponse status = SampleStatus();
  for (int i = 0; i < 5; ++i) {
    AddGang(status, absl::StrCat("more-", i), v1::GANG_STATE_FORMING, 2,
            kNow - 1000);
  }
  StatusOptions options;
  options.limit = 1;
  absl::StatusOr<std::string> text = RenderStatus(status, options, kNow);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("gangs      6 forming, 1 running, 0 failed"));
  EXPECT_THAT(*text, HasSubstr("gpu-01"));
  EXPECT_THAT(*text, Not(HasSubstr("cpu-02")));
  EXPECT_THAT(*text,
              HasSubstr("\u2026 and 1 more (use --limit 0 or --json)\n"));
  EXPECT_THAT(*text, HasSubstr("train-p5-pl78-n3"));  // Forming first.
  EXPECT_THAT(*text, Not(HasSubstr("more-4")));
  EXPECT_THAT(*text,
              HasSubstr("\u2026 and 6 more (use --limit 0 or --json)\n"));
  options.limit = 0;
  text = RenderStatus(status, options, kNow);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("more-4"));
  EXPECT_THAT(*text, Not(HasSubstr("--limit 0")));
  options.limit = 1;
  options.json = true;
  text = RenderStatus(status, options, kNow);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(nlohmann::json::parse(*text)["gangs"].size(), 7u);
  EXPECT_EQ(nlohmann::json::parse(*text)["hosts"].size(), 2u);
}

TEST(StatusCommandTest, SummaryCountsHostsGpusSlotsAndLiveGangs) {
  const std::string text = RenderStatusText(SampleStatus(), kNow);

  EXPECT_THAT(text, HasSubstr("hosts      1 up, 1 down, 0 drained\n"));
  EXPECT_THAT(text, HasSubstr("GPUs       2 leased, 6 free on up hosts\n"));
  EXPECT_THAT(text, HasSubstr("CPU slots  0 used of 0 on up hosts\n"));
  EXPECT_THAT(text, HasSubstr("gangs      1 forming, 1 running, 0 failed"));
  EXPECT_THAT(text, HasSubstr("gpu-01"));
  EXPECT_THAT(text, HasSubstr("2/8 GPUs"));
  EXPECT_THAT(text, HasSubstr("rack=r1"));
  EXPECT_THAT(text, HasSubstr("3s ago"));
}

TEST(StatusCommandTest, GangsByStateWithMembersRanksHostsReasonsAndAges) {
  const std::string text = RenderStatusText(SampleStatus(), kNow);

  const size_t forming = text.find("forming  train-p5-pl78-n3");
  const size_t running = text.find("running  train-p5-pl77-n2");
  ASSERT_NE(forming, std::string::npos) << text;
  ASSERT_NE(running, std::string::npos) << text;
  EXPECT_LT(forming, running) << "forming gangs come first:\n" << text;
  EXPECT_THAT(text, HasSubstr("1/3 present  age 12s  master -\n"));
  EXPECT_THAT(text, HasSubstr("  waiting: waiting for members 2, 3 to join"));
  EXPECT_THAT(text, HasSubstr("  not joined: member 2, 3\n"));
  EXPECT_THAT(text, HasSubstr("age 5m  master 10.0.0.1:29510\n"));
  EXPECT_THAT(text, HasSubstr("member 2/2  job 102  running  rank 1  gpu-01  "
                              "gpus 1  exit -\n"));
  // Finished gangs only with --all; the failure still shows below.
  EXPECT_THAT(text, Not(HasSubstr("lint-p5-pl69-n1")));
  EXPECT_THAT(text, Not(HasSubstr("failed   eval-p5-pl70-n2")));
  const std::string all = RenderStatusText(SampleStatus(), kNow, true);
  EXPECT_THAT(all, HasSubstr("done     lint-p5-pl69-n1"));
  EXPECT_LT(all.find("failed   eval-p5-pl70-n2"),
            all.find("done     lint-p5-pl69-n1"));
  EXPECT_THAT(all, HasSubstr("failed   eval-p5-pl70-n2"));
}

TEST(StatusCommandTest, RecentFailuresShowTheRootCause) {
  const std::string text = RenderStatusText(SampleStatus(), kNow);
  EXPECT_THAT(text,
              HasSubstr("RECENT FAILURES\neval-p5-pl70-n2 (age 2h): gang "
                        "eval-p5-pl70-n2 failed: member 2/2 (job 102 on host "
                        "gpu-01)"));
  EXPECT_THAT(text, HasSubstr("137 at 10:42:13 UTC; stopping\n"));
}

TEST(StatusCommandTest, HumanOutputFitsOneHundredColumns) {
  v1::GetStatusResponse status = SampleStatus();
  v1::HostStatus* host = status.add_hosts();
  host->mutable_host()->set_name(std::string(80, 'h'));
  host->mutable_host()->set_address(std::string(60, 'a'));
  for (int i = 0; i < 20; ++i) {
    (*host->mutable_host()->mutable_labels())[absl::StrCat("label", i)] =
        std::string(30, 'v');
  }
  v1::GangStatus* gang = AddGang(status, std::string(150, 'g'),
                                 v1::GANG_STATE_FORMING, 64, kNow - 1000);
  gang->set_reason(std::string(300, 'x') + " " + std::string(30, 'y') + " " +
                   "words that wrap " + std::string(500, 'z'));
  v1::MemberStatus* member = AddMember(gang, 1);
  member->set_host_name(std::string(90, 'm'));
  for (uint32_t gpu = 0; gpu < 64; ++gpu) member->add_gpu_indices(gpu);
  v1::GangStatus* failed = AddGang(status, std::string(120, 'f'),
                                   v1::GANG_STATE_FAILED, 1, kNow - 5000);
  failed->set_reason(std::string(400, 'r'));

  for (bool all : {false, true}) {
    const std::string text = RenderStatusText(status, kNow, all);
    for (const std::string& line : Lines(text)) {
      EXPECT_LE(line.size(), kStatusWidth) << line;
    }
  }
  for (const v1::GangStatus& each : status.gangs()) {
    for (const std::string& line : Lines(RenderGangText(each, kNow))) {
      EXPECT_LE(line.size(), kStatusWidth) << line;
    }
  }
  // Truncation leaves a visible mark rather than silently cutting.
  EXPECT_THAT(RenderStatusText(status, kNow), HasSubstr("..."));
}

// Names, labels and reasons come from jobs, agents and operators: nothing
// in them may steer the operator's terminal or fake a row.
v1::GetStatusResponse HostileStatus() {
  v1::GetStatusResponse status;
  v1::HostStatus* host = status.add_hosts();
  host->mutable_host()->set_name(
      "evil\nHOST-FAKE  127.0.0.1  up  0/8\x1b]0;pwned\x07\x1b[2J");
  host->mutable_host()->set_address("127.0.0.1");
  (*host->mutable_host()->mutable_labels())["<b>x</b>"] = "\x1b[31mred\nnl";
  host->set_state(v1::HOST_STATE_UP);
  v1::GangStatus* gang = AddGang(status, "ansi\x1b[31mRED\x1b[0m-n2",
                                 v1::GANG_STATE_FAILED, 2, kNow - 5000);
  gang->mutable_key()->set_group_name("ansi\x1b[31mRED");
  gang->set_reason("cancelled by operator: \x1b]0;pwned\x07\nFAKE row");
  AddMember(gang, 1, 0)
      ->set_job_name("evil\n  member 9/9  job 666  present  FAKE 1/2");
  const std::string wide = "üñí©ødé-日本語-🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀";
  AddGang(status, wide + wide, v1::GANG_STATE_RUNNING, 1, kNow - 1000);
  v1::HostStatus* wide_host = status.add_hosts();
  wide_host->mutable_host()->set_name(wide);
  wide_host->set_state(v1::HOST_STATE_UP);
  return status;
}

void ExpectTerminalSafe(const std::string& text) {
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_THAT(text, Not(HasSubstr("\nHOST-FAKE"))) << text;
  EXPECT_THAT(text, Not(HasSubstr("\n  member 9/9"))) << text;
  EXPECT_THAT(text, Not(HasSubstr("\nFAKE row"))) << text;
  EXPECT_TRUE(nlohmann::json(text).dump().size() > 0);  // Valid UTF-8.
  for (const std::string& line : Lines(text)) {
    EXPECT_LE(DisplayWidth(line), kStatusWidth) << line;
  }
}

TEST(StatusCommandTest, NamesAndReasonsCannotSteerTheTerminal) {
  const v1::GetStatusResponse status = HostileStatus();
  const std::string text = RenderStatusText(status, kNow, /*all=*/true);
  ExpectTerminalSafe(text);
  // Shown, as visible escapes.
  EXPECT_THAT(text, HasSubstr("evil\\nHOST-FAKE")) << text;
  EXPECT_THAT(text, HasSubstr("ansi\\x1b[31mRED")) << text;
  EXPECT_THAT(text, HasSubstr("\\x1b]0;pwned\\x07\\nFAKE")) << text;
  EXPECT_THAT(text, HasSubstr("RECENT FAILURES")) << text;
  // Cut between characters and aligned by characters, not bytes.
  EXPECT_THAT(text, HasSubstr("üñí©ødé-日本語-🚀")) << text;
  EXPECT_THAT(text, HasSubstr("🚀...")) << text;
  for (const v1::GangStatus& gang : status.gangs()) {
    const std::string detail = RenderGangText(gang, kNow);
    ExpectTerminalSafe(detail);
  }
  EXPECT_THAT(RenderGangText(status.gangs(0), kNow),
              HasSubstr("evil\\n  member 9/9"));
}

TEST(StatusCommandTest, JsonKeepsNamesExactly) {
  const v1::GetStatusResponse status = HostileStatus();
  const nlohmann::json json =
      nlohmann::json::parse(RenderStatusJson(status, /*all=*/true));
  EXPECT_EQ(json["hosts"][0]["name"], status.hosts(0).host().name());
  EXPECT_EQ(json["hosts"][0]["labels"]["<b>x</b>"], "\x1b[31mred\nnl");
  EXPECT_EQ(json["gangs"][0]["reason"], status.gangs(0).reason());
  EXPECT_EQ(json["gangs"][0]["members"][0]["job_name"],
            status.gangs(0).members(0).job_name());
  EXPECT_EQ(json["gangs"][1]["gang_id"], status.gangs(1).gang_id());
}

TEST(StatusCommandTest, GangDetailByIdOrUniquePrefix) {
  StatusOptions options;
  options.gang = "train-p5-pl77";
  absl::StatusOr<std::string> text =
      RenderStatus(SampleStatus(), options, kNow);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("GANG      train-p5-pl77-n2\n"));
  EXPECT_THAT(*text, HasSubstr("STATE     running, epoch 1, age 5m\n"));
  EXPECT_THAT(*text, HasSubstr("MASTER    10.0.0.1:29510\n"));
  EXPECT_THAT(*text, HasSubstr("member 1/2  job 101  train 1/2  running  "
                               "rank 0  gpu-01  gpus 0  exit -\n"));

  options.gang = "eval-p5-pl70-n2";
  text = RenderStatus(SampleStatus(), options, kNow);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("STATE     failed (finished)"));
  EXPECT_THAT(*text, HasSubstr("REASON    gang eval-p5-pl70-n2 failed"));

  options.json = true;
  text = RenderStatus(SampleStatus(), options, kNow);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(nlohmann::json::parse(*text)["state"], "failed");
}

TEST(StatusCommandTest, AnElasticGangShowsTheSizeItRunsWith) {
  v1::GetStatusResponse status = SampleStatus();
  v1::GangStatus* gang = AddGang(status, "grow-p5-pl62-n2",
                                 v1::GANG_STATE_RUNNING, 2, kNow - 60000);
  gang->set_nodes_min(1);
  v1::MemberStatus* member = gang->add_members();
  member->set_member_index(1);
  member->set_node_rank(0);
  StatusOptions options;

  absl::StatusOr<std::string> text = RenderStatus(status, options, kNow);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("running 1/2 (elastic 1..2)"));

  options.gang = "grow-p5-pl62-n2";
  text = RenderStatus(status, options, kNow);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text,
              HasSubstr("STATE     running 1/2 (elastic 1..2), epoch 1"));
}

TEST(StatusCommandTest, GangDetailShowsAPreemptionUnderWay) {
  v1::GetStatusResponse status = SampleStatus();
  v1::GangStatus* victim = AddGang(status, "low-p5-pl60-n1",
                                   v1::GANG_STATE_RUNNING, 1, kNow - 60000);
  victim->set_preemptible(true);
  victim->set_preemption_planned_by("high-p5-pl61-n1");
  victim->set_preemption_stop_by_unix_ms(kNow + 299500);
  StatusOptions options;
  options.gang = "low-p5-pl60-n1";

  absl::StatusOr<std::string> text = RenderStatus(status, options, kNow);

  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("PREEMPT   being preempted to make room for "
                               "gang high-p5-pl61-n1: checkpoint notice "
                               "sent;"));
  EXPECT_THAT(*text, HasSubstr("in 300 s at the latest"));
  EXPECT_THAT(*text, Not(HasSubstr("PREEMPTED")));
  options.json = true;
  text = RenderStatus(status, options, kNow);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json json = nlohmann::json::parse(*text);
  EXPECT_EQ(json["preemptible"], true);
  EXPECT_EQ(json["preemption_planned_by"], "high-p5-pl61-n1");
  EXPECT_EQ(json["preemption_stop_by_unix_ms"], kNow + 299500);
  EXPECT_EQ(json["preemptions"], 0);
}

TEST(StatusCommandTest, GangDetailShowsWhoPreemptedItAndWhatWasLost) {
  v1::GetStatusResponse status = SampleStatus();
  v1::GangStatus* victim =
      AddGang(status, "low-p5-pl60-n1", v1::GANG_STATE_FAILED, 2, kNow - 60000);
  victim->set_reason(
      "gang low-p5-pl60-n1 failed: preempted by gang high-p5-pl61-n1 "
      "(priority 5) after checkpoint at 10:42:13 UTC; lost ~0.25 GPU-hours");
  victim->set_preemptions(1);
  victim->set_preempted_epoch(2);
  victim->set_preempted_by("high-p5-pl61-n1");
  victim->set_preempted_lost_gpu_hours(0.25);
  StatusOptions options;
  options.gang = "low-p5-pl60-n1";

  absl::StatusOr<std::string> text = RenderStatus(status, options, kNow);

  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("REASON    gang low-p5-pl60-n1 failed: "
                               "preempted by gang high-p5-pl61-n1"));
  EXPECT_THAT(*text, HasSubstr("PREEMPTED 1 time; last in epoch 2 by gang "
                               "high-p5-pl61-n1, ~0.25 GPU-hours lost"));
  options.json = true;
  text = RenderStatus(status, options, kNow);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json json = nlohmann::json::parse(*text);
  EXPECT_EQ(json["preemptions"], 1);
  EXPECT_EQ(json["preempted_epoch"], 2);
  EXPECT_EQ(json["preempted_by"], "high-p5-pl61-n1");
  EXPECT_DOUBLE_EQ(json["preempted_lost_gpu_hours"].get<double>(), 0.25);
}

TEST(StatusCommandTest, UnknownOrAmbiguousGangIsOneClearError) {
  StatusOptions options;
  options.gang = "nope";
  absl::StatusOr<std::string> text =
      RenderStatus(SampleStatus(), options, kNow);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr("no gang 'nope'"));
  EXPECT_EQ(ExitCodeFor(text.status()), kExitFailure);

  options.gang = "train-p5";
  text = RenderStatus(SampleStatus(), options, kNow);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("'train-p5' matches 2 gangs"));
  // Exit 1 like an unknown gang, not 2: the command line was fine.
  EXPECT_EQ(ExitCodeFor(text.status()), kExitFailure);
}

TEST(StatusCommandTest, JsonIsReadableByScripts) {
  nlohmann::json live =
      nlohmann::json::parse(RenderStatusJson(SampleStatus(), false));
  nlohmann::json all = nlohmann::json::parse(RenderStatusJson(SampleStatus()));

  EXPECT_EQ(live["summary"]["hosts_up"], 1);
  EXPECT_EQ(live["summary"]["hosts_down"], 1);
  EXPECT_EQ(live["summary"]["gpus_leased"], 2);
  EXPECT_EQ(live["summary"]["gpus_free"], 6);
  EXPECT_EQ(live["summary"]["gangs"]["running"], 1);
  EXPECT_EQ(live["hosts"][0]["name"], "gpu-01");
  EXPECT_EQ(live["hosts"][0]["leased_gpus"], nlohmann::json({0, 1}));
  EXPECT_EQ(live["gangs"].size(), 2u);
  EXPECT_EQ(all["gangs"].size(), 4u);
  EXPECT_EQ(live["gangs"][0]["gang_id"], "train-p5-pl78-n3");
  EXPECT_EQ(live["gangs"][0]["members"][0]["job_id"], 101);
  EXPECT_EQ(live["recent_failures"][0]["gang_id"], "eval-p5-pl70-n2");
  EXPECT_THAT(live["recent_failures"][0]["reason"].get<std::string>(),
              HasSubstr("exited 137"));
}

TEST(StatusCommandTest, WatchRefreshesUntilTheCountAndSurvivesErrors) {
  int fetches = 0;
  std::vector<std::chrono::milliseconds> waits;
  std::ostringstream out;
  WatchOptions watch;
  watch.interval = std::chrono::milliseconds(1500);
  watch.count = 3;

  const absl::Status last = WatchStatus(
      [&]() -> absl::StatusOr<v1::GetStatusResponse> {
        if (++fetches == 2) return absl::UnavailableError("coordinator down");
        return SampleStatus();
      },
      StatusOptions{}, watch, out,
      [&](std::chrono::milliseconds interval) {
        waits.push_back(interval);
        return false;
      });

  EXPECT_TRUE(last.ok()) << last;
  EXPECT_EQ(fetches, 3);
  EXPECT_EQ(waits, std::vector<std::chrono::milliseconds>(2, watch.interval));
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("gdt-coord: coordinator down\n"));
  size_t frames = 0;
  for (size_t at = text.find("CLUSTER\n"); at != std::string::npos;
       at = text.find("CLUSTER\n", at + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, 2u);
}

TEST(StatusCommandTest, WatchStopsWhenInterruptedAndClearsATerminal) {
  int fetches = 0;
  std::ostringstream out;
  WatchOptions watch;
  watch.clear = true;  // count 0: until interrupted.
  const absl::Status last = WatchStatus(
      [&]() -> absl::StatusOr<v1::GetStatusResponse> {
        ++fetches;
        return SampleStatus();
      },
      StatusOptions{}, watch, out,
      [&](std::chrono::milliseconds) { return fetches == 2; });
  EXPECT_TRUE(last.ok());
  EXPECT_EQ(fetches, 2);
  EXPECT_EQ(out.str().rfind("\033[H\033[2J", 0), 0u);
}

// --watch --json is JSON Lines: each frame one line with one object, also
// on a terminal, and a failed fetch an {"error": ...} line.
TEST(StatusCommandTest, WatchJsonPrintsOneObjectPerLine) {
  int fetches = 0;
  std::ostringstream out;
  WatchOptions watch;
  watch.count = 3;
  watch.clear = true;
  StatusOptions options;
  options.json = true;
  const absl::Status last = WatchStatus(
      [&]() -> absl::StatusOr<v1::GetStatusResponse> {
        if (++fetches == 2) return absl::UnavailableError("coordinator down");
        return SampleStatus();
      },
      options, watch, out, [](std::chrono::milliseconds) { return false; });
  EXPECT_TRUE(last.ok()) << last;
  const std::vector<std::string> lines =
      absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out.str();
  EXPECT_EQ(out.str().back(), '\n');
  EXPECT_EQ(out.str().find("\033"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["summary"]["gangs"],
            nlohmann::json::parse(
                RenderStatusJson(SampleStatus()))["summary"]["gangs"]);
  EXPECT_EQ(lines[1], R"({"error":"coordinator down"})");
  EXPECT_TRUE(nlohmann::json::parse(lines[2]).contains("hosts"));
}

TEST(StatusCommandTest, UnreachableCoordinatorIsOneLine) {
  absl::StatusOr<std::string> text =
      RunStatusCommand("127.0.0.1:1", StatusOptions{});

  EXPECT_EQ(text.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(text.status().message(),
              HasSubstr("cannot reach coordinator at 127.0.0.1:1: "));
}

}  // namespace
}  // namespace gdt::ctl
