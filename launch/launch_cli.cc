#include "launch/launch_cli.h"

#include <optional>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "common/cli_parse.h"
#include "launch/head_worker.h"
#include "launch/kv_done_signal.h"
#include "launch/recipe.h"
#include "nlohmann/json.hpp"

namespace gdt::launch {

constexpr int kExitUsage = 2;

int RunLaunchCli(int argc, char** argv,
                 const std::map<std::string, std::string>& env,
                 const std::vector<std::string>& default_dirs,
                 const std::function<int()>& stop_requested, std::ostream& out,
                 std::ostream& err) {
  CLI::App app{
      "gdt-launch: runs a head/worker framework (Dask, Ray, Spark, ...) "
      "across the members of a gdt gang from a recipe file. Rank 0 starts the "
      "head, the other ranks start workers; once the recipe's ready_check "
      "passes, rank 0 runs COMMAND; when it ends the workers are stopped.\n"
      "  gdt-launch dask -- python3 job.py",
      "gdt-launch"};
  std::vector<std::string> dirs;
  std::string recipe_name;
  bool print = false;
  app.add_option("--recipes-dir", dirs,
                 "directory with NAME.yaml recipes (searched first; then "
                 "$GDT_LAUNCHERS_DIR and the installed share/gdt/launchers)");
  app.add_flag("--print", print,
               "print this member's rendered commands as JSON and exit");
  app.add_option("recipe", recipe_name,
                 "recipe name (dask, ray, spark, generic) or path to a .yaml")
      ->required();

  std::vector<std::string> args;
  std::vector<std::string> script;
  int split = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      split = i;
      break;
    }
  }
  for (int i = argc - 1; i > split; --i) script.insert(script.begin(), argv[i]);
  for (int i = split - 1; i > 0; --i) args.emplace_back(argv[i]);
  if (std::optional<int> code = ParseCommandLine(app, args, out, err)) {
    return *code;
  }

  if (auto it = env.find("GDT_LAUNCHERS_DIR"); it != env.end()) {
    dirs.push_back(it->second);
  }
  dirs.insert(dirs.end(), default_dirs.begin(), default_dirs.end());
  absl::StatusOr<Recipe> recipe = LoadRecipe(recipe_name, dirs);
  if (!recipe.ok()) {
    err << "gdt-launch: " << recipe.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::map<std::string, std::string>> vars =
      RecipeVariables(env);
  if (!vars.ok()) {
    err << "gdt-launch: " << vars.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<RenderedRecipe> rendered = RenderRecipe(*recipe, *vars);
  if (!rendered.ok()) {
    err << "gdt-launch: " << rendered.status().message() << "\n";
    return kExitUsage;
  }
  int rank = 0, num_workers = 0;
  (void)absl::SimpleAtoi(vars->at("GDT_NODE_RANK"), &rank);
  (void)absl::SimpleAtoi(vars->at("GDT_NUM_WORKERS"), &num_workers);

  if (print) {
    nlohmann::json json = {
        {"recipe", recipe->name},
        {"source", recipe->source},
        {"rank", rank},
        {"role", rank == 0 ? "head" : "worker"},
        {"command", rank == 0 ? rendered->head : rendered->worker},
        {"ready_check", rendered->ready_check},
        {"script_env", rendered->script_env},
        {"ready_timeout_seconds", recipe->ready_timeout.count()}};
    out << json.dump(2) << "\n";
    return 0;
  }
  if (rank == 0 && script.empty()) {
    err << "gdt-launch: give the command rank 0 runs after `--`, e.g. "
           "gdt-launch dask -- python3 job.py\n";
    return kExitUsage;
  }
  absl::StatusOr<rendezvous::KvTarget> target =
      rendezvous::KvTargetFromEnvironment([&env](const char* name) {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      });
  if (!target.ok()) {
    err << "gdt-launch: " << target.status().message() << "\n";
    return kExitUsage;
  }
  KvDoneSignal done(*target);
  HeadWorkerOptions options;
  options.recipe_name = recipe->name;
  options.commands = *std::move(rendered);
  options.rank = rank;
  options.num_workers = num_workers;
  options.script = script;
  options.env = *vars;  // With GDT_SELF_ADDR etc. for shell commands.
  options.ready_timeout = recipe->ready_timeout;
  options.stop_requested = stop_requested;
  options.log = &err;
  return rank == 0 ? RunHead(options, done) : RunWorker(options, done);
}

}  // namespace gdt::launch
