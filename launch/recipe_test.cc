#include "launch/recipe.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The environment gdt's executor gives member `rank` of a 3-member gang.
std::map<std::string, std::string> MemberEnv(int rank) {
  return {{"GDT_NODE_RANK", std::to_string(rank)},
          {"GDT_NUM_NODES", "3"},
          {"GDT_MASTER_ADDR", "10.0.0.1"},
          {"GDT_MASTER_PORT", "41000"},
          {"GDT_PEERS", "10.0.0.1\n10.0.0.2\n10.0.0.3"},
          {"PATH", "/usr/bin"}};
}

RenderedRecipe RenderShipped(const std::string& name, int rank) {
  absl::StatusOr<Recipe> recipe =
      LoadRecipe(name, {std::string(GDT_SOURCE_DIR) + "/launch/recipes"});
  EXPECT_TRUE(recipe.ok()) << recipe.status();
  if (!recipe.ok()) return {};
  absl::StatusOr<std::map<std::string, std::string>> vars =
      RecipeVariables(MemberEnv(rank));
  EXPECT_TRUE(vars.ok()) << vars.status();
  absl::StatusOr<RenderedRecipe> rendered = RenderRecipe(*recipe, *vars);
  EXPECT_TRUE(rendered.ok()) << rendered.status();
  return rendered.ok() ? *rendered : RenderedRecipe{};
}

TEST(RecipeTest, DaskRendersSchedulerAndWorkersOnTheLeasedPort) {
  RenderedRecipe head = RenderShipped("dask", 0);
  EXPECT_THAT(head.head, ElementsAre("dask-scheduler", "--host", "10.0.0.1",
                                     "--port", "41000", "--no-dashboard"));
  EXPECT_THAT(head.ready_check.back(),
              HasSubstr("Client('tcp://10.0.0.1:41000', timeout=5)"));
  EXPECT_THAT(head.ready_check.back(), HasSubstr("n >= 2 else 1"));
  EXPECT_EQ(head.script_env["DASK_SCHEDULER_ADDRESS"], "tcp://10.0.0.1:41000");
  RenderedRecipe worker = RenderShipped("dask", 2);
  EXPECT_THAT(worker.worker,
              ElementsAre("dask-worker", "tcp://10.0.0.1:41000", "--host",
                          "10.0.0.3", "--nthreads", "1", "--no-nanny", "--name",
                          "rank-2", "--death-timeout", "120"));
}

// Ray's documented manual cluster: `ray start --head --port=P` and
// `ray start --address=HEAD:P`. Not run against real Ray in CI.
TEST(RecipeTest, RayRendersTheDocumentedRayStartCommands) {
  RenderedRecipe head = RenderShipped("ray", 0);
  EXPECT_THAT(
      head.head,
      ElementsAre("ray", "start", "--head", "--node-ip-address=10.0.0.1",
                  "--port=41000", "--include-dashboard=false", "--block"));
  EXPECT_EQ(head.script_env["RAY_ADDRESS"], "10.0.0.1:41000");
  EXPECT_THAT(head.ready_check.back(), HasSubstr("n >= 3 else 1"));
  RenderedRecipe worker = RenderShipped("ray", 1);
  EXPECT_THAT(worker.worker,
              ElementsAre("ray", "start", "--address=10.0.0.1:41000",
                          "--node-ip-address=10.0.0.2", "--block"));
}

// Spark standalone's foreground master and worker classes. Not run against
// real Spark in CI.
TEST(RecipeTest, SparkRendersTheStandaloneMasterAndWorker) {
  RenderedRecipe head = RenderShipped("spark", 0);
  EXPECT_THAT(head.head, ElementsAre("spark-class",
                                     "org.apache.spark.deploy.master.Master",
                                     "--host", "10.0.0.1", "--port", "41000"));
  EXPECT_EQ(head.script_env["SPARK_MASTER_URL"], "spark://10.0.0.1:41000");
  RenderedRecipe worker = RenderShipped("spark", 1);
  EXPECT_THAT(
      worker.worker,
      ElementsAre("spark-class", "org.apache.spark.deploy.worker.Worker",
                  "--host", "10.0.0.2", "spark://10.0.0.1:41000"));
}

TEST(RecipeTest, GenericRunsTheJobsOwnCommandsThroughTheShell) {
  std::map<std::string, std::string> env = MemberEnv(1);
  env["GDT_HEAD_COMMAND"] = "serve --port $GDT_HEAD_PORT";
  env["GDT_WORKER_COMMAND"] = "join $GDT_HEAD_ADDR:$GDT_HEAD_PORT";
  env["GDT_READY_CHECK"] = "true";
  absl::StatusOr<Recipe> recipe =
      LoadRecipe("generic", {std::string(GDT_SOURCE_DIR) + "/launch/recipes"});
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  absl::StatusOr<RenderedRecipe> rendered =
      RenderRecipe(*recipe, *RecipeVariables(env));
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_THAT(
      rendered->worker,
      ElementsAre("/bin/sh", "-c", "join $GDT_HEAD_ADDR:$GDT_HEAD_PORT"));
  // Without the job's variables the error names the missing one.
  absl::StatusOr<RenderedRecipe> missing =
      RenderRecipe(*recipe, *RecipeVariables(MemberEnv(1)));
  EXPECT_THAT(missing.status().message(),
              HasSubstr("`head` uses ${GDT_HEAD_COMMAND}, which is not set"));
}

TEST(RecipeTest, RenderingKeepsShellDollarsAndEscapes) {
  absl::StatusOr<Recipe> recipe = ParseRecipe(
      "head: [\"a${X}b\", \"$$HOME\", \"$PATH\", \"${X}${X}\"]\n"
      "worker: w\n",
      "t.yaml");
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  absl::StatusOr<RenderedRecipe> rendered = RenderRecipe(*recipe, {{"X", "1"}});
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_THAT(rendered->head, ElementsAre("a1b", "$HOME", "$PATH", "11"));
  EXPECT_THAT(rendered->worker, ElementsAre("/bin/sh", "-c", "w"));
  EXPECT_TRUE(rendered->ready_check.empty());
}

TEST(RecipeTest, BadRecipesGetOneLineNamingTheField) {
  struct Case {
    std::string yaml, message;
  };
  for (const Case& c : std::vector<Case>{
           {"worker: w\n", "t.yaml: has no `head` command"},
           {"head: h\n", "has no `worker` command"},
           {"head: []\nworker: w\n", "`head` must be a command string"},
           {"head: h\nworker: [a, [b]]\n", "`worker` must list strings only"},
           {"head: h\nworker: w\nready_timeout_seconds: 0\n",
            "`ready_timeout_seconds` must be 1..86400"},
           {"head: h\nworker: w\nheads: x\n", "unknown key `heads`"},
           {"- a\n", "must be a YAML mapping"},
           {"head: [unclosed\n", "t.yaml"},
       }) {
    absl::StatusOr<Recipe> recipe = ParseRecipe(c.yaml, "t.yaml");
    ASSERT_FALSE(recipe.ok()) << c.yaml;
    EXPECT_EQ(recipe.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(recipe.status().message(), HasSubstr(c.message)) << c.yaml;
    EXPECT_EQ(std::string(recipe.status().message()).find('\n'),
              std::string::npos);
  }
  absl::StatusOr<Recipe> unterminated =
      ParseRecipe("head: \"${X\"\nworker: w\n", "u.yaml");
  ASSERT_TRUE(unterminated.ok());
  EXPECT_THAT(RenderRecipe(*unterminated, {}).status().message(),
              HasSubstr("unterminated"));
}

TEST(RecipeTest, UnknownRecipeNamesWhereItLooked) {
  absl::StatusOr<Recipe> recipe = LoadRecipe("flink", {"/nonexistent/a"});
  EXPECT_EQ(recipe.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(recipe.status().message(),
              HasSubstr("no launcher recipe 'flink' (looked for "
                        "/nonexistent/a/flink.yaml)"));
}

TEST(RecipeTest, VariablesNeedTheGdtEnvironment) {
  std::map<std::string, std::string> env = MemberEnv(1);
  env.erase("GDT_PEERS");
  EXPECT_THAT(RecipeVariables(env).status().message(),
              HasSubstr("GDT_PEERS is not set"));
  env = MemberEnv(3);
  EXPECT_THAT(RecipeVariables(env).status().message(),
              HasSubstr("not a rank below a node count"));
  absl::StatusOr<std::map<std::string, std::string>> vars =
      RecipeVariables(MemberEnv(1));
  ASSERT_TRUE(vars.ok());
  EXPECT_EQ(vars->at("GDT_SELF_ADDR"), "10.0.0.2");
  EXPECT_EQ(vars->at("GDT_NUM_WORKERS"), "2");
}

}  // namespace
}  // namespace gdt::launch

// Mpi recipe (gdt-rsh).
namespace gdt::launch {
namespace {

TEST(RecipeTest, MpiGivesMpirunGdtRshAndTheGangsHostfile) {
  std::map<std::string, std::string> env = MemberEnv(0);
  env["GDT_BIN_DIR"] = "/opt/gdt/bin";
  env["GDT_HOSTFILE"] = "/scratch/hostfile";
  absl::StatusOr<Recipe> recipe =
      LoadRecipe("mpi", {std::string(GDT_SOURCE_DIR) + "/launch/recipes"});
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  absl::StatusOr<RenderedRecipe> rendered =
      RenderRecipe(*recipe, *RecipeVariables(env));
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_THAT(rendered->head, ElementsAre("/opt/gdt/bin/gdt-rsh", "--serve"));
  EXPECT_THAT(rendered->worker, ElementsAre("/opt/gdt/bin/gdt-rsh", "--serve"));
  EXPECT_THAT(rendered->ready_check,
              ElementsAre("/opt/gdt/bin/gdt-rsh", "--ready"));
  EXPECT_EQ(rendered->script_env["OMPI_MCA_plm_rsh_agent"],
            "/opt/gdt/bin/gdt-rsh");
  EXPECT_EQ(rendered->script_env["OMPI_MCA_orte_default_hostfile"],
            "/scratch/hostfile");
  EXPECT_EQ(rendered->script_env["OMPI_MCA_orte_leave_session_attached"], "1");
}

}  // namespace
}  // namespace gdt::launch
