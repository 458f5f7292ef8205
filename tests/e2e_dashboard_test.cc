// End to end in a real browser: headless Chromium loads gdt-coord's web
// dashboard while a real coordinator and agent hold a failed, a running and
// a forming gang (gdt-ci run-local → gdt-executor → gdt-coord → gdt-agent),
// or a gang being preempted and then preempted, and the test reads the
// page's DOM as the browser built it. A screenshot is
// kept in $GDT_TEST_ARTIFACT_DIR (default: ./artifacts under the build's
// tests directory).
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

std::string FindChromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    for (const char* dir : {"/usr/bin", "/usr/local/bin"}) {
      const std::string path = absl::StrCat(dir, "/", name);
      if (access(path.c_str(), X_OK) == 0) return path;
    }
  }
  return "";
}

// Runs headless Chromium on `url` with `mode` ("--dump-dom" or
// "--screenshot=FILE"); stdout goes to `out`. Its profile lives in `dir`.
CommandResult RunChromium(const std::string& chromium, const std::string& dir,
                          const std::string& url, const std::string& mode,
                          const std::string& out) {
  const std::string command = absl::StrCat(
      "exec '", chromium,
      "' --headless=new --no-sandbox --disable-gpu --no-first-run "
      "--disable-extensions --disable-background-networking "
      "--user-data-dir='",
      dir,
      "/chromium-profile' --window-size=1400,1100 "
      "--virtual-time-budget=6000 ",
      mode, " '", url, "' >'", out, "' 2>'", dir, "/chromium.log'");
  return RunProcess({"/bin/sh", "-c", command}, {}, milliseconds(90000));
}

// The DOM headless Chromium builds from `cluster`'s dashboard; empty, with
// a failure, when Chromium fails.
std::string DashboardDom(const std::string& chromium, GdtCluster& cluster) {
  const std::string dom_file = cluster.dir().Sub("dom.html");
  std::filesystem::remove(dom_file);
  const CommandResult dumped =
      RunChromium(chromium, cluster.dir().path(),
                  absl::StrCat("http://", cluster.dashboard_endpoint(), "/"),
                  "--dump-dom", dom_file);
  EXPECT_EQ(dumped.status.exit_code, 0)
      << dumped.output << ReadFile(cluster.dir().Sub("chromium.log"));
  return dumped.status.exit_code == 0 ? ReadFile(dom_file) : "";
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

std::string GangIdOf(const nlohmann::json& status, const std::string& name,
                     const std::string& state) {
  for (const nlohmann::json& gang : status["gangs"]) {
    if (gang["group_name"] == name && gang["state"] == state) {
      return gang["gang_id"];
    }
  }
  return "";
}

class EndToEndDashboardTest : public OneHostGangTest {};

TEST_F(EndToEndDashboardTest, ChromiumShowsFailedRunningAndFormingGangs) {
  const std::string chromium = FindChromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium is missing: scripts/setup.sh installs it";
  GdtCluster& cluster = cluster_;
  ASSERT_FALSE(cluster.dashboard_endpoint().empty()) << cluster.Logs();

  const std::string release = cluster.dir().Sub("release");
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  const std::string wait_for_release =
      absl::StrCat("'while [ ! -e ", release, " ]; do sleep 0.05; done'");
  WriteFile(project + "/.gitlab-ci.yml",
            absl::StrCat("variables:\n"
                         "  GDT_GPUS_PER_NODE: \"0\"\n"
                         "  GDT_LAUNCHER: none\n"
                         "broken:\n"
                         "  parallel: 2\n"
                         "  timeout: 5 minutes\n"
                         "  script:\n"
                         "    - 'if [ \"$CI_NODE_INDEX\" = 2 ]; then exit 3; "
                         "fi; sleep 120'\n"
                         "train:\n"
                         "  parallel: 2\n"
                         "  timeout: 5 minutes\n"
                         "  script:\n"
                         "    - ",
                         wait_for_release,
                         "\n"
                         "queued:\n"
                         "  parallel: 2\n"
                         "  timeout: 5 minutes\n"
                         "  variables:\n"
                         "    GDT_NODES_MIN: \"1\"\n"
                         "    GDT_NODES_MAX: \"2\"\n"
                         "  script:\n"
                         "    - ",
                         wait_for_release, "\n"));

  // A failed gang: member 2 exits 3, member 1 is stopped by the fan-out.
  const CommandResult broken =
      cluster.RunLocal(project, "broken", {}, milliseconds(120000));
  ASSERT_NE(broken.status.exit_code, 0) << broken.output;

  // A running gang on both slots, then a gang that must wait for them.
  std::unique_ptr<Subprocess> train = StartRunLocal(cluster, project, "train");
  ASSERT_NE(train, nullptr);
  std::string running_id;
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        running_id = GangIdOf(status, "train", "running");
        return !running_id.empty();
      },
      milliseconds(60000)))
      << cluster.Logs();
  std::unique_ptr<Subprocess> queued =
      StartRunLocal(cluster, project, "queued");
  ASSERT_NE(queued, nullptr);
  std::string forming_id;
  std::string failed_id;
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        forming_id = GangIdOf(status, "queued", "forming");
        failed_id = GangIdOf(status, "broken", "failed");
        return !forming_id.empty() && !failed_id.empty() &&
               MembersPresent(status) == 2;
      },
      milliseconds(60000)))
      << cluster.Logs();

  const std::string url =
      absl::StrCat("http://", cluster.dashboard_endpoint(), "/");
  const std::string dom = DashboardDom(chromium, cluster);
  ASSERT_FALSE(dom.empty());

  // The page ran its script against the live coordinator.
  EXPECT_THAT(dom, HasSubstr("data-state=\"live\"")) << dom;
  EXPECT_THAT(dom, ::testing::Not(HasSubstr("cannot reach"))) << dom;
  // Hosts: the agent's host, up, both slots held by the running gang.
  EXPECT_THAT(dom, HasSubstr("data-host=\"local\" data-state=\"up\"")) << dom;
  EXPECT_EQ(Count(dom, absl::StrCat("class=\"cell leased\" data-gang=\"",
                                    running_id, "\"")),
            2u)
      << dom;
  // Gangs: one row each, in its state.
  for (const auto& [id, state] :
       {std::pair{running_id, "running"}, std::pair{forming_id, "forming"},
        std::pair{failed_id, "failed"}}) {
    EXPECT_THAT(dom, HasSubstr(absl::StrCat("data-gang-id=\"", id,
                                            "\" data-state=\"", state, "\"")))
        << state << "\n"
        << dom;
  }
  // The waiting gang is elastic: it may start with one member of two.
  const size_t row = dom.find(
      absl::StrCat("<tr class=\"gang\" data-gang-id=\"", forming_id, "\""));
  ASSERT_NE(row, std::string::npos) << dom;
  EXPECT_THAT(dom.substr(row, dom.find("</tr>", row) - row),
              HasSubstr("<span class=\"badge forming\">forming</span> "
                        "elastic 1..2</td>"))
      << dom;
  // The queue names the waiting gang; the events name the failure.
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("class=\"row\" data-gang-id=\"",
                                          forming_id, "\"")))
      << dom;
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("data-kind=\"failed\"><span "
                                          "class=\"time\">")))
      << dom;
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("gang ", failed_id, " failed: ")))
      << dom;

  // A picture for people: kept as an artifact of the test run.
  const char* artifacts = std::getenv("GDT_TEST_ARTIFACT_DIR");
  const std::string artifact_dir =
      artifacts != nullptr && *artifacts != '\0'
          ? artifacts
          : (std::filesystem::current_path() / "artifacts").string();
  std::filesystem::create_directories(artifact_dir);
  const std::string screenshot = artifact_dir + "/dashboard.png";
  std::filesystem::remove(screenshot);
  const CommandResult shot =
      RunChromium(chromium, cluster.dir().path(), url,
                  absl::StrCat("--screenshot='", screenshot, "'"), "/dev/null");
  EXPECT_EQ(shot.status.exit_code, 0)
      << shot.output << ReadFile(cluster.dir().Sub("chromium.log"));
  ASSERT_TRUE(std::filesystem::exists(screenshot));
  EXPECT_EQ(ReadFile(screenshot).substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_GT(std::filesystem::file_size(screenshot), 20000u);

  WriteFile(release, "");
  EXPECT_EQ(FinishRun(*train, milliseconds(60000)).status.exit_code, 0);
  EXPECT_EQ(FinishRun(*queued, milliseconds(60000)).status.exit_code, 0);
}

// With preemption on: a running gang that got its checkpoint notice says
// for which gang it makes room, and once stopped, that it was preempted, by
// whom and about what it lost.
class DashboardPreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A grace far longer than the test (and shorter than the low gang's
    // timeout): the low gang stops when its script ends after the notice,
    // which makes it a preemption, not at a deadline.
    cluster_.SetCoordinatorExtraConfig(
        "preemption:\n  enabled: true\n  grace_seconds: 600\n");
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    ASSERT_TRUE(
        cluster_.StartAgent({.name = "local", .cpu_slots = 2, .gpus = 2}).ok())
        << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  }

  GdtCluster cluster_;
};

TEST_F(DashboardPreemptionTest, ChromiumShowsWhoPreemptsAGangAndWhatItLost) {
  const std::string chromium = FindChromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium is missing: scripts/setup.sh installs it";
  GdtCluster& cluster = cluster_;
  ASSERT_FALSE(cluster.dashboard_endpoint().empty()) << cluster.Logs();

  // `low` holds both GPUs until released; `high` needs both at priority 5.
  // Only a gang whose run bound (its timeout) ends after the grace is
  // stopped: otherwise `high` waits for its end.
  const std::string release = cluster.dir().Sub("release");
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            absl::StrCat("variables:\n"
                         "  GDT_GPUS_PER_NODE: \"2\"\n"
                         "  GDT_LAUNCHER: none\n"
                         "low:\n"
                         "  parallel: 1\n"
                         "  timeout: 60 minutes\n"
                         "  variables:\n"
                         "    GDT_PREEMPTIBLE: \"1\"\n"
                         "    GDT_PREEMPT_RETRIES: \"1\"\n"
                         "  script:\n"
                         "    - 'while [ ! -e ",
                         release,
                         " ]; do sleep 0.05; done'\n"
                         "high:\n"
                         "  parallel: 1\n"
                         "  timeout: 5 minutes\n"
                         "  variables:\n"
                         "    GDT_PRIORITY: \"5\"\n"
                         "  script:\n"
                         "    - echo high\n"));
  std::unique_ptr<Subprocess> low = StartRunLocal(cluster, project, "low");
  ASSERT_NE(low, nullptr);
  std::string low_id;
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        low_id = GangIdOf(status, "low", "running");
        return !low_id.empty();
      },
      milliseconds(60000)))
      << cluster.Logs();
  std::unique_ptr<Subprocess> high = StartRunLocal(cluster, project, "high");
  ASSERT_NE(high, nullptr);
  std::string high_id;
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        high_id = GangIdOf(status, "high", "forming");
        for (const nlohmann::json& gang : status["gangs"]) {
          if (gang["gang_id"] == low_id) {
            return !high_id.empty() &&
                   gang.value("preemption_planned_by", "") == high_id &&
                   gang.value("preemption_stop_by_unix_ms", int64_t{0}) != 0;
          }
        }
        return false;
      },
      milliseconds(60000)))
      << cluster.Logs();

  // While it runs in its grace: marked, and the reason names the gang.
  std::string dom = DashboardDom(chromium, cluster);
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("data-gang-id=\"", low_id,
                                          "\" data-state=\"running\" "
                                          "data-preempting=\"",
                                          high_id, "\"")))
      << dom;
  EXPECT_THAT(dom, HasSubstr(absl::StrCat(
                       "being preempted to make room for gang ", high_id,
                       ": checkpoint notice sent; stops at its next "
                       "checkpoint, or in ")))
      << dom;

  // ... and the waiting gang names it as the one making room.
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("making room: gang ", low_id,
                                          " has the checkpoint notice")))
      << dom;

  // Its script ends after the notice: a preemption. `high` then runs.
  WriteFile(release, "");
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        return !GangIdOf(status, "low", "failed").empty() &&
               !GangIdOf(status, "high", "done").empty();
      },
      milliseconds(60000)))
      << cluster.Logs();
  dom = DashboardDom(chromium, cluster);
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("data-gang-id=\"", low_id,
                                          "\" data-state=\"failed\">")))
      << dom;
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("preempted 1 time; last in epoch 1 "
                                          "by gang ",
                                          high_id, ", ~")))
      << dom;
  EXPECT_THAT(dom, HasSubstr(" GPU-hours lost")) << dom;

  EXPECT_NE(FinishRun(*low, milliseconds(60000)).status.exit_code, 0);
  EXPECT_EQ(FinishRun(*high, milliseconds(60000)).status.exit_code, 0);
}

}  // namespace
}  // namespace gdt::test
