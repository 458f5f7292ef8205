#ifndef GDT_COMMON_CLI_PARSE_H_
#define GDT_COMMON_CLI_PARSE_H_

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/exit_code.h"

namespace gdt {

// The codes a command line ends with when parsing stops it: after --help or
// --version, and after a parse error. Most tools keep the defaults.
struct CliExitCodes {
  int ok = kExitOk;
  int usage = kExitUsage;
};

// Parses the command line into `app`. CLI11 reports --help, --version and
// every bad flag by throwing; this prints the help (or version) to `out`, or
// one line to `err` for a bad flag, "<tool>: <what is wrong> (--help says
// more)", and returns the code to end the command with. nullopt: parsed, go
// on. Every numeric option (of `app` and its subcommands) refuses an empty
// value, which CLI11 reads as 0, an unsigned one a negative value, which it
// wraps, and a 64-bit one a value beyond its range, which it clamps; an
// integer with leading zeros is decimal (CLI11 reads it as octal).
std::optional<int> ParseCommandLine(CLI::App& app, int argc,
                                    const char* const* argv,
                                    const CliExitCodes& codes = {});

// The same for arguments already in a vector, in CLI11's order (last
// argument first), with the streams given.
std::optional<int> ParseCommandLine(CLI::App& app,
                                    std::vector<std::string>& reversed_args,
                                    std::ostream& out, std::ostream& err,
                                    const CliExitCodes& codes = {});

// A number in [low, high] for a floating-point flag. CLI::Range lets NaN
// through (every comparison with it is false), and a NaN interval or
// timeout then spins or never ends; this refuses it, and infinities.
CLI::Validator FiniteRange(double low, double high);

}  // namespace gdt

#endif  // GDT_COMMON_CLI_PARSE_H_
