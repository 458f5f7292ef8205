#include "common/cli_parse.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gdt {

std::optional<int> ParseCommandLine(CLI::App& app, int argc,
                                    const char* const* argv,
                                    const CliExitCodes& codes) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? codes.ok : codes.usage;
  }
  return std::nullopt;
}

std::optional<int> ParseCommandLine(CLI::App& app,
                                    std::vector<std::string>& reversed_args,
                                    std::ostream& out, std::ostream& err,
                                    const CliExitCodes& codes) {
  try {
    app.parse(reversed_args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err) == 0 ? codes.ok : codes.usage;
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
