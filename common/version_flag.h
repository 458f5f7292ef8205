#ifndef GDT_COMMON_VERSION_FLAG_H_
#define GDT_COMMON_VERSION_FLAG_H_

#include <ostream>
#include <string_view>

namespace gdt {

// For mains whose command line a library parses: true (after printing
// `name_and_version` and a newline to `out`) when the only argument is
// --version, so every installed binary answers it alike.
inline bool PrintVersionIfAsked(int argc, const char* const* argv,
                                std::string_view name_and_version,
                                std::ostream& out) {
  if (argc != 2 || std::string_view(argv[1]) != "--version") return false;
  out << name_and_version << "\n";
  return true;
}

}  // namespace gdt

#endif  // GDT_COMMON_VERSION_FLAG_H_
