#include <variant>

#include "executor/stage_support.h"
#include "executor/stages.h"
#include "nlohmann/json.hpp"

namespace gdt::executor {

Outcome ConfigStage(const StageContext& context) {
  std::variant<JobInfo, Outcome> job = LoadJob(context.env);
  if (Outcome* failure = std::get_if<Outcome>(&job)) return *failure;
  const JobInfo& info = std::get<JobInfo>(job);

  nlohmann::ordered_json output = {
      {"builds_dir", BuildsDirOf(context.config, info.job_id)},
      {"cache_dir", context.config.cache_root},
      {"builds_dir_is_shared", false},
      {"hostname", context.config.arrival_host},
      {"driver", {{"name", "gdt"}, {"version", "0.1.0"}}},
  };
  context.out << output.dump() << std::endl;
  return Outcome::Success();
}

}  // namespace gdt::executor
