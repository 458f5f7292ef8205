#include "launch/head_worker.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/subprocess.h"

namespace gdt::launch {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;

absl::StatusOr<std::unique_ptr<Subprocess>> Start(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env) {
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.env = env;
  spawn.new_process_group = true;
  spawn.capture_output = false;  // Straight into the job log.
  spawn.die_with_parent = true;
  return Subprocess::Spawn(spawn);
}

std::string Describe(const ExitStatus& status) {
  return status.signal != 0 ? absl::StrCat("signal ", status.signal)
                            : absl::StrCat("code ", status.exit_code);
}

int FailureCode(const ExitStatus& status) {
  return status.success() ? 1 : status.code();
}

// Runs the ready check once, at most `timeout`, with `env`.
constexpr char kCheckTimedOut[] = "timed out after ";

bool ReadyCheckPasses(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env,
                      milliseconds timeout, std::string* output) {
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.env = env;
  absl::StatusOr<std::unique_ptr<Subprocess>> check = Subprocess::Spawn(spawn);
  if (!check.ok()) {
    *output = std::string(check.status().message());
    return false;
  }
  output->clear();
  auto collect = [output](OutputSource, std::string_view chunk) {
    if (output->size() < 4096) output->append(chunk);
  };
  std::optional<ExitStatus> status =
      (*check)->WaitUntil(steady_clock::now() + timeout, collect);
  if (!status.has_value()) {
    (*check)->Terminate(milliseconds(500), collect);
    *output = absl::StrCat(kCheckTimedOut, timeout.count(), " ms");
    return false;
  }
  return status->success();
}

std::string LastLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  const size_t newline = text.rfind('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

}  // namespace

int RunHead(const HeadWorkerOptions& options, DoneSignal& done) {
  std::ostream& log = *options.log;
  const std::string& name = options.recipe_name;
  absl::StatusOr<std::unique_ptr<Subprocess>> head =
      Start(options.commands.head, options.env);
  if (!head.ok()) {
    log << "gdt-launch: " << name << ": cannot start the head ("
        << options.commands.head[0] << "): " << head.status().message() << "\n";
    return 127;
  }
  log << "gdt-launch: " << name << ": head started on rank 0: "
      << absl::StrJoin(options.commands.head, " ") << std::endl;

  const steady_clock::time_point started = steady_clock::now();
  const steady_clock::time_point ready_deadline =
      started + options.ready_timeout;
  if (!options.commands.ready_check.empty()) {
    std::string last_output;
    while (true) {
      if (int signal = options.stop_requested(); signal != 0) {
        (*head)->Terminate(options.stop_grace);
        return 128 + signal;
      }
      if (std::optional<ExitStatus> status = (*head)->TryWait()) {
        log << "gdt-launch: " << name << ": the head exited with "
            << Describe(*status) << " before the " << options.num_workers
            << " workers were ready" << std::endl;
        return FailureCode(*status);
      }
      const milliseconds left = std::chrono::duration_cast<milliseconds>(
          ready_deadline - steady_clock::now());
      if (left <= milliseconds(0)) {
        log << "gdt-launch: " << name << ": the " << options.num_workers
            << " workers were not ready after " << options.ready_timeout.count()
            << " s (ready_timeout_seconds); last ready_check said: "
            << LastLine(last_output) << std::endl;
        (*head)->Terminate(options.stop_grace);
        return 1;
      }
      std::string output;
      if (ReadyCheckPasses(options.commands.ready_check, options.env,
                           std::min(left, milliseconds(30000)), &output)) {
        break;
      }
      // A check cut short by the deadline says less than the last one that
      // finished: keep that one for the message.
      if (!output.starts_with(kCheckTimedOut) || last_output.empty()) {
        last_output = std::move(output);
      }
      // Waits on the head (it must not exit) rather than sleeping.
      (*head)->WaitUntil(steady_clock::now() + options.poll_interval);
    }
  }
  log << "gdt-launch: " << name << ": " << options.num_workers
      << " workers joined after "
      << std::chrono::duration_cast<milliseconds>(steady_clock::now() - started)
             .count()
      << " ms; running: " << absl::StrJoin(options.script, " ") << std::endl;

  std::map<std::string, std::string> script_env = options.env;
  for (const auto& [key, value] : options.commands.script_env) {
    script_env[key] = value;
  }
  int code = 0;
  absl::StatusOr<std::unique_ptr<Subprocess>> script =
      Start(options.script, script_env);
  if (!script.ok()) {
    log << "gdt-launch: " << name
        << ": cannot start the script: " << script.status().message()
        << std::endl;
    code = 127;
  } else {
    while (true) {
      if (std::optional<ExitStatus> status =
              (*script)->WaitUntil(steady_clock::now() + milliseconds(200))) {
        code = status->code();
        break;
      }
      if (int signal = options.stop_requested(); signal != 0) {
        (*script)->Terminate(options.stop_grace);
        (*head)->Terminate(options.stop_grace);
        return 128 + signal;
      }
      if (std::optional<ExitStatus> status = (*head)->TryWait()) {
        log << "gdt-launch: " << name << ": the head exited with "
            << Describe(*status) << " while the script ran; stopping it"
            << std::endl;
        (*script)->Terminate(options.stop_grace);
        code = FailureCode(*status);
        break;
      }
    }
  }
  if (absl::Status announced = done.Announce(code); !announced.ok()) {
    log << "gdt-launch: " << name
        << ": could not tell the workers that the script ended: "
        << announced.message() << std::endl;
  }
  log << "gdt-launch: " << name << ": script ended with code " << code
      << "; stopping the head" << std::endl;
  if (!(*head)->exit_status().has_value()) {
    (*head)->Terminate(options.stop_grace);
  }
  return code;
}

int RunWorker(const HeadWorkerOptions& options, DoneSignal& done) {
  std::ostream& log = *options.log;
  const std::string& name = options.recipe_name;
  absl::StatusOr<std::unique_ptr<Subprocess>> worker =
      Start(options.commands.worker, options.env);
  if (!worker.ok()) {
    log << "gdt-launch: " << name << ": cannot start the worker ("
        << options.commands.worker[0] << "): " << worker.status().message()
        << std::endl;
    return 127;
  }
  log << "gdt-launch: " << name << ": worker started on rank " << options.rank
      << ": " << absl::StrJoin(options.commands.worker, " ") << std::endl;
  while (true) {
    if (std::optional<ExitStatus> status = (*worker)->TryWait()) {
      log << "gdt-launch: " << name << ": the worker on rank " << options.rank
          << " exited with " << Describe(*status)
          << " before rank 0's script finished" << std::endl;
      return FailureCode(*status);
    }
    if (int signal = options.stop_requested(); signal != 0) {
      (*worker)->Terminate(options.stop_grace);
      return 128 + signal;
    }
    absl::StatusOr<std::optional<int>> result =
        done.WaitUntil(system_clock::now() + seconds(1));
    if (!result.ok()) {
      log << "gdt-launch: " << name << ": stopping the worker on rank "
          << options.rank << ": " << result.status().message() << std::endl;
      (*worker)->Terminate(options.stop_grace);
      return 1;
    }
    if (result->has_value()) {
      log << "gdt-launch: " << name << ": rank 0's script ended with code "
          << **result << "; stopping the worker on rank " << options.rank
          << std::endl;
      (*worker)->Terminate(options.stop_grace);
      return 0;
    }
  }
}

}  // namespace gdt::launch
