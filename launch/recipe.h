#ifndef GDT_LAUNCH_RECIPE_H_
#define GDT_LAUNCH_RECIPE_H_

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::launch {

// One command of a recipe: either an argv list (run directly) or a string
// (run by /bin/sh -c). Empty when the recipe leaves it out.
struct RecipeCommand {
  std::vector<std::string> argv;  // As written, before rendering.
  bool shell = false;             // argv holds one string for /bin/sh -c.
  bool empty() const { return argv.empty(); }
};

// A head/worker launcher as data (launch/recipes/NAME.yaml, docs/launchers/):
// rank 0 runs `head`, every other rank runs `worker`; rank 0 polls
// `ready_check` until it exits 0, then runs the job's own command with
// `script_env` added to its environment.
struct Recipe {
  std::string name;
  std::string source;  // The file it was read from, for messages.
  RecipeCommand head;
  RecipeCommand worker;
  RecipeCommand ready_check;
  std::map<std::string, std::string> script_env;
  std::chrono::seconds ready_timeout{120};
};

// Parses a recipe from YAML text; `source` names it in errors.
// Errors: InvalidArgument with one line naming the file and the field (no
// `head` or `worker`, a command that is neither a string nor a list of
// strings, an unknown top-level key, a bad ready_timeout_seconds).
absl::StatusOr<Recipe> ParseRecipe(const std::string& yaml,
                                   const std::string& source);

// `name_or_path`: a path (contains '/' or ends in .yaml) or a recipe name
// looked up as DIR/NAME.yaml in `dirs`, in order.
// Errors: NotFound naming every place looked at; ParseRecipe's errors.
absl::StatusOr<Recipe> LoadRecipe(const std::string& name_or_path,
                                  const std::vector<std::string>& dirs);

// A command ready to run: argv, or {"/bin/sh", "-c", text} for a string.
struct RenderedRecipe {
  std::vector<std::string> head;
  std::vector<std::string> worker;
  std::vector<std::string> ready_check;  // Empty: ready once the head runs.
  std::map<std::string, std::string> script_env;
};

// Replaces every ${NAME} in the recipe's commands and script_env with
// vars[NAME]; "$$" stands for a literal '$'; any other '$' is kept.
// Errors: InvalidArgument naming the recipe, the field and the first
// variable that `vars` lacks, or an unterminated "${".
absl::StatusOr<RenderedRecipe> RenderRecipe(
    const Recipe& recipe, const std::map<std::string, std::string>& vars);

// The variables a recipe may use: `env` (the member's environment, with
// gdt's contract: GDT_NODE_RANK, GDT_NUM_NODES, GDT_MASTER_ADDR,
// GDT_MASTER_PORT, GDT_PEERS, ...) plus GDT_SELF_ADDR (this rank's line of
// GDT_PEERS), GDT_NUM_WORKERS (GDT_NUM_NODES - 1), GDT_HEAD_ADDR and
// GDT_HEAD_PORT (the master address and port leased for the gang).
// Errors: FailedPrecondition naming a missing or malformed GDT_* variable.
absl::StatusOr<std::map<std::string, std::string>> RecipeVariables(
    std::map<std::string, std::string> env);

}  // namespace gdt::launch

#endif  // GDT_LAUNCH_RECIPE_H_
