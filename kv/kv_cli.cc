#include "kv/kv_cli.h"

#include <charconv>
#include <chrono>
#include <istream>
#include <iterator>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/cli_parse.h"
#include "common/terminal_text.h"
#include "nlohmann/json.hpp"
#include "rendezvous/kv_client.h"

namespace gdt::kv {
namespace {

int ExitFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kNotFound:
      return kExitNoMatch;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitTimeout;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return kExitUnavailable;
    default:
      return kExitRefused;
  }
}

std::string Dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A value in the JSON output: "value" when it is UTF-8 text, else (binary
// data, which JSON strings cannot carry) "value_base64" with its bytes in
// base64, so nothing is lost or replaced.
void PutValue(nlohmann::json& result, const std::string& value) {
  if (IsValidUtf8(value)) {
    result["value"] = value;
  } else {
    result["value_base64"] = absl::Base64Escape(value);
  }
}

// The first argument that looks like an option none of the commands has
// (CLI11 would otherwise report what it then misses, "value is required");
// "" when there is none. Numbers (add's N, a negative value) are not
// options, nor anything after "--".
std::string UnknownOption(const std::vector<std::string>& args) {
  static const std::set<std::string> kKnown = {
      "--timeout", "--json", "--raw", "--absent", "--help", "-h", "--version"};
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    if (double number; absl::SimpleAtod(arg, &number)) continue;
    const std::string name = arg.substr(0, arg.find('='));
    if (kKnown.count(name) == 0) return arg;
  }
  return "";
}

}  // namespace

int RunKvCli(int argc, const char* const* argv,
             const std::function<const char*(const char*)>& getenv,
             std::istream& in, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "gdt-kv: the gang key-value store of the current gdt job.\n"
      "Reads GDT_COORDINATOR, GDT_GANG_ID, GDT_EPOCH and GDT_KV_TOKEN, and\n"
      "GDT_TLS_CA_FILE, GDT_TLS_CERT_FILE, GDT_TLS_KEY_FILE for TLS.\n"
      "Exit codes: 0 ok, 1 no such key (get) or not swapped (cas), 2 usage,\n"
      "3 deadline passed, 4 refused (token, limits, non-integer),\n"
      "5 coordinator unavailable, or the gang ended during a wait.",
      "gdt-kv"};
  app.require_subcommand(1);
  double timeout_seconds = 30;
  bool json = false;
  app.add_option(
         "--timeout", timeout_seconds,
         "seconds before the call gives up (default 30, at most 31 days)")
      ->check(FiniteRange(0.001, 2678400));
  app.add_flag("--json", json, "print one JSON object");
  bool raw = false;
  app.add_flag("--raw", raw,
               "print the value exactly as stored, with no newline added "
               "(binary values)");

  std::string key;
  std::string value;
  std::vector<std::string> cas_values;  // OLD NEW, or NEW with --absent.
  int64_t delta = 0;
  bool absent = false;
  app.fallthrough();  // --timeout and --json also after the subcommand.
  CLI::App* set = app.add_subcommand("set", "set KEY to VALUE (- = stdin)");
  set->add_option("key", key)->required();
  set->add_option("value", value)->required();
  CLI::App* get = app.add_subcommand("get", "print KEY's value");
  get->add_option("key", key)->required();
  CLI::App* wait = app.add_subcommand("wait", "wait until KEY exists");
  wait->add_option("key", key)->required();
  CLI::App* cas =
      app.add_subcommand("cas", "set KEY to NEW if its value is OLD");
  cas->add_option("key", key)->required();
  cas->add_option("values", cas_values, "OLD NEW (or NEW with --absent)")
      ->required();
  cas->add_flag("--absent", absent, "swap only if KEY does not exist");
  CLI::App* add = app.add_subcommand("add", "add N to the counter at KEY");
  add->add_option("key", key)->required();
  add->add_option("n", delta)->required();

  if (const std::string unknown =
          UnknownOption(std::vector<std::string>(argv + 1, argv + argc));
      !unknown.empty()) {
    err << "gdt-kv: unknown option " << TerminalSafe(unknown)
        << " (gdt-kv --help; a value starting with '-' goes after --, as in "
           "gdt-kv set KEY -- VALUE)\n";
    return kExitUsage;
  }
  std::vector<std::string> args;
  for (int i = argc - 1; i > 0; --i) args.emplace_back(argv[i]);
  if (std::optional<int> code = ParseCommandLine(app, args, out, err)) {
    return *code;
  }
  if (*cas && cas_values.size() != (absent ? 1u : 2u)) {
    err << "gdt-kv cas: give KEY OLD NEW, or --absent KEY NEW\n";
    return kExitUsage;
  }
  const std::string command_name = app.get_subcommands().front()->get_name();
  // Keys travel as protobuf strings: checked here, so the answer is one
  // line rather than an empty refusal.
  if (key.empty()) {
    err << "gdt-kv " << command_name << ": the key is empty\n";
    return kExitUsage;
  }
  if (!IsValidUtf8(key)) {
    err << "gdt-kv " << command_name << ": the key is not valid UTF-8\n";
    return kExitUsage;
  }
  absl::StatusOr<rendezvous::KvTarget> target =
      rendezvous::KvTargetFromEnvironment(getenv);
  if (!target.ok()) {
    err << "gdt-kv: " << target.status().message() << "\n";
    return kExitUsage;
  }
  if (*set && value == "-") {
    value.assign(std::istreambuf_iterator<char>(in),
                 std::istreambuf_iterator<char>());
  }
  rendezvous::KvClient client(*target);
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(timeout_seconds));
  const std::string command = app.get_subcommands().front()->get_name();
  nlohmann::json result = {{"key", key}};
  absl::Status status;
  std::string line;  // Printed without --json.
  bool no_match = false;
  if (*set) {
    status = client.Set(key, value, deadline);
  } else if (*get || *wait) {
    absl::StatusOr<std::string> got =
        *get ? client.Get(key, deadline) : client.Wait(key, deadline);
    status = got.status();
    if (got.ok()) {
      line = *got;
      PutValue(result, *got);
    }
  } else if (*cas) {
    std::optional<std::string> old;
    if (!absent) old = cas_values.front();
    absl::StatusOr<rendezvous::KvCasOutcome> outcome =
        client.CompareAndSet(key, old, cas_values.back(), deadline);
    status = outcome.status();
    if (outcome.ok()) {
      no_match = !outcome->swapped;
      line = outcome->current.value_or("");
      result["swapped"] = outcome->swapped;
      if (outcome->current.has_value()) {
        PutValue(result, *outcome->current);
      } else {
        result["value"] = nullptr;
      }
    }
  } else if (*add) {
    absl::StatusOr<int64_t> sum = client.Add(key, delta, deadline);
    status = sum.status();
    if (sum.ok()) {
      line = absl::StrCat(*sum);
      result["value"] = *sum;
    }
  }
  if (absl::IsUnimplemented(status)) {
    // Something answered gRPC (or HTTP/2) there, but not the GangKv service.
    status = absl::UnavailableError(absl::StrCat(
        "GDT_COORDINATOR ", target->endpoint,
        " does not serve the gang key-value store (UNIMPLEMENTED",
        status.message().empty() ? "" : absl::StrCat(": ", status.message()),
        "): is it a gdt coordinator?"));
  } else if (absl::IsResourceExhausted(status) &&
             absl::StrContains(status.message(), "larger than max")) {
    // gRPC's own message limit, far above the store's.
    status = absl::ResourceExhaustedError(
        absl::StrCat("value of ", value.size(), " bytes for key '", key,
                     "' is above the limit of 65536 bytes"));
  }
  if (!status.ok()) {
    err << "gdt-kv " << command << ": " << status.message() << "\n";
    if (json) {
      result["error"] = std::string(status.message());
      out << Dump(result) << "\n";
    }
    return ExitFor(status);
  }
  if (json) {
    out << Dump(result) << "\n";
  } else if (!*set) {
    out << line;
    if (!raw) out << "\n";
  }
  return no_match ? kExitNoMatch : kExitOk;
}

}  // namespace gdt::kv
