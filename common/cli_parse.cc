#include "common/cli_parse.h"

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

}  // namespace gdt
