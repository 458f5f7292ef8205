#ifndef GDT_TESTING_DEVICE_NODES_H_
#define GDT_TESTING_DEVICE_NODES_H_

#include <cstdint>
#include <fstream>
#include <set>
#include <string>

namespace gdt::testing {

// A character device major /proc/devices does not list, from the range
// Linux leaves to local use; 0 when every one of them is taken. A node of
// it stands in for a GPU's: opening it fails with ENXIO ("No such device
// or address", no driver) unless a device program refuses it first with
// EPERM ("Operation not permitted").
inline uint32_t UnusedCharMajor() {
  std::ifstream devices("/proc/devices");
  std::set<uint32_t> used;
  std::string line;
  bool chars = false;
  while (std::getline(devices, line)) {
    if (line.rfind("Character", 0) == 0) {
      chars = true;
    } else if (line.rfind("Block", 0) == 0) {
      chars = false;
    } else if (chars && !line.empty()) {
      used.insert(static_cast<uint32_t>(std::stoul(line)));
    }
  }
  for (uint32_t major = 234; major <= 254; ++major) {
    if (used.count(major) == 0) return major;
  }
  return 0;
}

}  // namespace gdt::testing

#endif  // GDT_TESTING_DEVICE_NODES_H_
