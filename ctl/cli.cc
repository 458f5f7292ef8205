#include "ctl/cli.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "common/cli_parse.h"
#include "common/exit_code.h"
#include "common/file.h"
#include "common/stop_signals.h"
#include "common/terminal_text.h"
#include "ctl/admin_token.h"
#include "ctl/cancel.h"
#include "ctl/hosts.h"
#include "ctl/status.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/tls.h"

namespace gdt::ctl {
namespace {

int Fail(int code, const std::string& message) {
  // Messages may quote names and reasons others chose.
  std::fprintf(stderr, "gdt-coord: %s\n", TerminalSafe(message).c_str());
  return code;
}

// A command's failure: its one line and the exit code for its status.
int Fail(const absl::Status& status) {
  return Fail(ExitCodeFor(status), std::string(status.message()));
}

// TLS for the client commands: flags, defaulting to the
// GDT_TLS_* variables; none set = plaintext.
struct TlsFlags {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

void AddTlsOptions(CLI::App& command, TlsFlags& flags) {
  command.add_option("--tls-ca-file", flags.ca_file,
                     "CA that signed the coordinator's certificate: talk TLS "
                     "(default: $GDT_TLS_CA_FILE; none = plaintext)");
  command.add_option("--tls-cert-file", flags.cert_file,
                     "Client certificate for a coordinator that requires "
                     "mTLS (default: $GDT_TLS_CERT_FILE)");
  command.add_option("--tls-key-file", flags.key_file,
                     "Key of --tls-cert-file (default: $GDT_TLS_KEY_FILE)");
}

absl::StatusOr<rendezvous::ClientSecurity> SecurityFrom(const TlsFlags& flags) {
  return rendezvous::ClientSecurityFromEnvironment(
      [&flags](const char* name) -> const char* {
        const std::string variable = name;
        if (variable == "GDT_TLS_CA_FILE") return flags.ca_file.c_str();
        if (variable == "GDT_TLS_CERT_FILE") return flags.cert_file.c_str();
        if (variable == "GDT_TLS_KEY_FILE") return flags.key_file.c_str();
        return nullptr;
      });
}

// `status --watch`: refreshes until SIGINT/SIGTERM or `count` frames.
int Watch(const std::string& endpoint, const std::string& admin_token,
          const StatusOptions& options,
          const rendezvous::ClientSecurity& security, double interval_seconds,
          int count) {
  const sigset_t signals = BlockStopSignals();
  WatchOptions watch;
  watch.interval =
      std::chrono::milliseconds(static_cast<int64_t>(interval_seconds * 1000));
  watch.count = count;
  watch.clear = isatty(STDOUT_FILENO) != 0;
  const absl::Status last =
      WatchStatus([&] { return FetchStatus(endpoint, security, admin_token); },
                  options, watch, std::cout,
                  [&](std::chrono::milliseconds interval) {
                    timespec timeout{};
                    timeout.tv_sec = interval.count() / 1000;
                    timeout.tv_nsec = (interval.count() % 1000) * 1000000;
                    return sigtimedwait(&signals, nullptr, &timeout) > 0;
                  });
  // The frame already showed the error line; only the exit code is left.
  return ExitCodeFor(last);
}

// Every command's --help ends with the exit codes it uses (common/exit_code.h:
// 0 and 2 mean the same everywhere). A client command's 1 is a missing or
// wrong admin token (and `failure`, if given), 4 (if given) a refusal.
std::string WithExitCodes(const std::string& help,
                          const std::string& failure = "",
                          const std::string& refused = "") {
  std::string text = help +
                     ". Exit codes: 0 ok, 1 a missing or wrong admin token" +
                     failure + ", 2 usage, 3 coordinator unreachable";
  if (!refused.empty()) text += ", 4 refused: " + refused;
  return text + ".";
}

}  // namespace

int RunCoordCli(int argc, char** argv, const CoordCommands& commands) {
  CLI::App app{
      "gdt-coord: the gdt coordinator. `serve` runs the daemon that admits "
      "and places gangs of GitLab CI jobs on GPU hosts; `status` shows its "
      "hosts and gangs; `hosts` lists, drains and removes hosts; `cancel` "
      "stops a gang; `gangs gc` ends abandoned forming gangs; `simulate` "
      "replays a job trace through the admission "
      "policy."};
  app.require_subcommand(1);
  app.set_version_flag("--version", commands.version);

  ServeFlags serve_flags;
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Run the coordinator daemon. Exit codes: 0 stopped by SIGINT or "
      "SIGTERM, 1 the state could not be opened or a file written, 2 bad "
      "flags or config, 3 cannot listen or reach etcd, 5 an HA replica lost "
      "its leader lease");
  serve
      ->add_option("--config", serve_flags.config,
                   "YAML config file: examples/coord.yaml to start from; "
                   "docs/admin-guide.md, security.md, ha.md, scheduling.md "
                   "and operations.md describe every key, and an unknown "
                   "key is refused by name")
      ->required();
  serve->add_option("--listen", serve_flags.listen,
                    "Address to serve on, host:port (port 0 = any free port); "
                    "overrides listen_address");
  serve->add_option("--state", serve_flags.state,
                    "SQLite state file; overrides state_path");
  serve->add_option("--port-file", serve_flags.port_file,
                    "Write the bound host:port here once serving");
  serve->add_option("--metrics-port-file", serve_flags.metrics_port_file,
                    "Write the bound host:port of /metrics here once serving "
                    "(needs metrics_address)");
  serve->add_option("--dashboard-port-file", serve_flags.dashboard_port_file,
                    "Write the bound host:port of the web dashboard here once "
                    "serving (needs dashboard_address)");

  std::string endpoint = "127.0.0.1:7070";
  if (const char* env = std::getenv("GDT_COORDINATOR"); env && *env) {
    endpoint = env;
  }
  // Operator credentials (docs/security.md): a file, never a value in argv.
  std::string admin_token_file;
  constexpr const char* kAdminTokenHelp =
      "File holding the coordinator's admin token (default: "
      "$GDT_ADMIN_TOKEN_FILE); needed when the coordinator has "
      "admin_token_file";
  TlsFlags tls_flags;
  for (auto [name, field] :
       {std::pair{"GDT_TLS_CA_FILE", &tls_flags.ca_file},
        std::pair{"GDT_TLS_CERT_FILE", &tls_flags.cert_file},
        std::pair{"GDT_TLS_KEY_FILE", &tls_flags.key_file}}) {
    if (const char* env = std::getenv(name); env != nullptr) *field = env;
  }
  StatusOptions status_options;
  bool watch = false;
  int count = 0;
  double interval_seconds = 2;
  CLI::App* status = app.add_subcommand(
      "status",
      WithExitCodes("Show the cluster: hosts, gangs by state with members "
                    "and waiting reasons, recent failures; or one gang in "
                    "detail",
                    " or an unknown or ambiguous GANG"));
  status->add_option("gang", status_options.gang,
                     "Show this gang in detail (gang id or a unique prefix)");
  status->add_option("--coordinator", endpoint,
                     "Coordinator host:port (default: $GDT_COORDINATOR, else "
                     "127.0.0.1:7070)");
  status->add_flag("--json", status_options.json, "Print JSON for scripts");
  status->add_option("--admin-token-file", admin_token_file, kAdminTokenHelp);
  AddTlsOptions(*status, tls_flags);
  status->add_flag("--all", status_options.all,
                   "Include finished gangs (done, or failed and left)");
  status
      ->add_option("--limit", status_options.limit,
                   "Show at most N hosts and N gangs (default 50; 0 = all); "
                   "--json is always complete")
      ->check(CLI::Range(0, 1000000));
  status->add_flag("--watch", watch,
                   "Refresh every --interval seconds until interrupted; with "
                   "--json, one JSON object per line and refresh (JSON "
                   "Lines)");
  CLI::Option* interval_option =
      status
          ->add_option("--interval", interval_seconds,
                       "With --watch: seconds between refreshes (default 2)")
          ->check(FiniteRange(0.1, 3600));
  CLI::Option* count_option =
      status
          ->add_option("--count", count,
                       "With --watch: stop after this many refreshes (0 = "
                       "never)")
          ->check(CLI::Range(0, 1000000));

  constexpr char kUnknownHost[] = "an unknown host";
  CLI::App* hosts = app.add_subcommand(
      "hosts",
      WithExitCodes("List, drain, undrain or remove hosts of a coordinator", "",
                    "an unknown host, a remove while members run there, or a "
                    "revoke of a host with no token"));
  hosts->require_subcommand(1);
  hosts->fallthrough();  // `hosts list --coordinator X` works too.
  hosts->add_option("--coordinator", endpoint,
                    "Coordinator host:port (default: $GDT_COORDINATOR, else "
                    "127.0.0.1:7070)");
  hosts->add_option("--admin-token-file", admin_token_file, kAdminTokenHelp);
  AddTlsOptions(*hosts, tls_flags);
  bool hosts_json = false;
  CLI::App* hosts_list = hosts->add_subcommand(
      "list", WithExitCodes("Show every host with its GPUs and state"));
  hosts_list->add_flag("--json", hosts_json, "Print JSON for scripts");
  size_t hosts_limit = kDefaultRowLimit;
  hosts_list
      ->add_option("--limit", hosts_limit,
                   "Show at most N hosts (default 50; 0 = all); --json is "
                   "always complete")
      ->check(CLI::Range(0, 1000000));
  std::string host_name;
  std::string host_action;
  for (const auto& [name, help, refused] :
       {std::tuple<const char*, const char*, std::string>{
            "drain", "Take no new gangs on HOST; running gangs finish",
            kUnknownHost},
        {"undrain", "Let HOST take gangs again", kUnknownHost},
        {"remove",
         "Forget HOST (refused while members run there; a running agent "
         "registers it again)",
         std::string(kUnknownHost) + " or members run there"}}) {
    CLI::App* action =
        hosts->add_subcommand(name, WithExitCodes(help, "", refused));
    action->add_option("HOST", host_name, "Host name")->required();
    action->callback(
        [&host_action, action]() { host_action = action->get_name(); });
  }

  // Host tokens.
  std::string token_action;
  std::string token_output;
  CLI::App* token_cmd = hosts->add_subcommand(
      "token",
      WithExitCodes(
          "Host tokens agents register with (require_host_tokens): create "
          "HOST prints a new token once, list shows hosts with tokens, "
          "revoke HOST refuses its agent",
          "", "a revoke of a host with no token"));
  token_cmd->require_subcommand(1);
  token_cmd->fallthrough();  // `--coordinator`/`--admin-token-file` after.
  for (const auto& [name, help, refused] :
       {std::tuple<const char*, const char*, const char*>{
            "create",
            "Issue a token for HOST (replacing its old one) and print it; "
            "store it in the agent's host_token_file. HOST must be one line "
            "of printable text",
            ""},
        {"list", "Show the hosts that have a token (never the tokens)", ""},
        {"revoke", "Revoke HOST's token: its agent is refused from now on",
         "HOST has no token"}}) {
    CLI::App* action =
        token_cmd->add_subcommand(name, WithExitCodes(help, "", refused));
    if (std::string(name) != "list") {
      action->add_option("HOST", host_name, "Host name")->required();
    }
    if (std::string(name) == "create") {
      action->add_option(
          "--output", token_output,
          "Write the token to FILE (mode 0600, replacing it) instead of "
          "printing it; a shell redirection would leave it readable by all");
    }
    action->callback(
        [&token_action, action]() { token_action = action->get_name(); });
  }

  CLI::App* simulate = app.add_subcommand(
      "simulate",
      "Replay a job trace through the gang admission policy in virtual time. "
      "Exit codes: 0 replayed, 1 an unreadable or bad trace, 2 bad flags, 3 "
      "the replay stalled");
  commands.add_simulate_options(*simulate);

  std::string cancel_gang;
  std::string cancel_reason;
  CLI::App* cancel = app.add_subcommand(
      "cancel",
      "Fail a forming or running gang as \"cancelled by operator\": every "
      "member's job stops and prints the same root-cause line. Exit codes: "
      "0 cancelled, 1 an unknown or already finished gang or a missing or "
      "wrong admin token, 2 usage (also a --reason over 1 KiB), 3 "
      "coordinator unreachable.");
  cancel->add_option("GANG", cancel_gang,
                     "Gang id, as `gdt-coord status` shows it (or --forming)");
  bool cancel_forming = false;
  int64_t cancel_project = 0;
  int64_t cancel_pipeline = 0;
  cancel->add_flag("--forming", cancel_forming,
                   "Instead of one GANG: cancel every forming gang (of "
                   "--project and --pipeline when given); running gangs are "
                   "untouched. Prints how many; logged by the coordinator as "
                   "event=forming_gangs_cancelled_by_operator");
  cancel->add_option("--project", cancel_project,
                     "With --forming: only gangs of this project id");
  cancel->add_option("--pipeline", cancel_pipeline,
                     "With --forming: only gangs of this pipeline id");
  cancel->add_option("--reason", cancel_reason,
                     "Text appended to the root-cause line (at most 1024 "
                     "bytes)");
  bool cancel_force = false;
  cancel->add_flag(
      "--force", cancel_force,
      "Free the gang's GPU, slot and port leases whatever its state (also "
      "failed or finished ones still holding them): every member counts as "
      "left. Logged by the coordinator as event=gang_force_cancelled");
  cancel->add_option("--admin-token-file", admin_token_file, kAdminTokenHelp);
  cancel->add_option("--coordinator", endpoint,
                     "Coordinator host:port (default: $GDT_COORDINATOR, else "
                     "127.0.0.1:7070)");
  AddTlsOptions(*cancel, tls_flags);

  CLI::App* gangs = app.add_subcommand(
      "gangs", WithExitCodes("Housekeeping of the coordinator's gangs", ""));
  gangs->require_subcommand(1);
  gangs->fallthrough();
  gangs->add_option("--coordinator", endpoint,
                    "Coordinator host:port (default: $GDT_COORDINATOR, else "
                    "127.0.0.1:7070)");
  gangs->add_option("--admin-token-file", admin_token_file, kAdminTokenHelp);
  AddTlsOptions(*gangs, tls_flags);
  CLI::App* gangs_gc = gangs->add_subcommand(
      "gc", WithExitCodes("End every forming gang none of whose members is "
                          "present now (the coordinator does so itself after "
                          "forming_gang_abandon_seconds)",
                          ""));

  if (std::optional<int> code = ParseCommandLine(app, argc, argv)) {
    return *code;
  }
  if (serve->parsed()) return commands.serve(serve_flags);
  if (status->parsed() && !watch &&
      (interval_option->count() > 0 || count_option->count() > 0)) {
    return Fail(
        kExitUsage,
        std::string(count_option->count() > 0 ? "--count" : "--interval") +
            " only applies to --watch (add --watch, or drop it)");
  }
  if (simulate->parsed()) return commands.simulate();
  absl::StatusOr<std::string> admin_token =
      LoadAdminToken(admin_token_file, std::getenv("GDT_ADMIN_TOKEN_FILE"));
  if (!admin_token.ok()) {
    return Fail(kExitUsage, std::string(admin_token.status().message()));
  }
  absl::StatusOr<rendezvous::ClientSecurity> security = SecurityFrom(tls_flags);
  if (!security.ok()) {
    return Fail(kExitUsage, std::string(security.status().message()));
  }
  if (absl::Status address = rendezvous::CheckCoordinatorAddress(endpoint);
      !address.ok()) {
    return Fail(kExitUsage, std::string(address.message()));
  }
  if (token_cmd->parsed()) {
    absl::StatusOr<std::string> out = RunHostTokenCommand(
        endpoint, token_action, host_name, *security, *admin_token);
    if (!out.ok()) return Fail(out.status());
    if (!token_output.empty()) {
      if (absl::Status written = WriteFileAtomically(token_output, *out, 0600);
          !written.ok()) {
        return Fail(kExitFailure, std::string(written.message()));
      }
      std::cout << "host token of " << host_name << " written to "
                << token_output << " (mode 0600)\n";
      return kExitOk;
    }
    std::cout << *out;
    return kExitOk;
  }
  if (hosts->parsed()) {
    absl::StatusOr<std::string> out =
        host_action.empty() ? RunHostsList(endpoint, hosts_json, *security,
                                           *admin_token, hosts_limit)
                            : RunHostsAction(endpoint, host_action, host_name,
                                             *security, *admin_token);
    if (!out.ok()) return Fail(out.status());
    std::cout << *out;
    return kExitOk;
  }
  if (cancel->parsed()) {
    if (cancel_forming == !cancel_gang.empty()) {
      return Fail(kExitUsage,
                  "cancel takes either a GANG or --forming (see --help)");
    }
    if (!cancel_forming && (cancel_project != 0 || cancel_pipeline != 0)) {
      return Fail(kExitUsage, "--project and --pipeline need --forming");
    }
    if (cancel_forming && cancel_force) {
      return Fail(kExitUsage,
                  "--force applies to one GANG, not to --forming (forming "
                  "gangs hold no leases)");
    }
    absl::StatusOr<std::string> done =
        cancel_forming
            ? RunCancelFormingCommand(endpoint, cancel_project, cancel_pipeline,
                                      cancel_reason, *security, *admin_token)
            : RunCancelCommand(endpoint, cancel_gang, cancel_reason, *security,
                               *admin_token, cancel_force);
    if (!done.ok()) return Fail(done.status());
    std::cout << *done;
    return kExitOk;
  }
  if (gangs_gc->parsed()) {
    absl::StatusOr<std::string> done =
        RunGangsGcCommand(endpoint, *security, *admin_token);
    if (!done.ok()) return Fail(done.status());
    std::cout << *done;
    return kExitOk;
  }
  if (!watch) {
    absl::StatusOr<std::string> text =
        RunStatusCommand(endpoint, status_options, *security, *admin_token);
    if (!text.ok()) return Fail(text.status());
    std::cout << *text;
    return kExitOk;
  }
  return Watch(endpoint, *admin_token, status_options, *security,
               interval_seconds, count);
}

}  // namespace gdt::ctl
