// End to end in a real browser: headless Chromium loads gdt-coord's web
// dashboard while a real coordinator and agent hold a failed, a running and
// a forming gang (gdt-ci run-local → gdt-executor → gdt-coord → gdt-agent),
// and the test reads the page's DOM as the browser built it. A screenshot is
// kept in $GDT_TEST_ARTIFACT_DIR (default: ./artifacts under the build's
// tests directory).
#include <cstdlib>
#include <filesystem>
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
  const std::string dom_file = cluster.dir().Sub("dom.html");
  const CommandResult dumped =
      RunChromium(chromium, cluster.dir().path(), url, "--dump-dom", dom_file);
  ASSERT_EQ(dumped.status.exit_code, 0)
      << dumped.output << ReadFile(cluster.dir().Sub("chromium.log"));
  const std::string dom = ReadFile(dom_file);

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

}  // namespace
}  // namespace gdt::test
