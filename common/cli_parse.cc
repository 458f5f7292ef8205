#include "common/cli_parse.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace gdt {

namespace {

// Strips the leading zeros of a decimal integer ("010" -> "10", "-007" ->
// "-7"): CLI11 reads integers with base 0, so "010" would be 8.
void StripLeadingZeros(std::string& input) {
  const size_t digits = input[0] == '-' || input[0] == '+' ? 1 : 0;
  size_t zeros = digits;
  while (zeros + 1 < input.size() && input[zeros] == '0' &&
         absl::ascii_isdigit(static_cast<unsigned char>(input[zeros + 1]))) {
    ++zeros;
  }
  input.erase(digits, zeros - digits);
}

// CLI11 reads an empty value as 0 for a number, "-1" as 2^64 - 1 for an
// unsigned one and a 64-bit integer beyond its range as the nearest limit,
// and it takes a leading 0 for octal: the first three are refused and a
// leading zero is read as decimal, for every numeric option of `app` and its
// subcommands.
void CheckNumbers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    // The type name, without the descriptions of the option's validators
    // ("INT:INT in [1 - 100]").
    const std::string full_type = option->get_type_name();
    const std::string type = full_type.substr(0, full_type.find(':'));
    if (type != "INT" && type != "UINT" && type != "FLOAT") continue;
    const bool is_integer = type != "FLOAT";
    const bool is_unsigned = type == "UINT";
    // A transform runs before the option's own checks (CLI::Range reads
    // the value again), and may rewrite it.
    option->transform(CLI::Validator(
        [is_integer, is_unsigned](std::string& input) -> std::string {
          if (input.empty()) return "a number is needed, not an empty value";
          if (is_unsigned && input.find('-') != std::string::npos) {
            return absl::StrCat("Value ", input, " is below 0");
          }
          if (!is_integer) return "";
          StripLeadingZeros(input);
          errno = 0;
          char* end = nullptr;
          if (is_unsigned) {
            std::strtoull(input.c_str(), &end, 0);
          } else {
            std::strtoll(input.c_str(), &end, 0);
          }
          if (errno == ERANGE) {
            return absl::StrCat("Value ", input, " is out of range (",
                                is_unsigned ? "0 to 2^64-1" : "-2^63 to 2^63-1",
                                ")");
          }
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) CheckNumbers(*sub);
}

// For a tool that needs a subcommand: "" when `first` (the first argument)
// is an option or one of them, else one line naming it and the commands
// (CLI11 would only say that a subcommand is required).
std::string UnknownCommand(CLI::App& app, const std::string& first,
                           std::string name) {
  if (app.get_require_subcommand_min() == 0 || first.empty() ||
      first[0] == '-') {
    return "";
  }
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->check_name(first)) return "";
    names.push_back(sub->get_name());
  }
  if (name.empty()) name = app.get_name();
  return absl::StrCat(name, ": unknown command '", first,
                      "' (commands: ", absl::StrJoin(names, ", "),
                      "; --help says more)\n");
}

// Ends the parse. --help and --version print what CLI11 has for them. A
// parse error is one line on `err`, "<name>: <what is wrong> (--help says
// more)", as every other mistake a gdt tool names; CLI11 itself would add
// a second line pointing at --help.
// CLI11 checks required options and subcommands before it complains about
// arguments it does not know, so `tool --bogus` said "--config is required"
// without naming `--bogus`. The unknown argument is what the user got wrong:
// report it first.
int ExitOnParseError(CLI::App& app, const CLI::ParseError& e,
                     const std::string& name, std::ostream& out,
                     std::ostream& err, const CliExitCodes& codes) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    return app.exit(e, out, err) == 0 ? codes.ok : codes.usage;
  }
  std::string what = e.what();
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    if (const std::vector<std::string> extra = app.remaining(true);
        !extra.empty()) {
      what = CLI::ExtrasError(extra).what();
    }
  }
  what = absl::StrReplaceAll(absl::StripAsciiWhitespace(what), {{"\n", "; "}});
  err << (name.empty() ? "" : name + ": ") << what << " (--help says more)\n";
  return codes.usage;
}

}  // namespace

std::optional<int> ParseCommandLine(CLI::App& app, int argc,
                                    const char* const* argv,
                                    const CliExitCodes& codes) {
  CheckNumbers(app);
  const std::string name =
      argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "";
  if (argc > 1) {
    if (const std::string unknown = UnknownCommand(app, argv[1], name);
        !unknown.empty()) {
      std::cerr << unknown;
      return codes.usage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitOnParseError(app, e, name, std::cout, std::cerr, codes);
  }
  return std::nullopt;
}

std::optional<int> ParseCommandLine(CLI::App& app,
                                    std::vector<std::string>& reversed_args,
                                    std::ostream& out, std::ostream& err,
                                    const CliExitCodes& codes) {
  CheckNumbers(app);
  if (!reversed_args.empty()) {
    if (const std::string unknown =
            UnknownCommand(app, reversed_args.back(), "");
        !unknown.empty()) {
      err << unknown;
      return codes.usage;
    }
  }
  try {
    app.parse(reversed_args);
  } catch (const CLI::ParseError& e) {
    return ExitOnParseError(app, e, app.get_name(), out, err, codes);
  }
  return std::nullopt;
}

CLI::Validator FiniteRange(double low, double high) {
  const std::string range = absl::StrFormat("%.15g to %.15g", low, high);
  return CLI::Validator(
      [low, high, range](std::string& input) -> std::string {
        double value = 0;
        if (!absl::SimpleAtod(input, &value) || !std::isfinite(value) ||
            value < low || value > high) {
          return absl::StrCat("Value ", input, " not in range ", range);
        }
        return "";
      },
      absl::StrCat("FLOAT in ", range));
}

}  // namespace gdt
