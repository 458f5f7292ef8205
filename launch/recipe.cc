#include "launch/recipe.h"

#include <filesystem>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "yaml-cpp/yaml.h"

namespace gdt::launch {
namespace {

absl::Status Invalid(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("launcher recipe ", source, ": ", what));
}

absl::StatusOr<RecipeCommand> ParseCommand(const YAML::Node& node,
                                           const std::string& source,
                                           const std::string& field) {
  RecipeCommand command;
  if (node.IsScalar()) {
    command.shell = true;
    command.argv.push_back(node.as<std::string>());
    if (command.argv[0].empty()) {
      return Invalid(source, absl::StrCat("`", field, "` is empty"));
    }
    return command;
  }
  if (node.IsSequence() && node.size() > 0) {
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) {
        return Invalid(source,
                       absl::StrCat("`", field, "` must list strings only"));
      }
      command.argv.push_back(item.as<std::string>());
    }
    return command;
  }
  return Invalid(source,
                 absl::StrCat("`", field,
                              "` must be a command string or a non-empty list "
                              "of arguments"));
}

// Renders one string; `field` names it in errors.
absl::StatusOr<std::string> RenderText(
    const std::string& text, const std::map<std::string, std::string>& vars,
    const std::string& where) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    if (text[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (text[i + 1] != '{') {
      out += '$';
      continue;
    }
    const size_t close = text.find('}', i + 2);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unterminated \"${\" in '", text, "'"));
    }
    const std::string name = text.substr(i + 2, close - i - 2);
    auto it = vars.find(name);
    if (it == vars.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " uses ${", name, "}, which is not set in the job"));
    }
    out += it->second;
    i = close;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> RenderCommand(
    const RecipeCommand& command,
    const std::map<std::string, std::string>& vars, const std::string& where) {
  std::vector<std::string> argv;
  if (command.shell) {
    argv = {"/bin/sh", "-c"};
  }
  for (const std::string& arg : command.argv) {
    absl::StatusOr<std::string> rendered = RenderText(arg, vars, where);
    if (!rendered.ok()) return rendered.status();
    argv.push_back(*std::move(rendered));
  }
  return argv;
}

}  // namespace

absl::StatusOr<Recipe> ParseRecipe(const std::string& yaml,
                                   const std::string& source) {
  Recipe recipe;
  recipe.source = source;
  recipe.name = std::filesystem::path(source).stem().string();
  try {
    const YAML::Node root = YAML::Load(yaml);
    if (!root.IsMap()) return Invalid(source, "must be a YAML mapping");
    std::optional<RecipeCommand> head, worker;
    for (const auto& entry : root) {
      const std::string key = entry.first.as<std::string>();
      const YAML::Node& value = entry.second;
      if (key == "name") {
        recipe.name = value.as<std::string>();
      } else if (key == "description") {
        // Documentation only.
      } else if (key == "head" || key == "worker" || key == "ready_check") {
        absl::StatusOr<RecipeCommand> command =
            ParseCommand(value, source, key);
        if (!command.ok()) return command.status();
        if (key == "head") head = *command;
        if (key == "worker") worker = *command;
        if (key == "ready_check") recipe.ready_check = *command;
      } else if (key == "ready_timeout_seconds") {
        int64_t seconds = 0;
        if (!value.IsScalar() ||
            !absl::SimpleAtoi(value.as<std::string>(), &seconds) ||
            seconds < 1 || seconds > 86400) {
          return Invalid(source,
                         "`ready_timeout_seconds` must be 1..86400 seconds");
        }
        recipe.ready_timeout = std::chrono::seconds(seconds);
      } else if (key == "script_env") {
        if (!value.IsMap()) {
          return Invalid(source, "`script_env` must map names to values");
        }
        for (const auto& var : value) {
          if (!var.second.IsScalar()) {
            return Invalid(source, absl::StrCat("`script_env.",
                                                var.first.as<std::string>(),
                                                "` must be a string"));
          }
          recipe.script_env[var.first.as<std::string>()] =
              var.second.as<std::string>();
        }
      } else {
        return Invalid(
            source,
            absl::StrCat("unknown key `", key,
                         "` (use name, description, head, worker, "
                         "ready_check, ready_timeout_seconds, script_env)"));
      }
    }
    if (!head.has_value()) return Invalid(source, "has no `head` command");
    if (!worker.has_value()) return Invalid(source, "has no `worker` command");
    recipe.head = *head;
    recipe.worker = *worker;
  } catch (const YAML::Exception& e) {
    return Invalid(source, e.what());
  }
  return recipe;
}

absl::StatusOr<Recipe> LoadRecipe(const std::string& name_or_path,
                                  const std::vector<std::string>& dirs) {
  std::vector<std::string> candidates;
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       absl::EndsWith(name_or_path, ".yaml");
  if (is_path) {
    candidates.push_back(name_or_path);
  } else {
    for (const std::string& dir : dirs) {
      if (!dir.empty()) {
        candidates.push_back(absl::StrCat(dir, "/", name_or_path, ".yaml"));
      }
    }
  }
  for (const std::string& path : candidates) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) continue;
    absl::StatusOr<std::string> text = ReadTextFile(path);
    if (!text.ok()) return text.status();
    return ParseRecipe(*text, path);
  }
  return absl::NotFoundError(absl::StrCat(
      "no launcher recipe '", name_or_path, "' (looked for ",
      candidates.empty() ? std::string("nothing: no recipe directory")
                         : absl::StrJoin(candidates, ", "),
      ")"));
}

absl::StatusOr<RenderedRecipe> RenderRecipe(
    const Recipe& recipe, const std::map<std::string, std::string>& vars) {
  RenderedRecipe out;
  const std::string where = absl::StrCat("launcher recipe ", recipe.source);
  absl::StatusOr<std::vector<std::string>> head =
      RenderCommand(recipe.head, vars, absl::StrCat(where, " `head`"));
  if (!head.ok()) return head.status();
  out.head = *std::move(head);
  absl::StatusOr<std::vector<std::string>> worker =
      RenderCommand(recipe.worker, vars, absl::StrCat(where, " `worker`"));
  if (!worker.ok()) return worker.status();
  out.worker = *std::move(worker);
  if (!recipe.ready_check.empty()) {
    absl::StatusOr<std::vector<std::string>> check = RenderCommand(
        recipe.ready_check, vars, absl::StrCat(where, " `ready_check`"));
    if (!check.ok()) return check.status();
    out.ready_check = *std::move(check);
  }
  for (const auto& [name, value] : recipe.script_env) {
    absl::StatusOr<std::string> rendered = RenderText(
        value, vars, absl::StrCat(where, " `script_env.", name, "`"));
    if (!rendered.ok()) return rendered.status();
    out.script_env[name] = *std::move(rendered);
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> RecipeVariables(
    std::map<std::string, std::string> env) {
  auto need = [&env](const char* name) -> absl::StatusOr<std::string> {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          name, " is not set: gdt-launch runs inside a gdt job's script"));
    }
    return it->second;
  };
  for (const char* name : {"GDT_NODE_RANK", "GDT_NUM_NODES", "GDT_MASTER_ADDR",
                           "GDT_MASTER_PORT", "GDT_PEERS"}) {
    if (absl::StatusOr<std::string> value = need(name); !value.ok()) {
      return value.status();
    }
  }
  int rank = 0, nodes = 0;
  if (!absl::SimpleAtoi(env["GDT_NODE_RANK"], &rank) ||
      !absl::SimpleAtoi(env["GDT_NUM_NODES"], &nodes) || nodes < 1 ||
      rank < 0 || rank >= nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GDT_NODE_RANK '", env["GDT_NODE_RANK"], "' and GDT_NUM_NODES '",
        env["GDT_NUM_NODES"], "' are not a rank below a node count"));
  }
  const std::vector<std::string> peers =
      absl::StrSplit(env["GDT_PEERS"], '\n', absl::SkipEmpty());
  if (static_cast<int>(peers.size()) != nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GDT_PEERS lists ", peers.size(), " hosts for ", nodes, " nodes"));
  }
  env["GDT_SELF_ADDR"] = peers[rank];
  env["GDT_NUM_WORKERS"] = absl::StrCat(nodes - 1);
  env["GDT_HEAD_ADDR"] = env["GDT_MASTER_ADDR"];
  env["GDT_HEAD_PORT"] = env["GDT_MASTER_PORT"];
  return env;
}

}  // namespace gdt::launch
