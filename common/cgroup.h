// cgroup v2 directories a process makes for the processes it starts, so
// that it can end all of them at once, including those that left their
// process group (setsid, daemons).
#ifndef GDT_COMMON_CGROUP_H_
#define GDT_COMMON_CGROUP_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt {

// The cgroup v2 directory this process is in, from /proc/self/cgroup and
// the cgroup2 mount in /proc/self/mountinfo. Errors: NotFound when there is
// no cgroup v2 hierarchy.
absl::StatusOr<std::string> OwnCgroupDir();

// A device as the kernel numbers it (st_rdev of its node).
struct DeviceNumber {
  uint32_t major = 0;
  uint32_t minor = 0;
  auto operator<=>(const DeviceNumber&) const = default;
};

// The character device `path` names (following links, as open() would).
// Errors: NotFound when there is none; FailedPrecondition when it is not a
// character device.
absl::StatusOr<DeviceNumber> CharDeviceOf(const std::string& path);

// Ports a cgroup's processes may not bind, both ends included.
struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
  friend bool operator==(const PortRange&, const PortRange&) = default;
};

// One child cgroup per name (e.g. per gang member) under a parent
// directory its user owns.
// Thread-safe: every call works on its own directory.
class CgroupTree {
 public:
  // Creates `parent` (with its parents) and checks that a child cgroup can
  // be made in it and a process moved into it. Errors: FailedPrecondition
  // naming the directory when cgroup v2 is not writable there.
  static absl::StatusOr<std::unique_ptr<CgroupTree>> Open(
      const std::string& parent);

  const std::string& parent() const { return parent_; }

  // From now on every cgroup Create() makes (or finds) gets `max` in its
  // pids.max: how many processes and threads it may hold at once. Makes
  // the pids controller available below the parent first (`+pids` in the
  // cgroup.subtree_control of the parent and of each ancestor below the
  // nearest one that has it; a threaded controller, so a cgroup holding
  // processes, like the agent's own, may pass it on). Call before sharing
  // the tree. Errors: FailedPrecondition naming why (the controller is
  // bound to a cgroup v1 hierarchy, or a file is not writable); the tree
  // then sets no limit.
  absl::Status LimitPids(uint64_t max);
  uint64_t pids_max() const { return pids_max_; }

  // The same for memory: every cgroup Create() makes gets `max` bytes in
  // memory.max, 0 in memory.swap.max (where the kernel has it: the limit is
  // not dodged by swapping) and 1 in memory.oom.group (an out-of-memory
  // kill takes all its processes, not one worker of many). Makes the memory
  // controller available below the parent first. Errors: FailedPrecondition
  // naming why; the tree then sets no memory limit.
  absl::Status LimitMemory(uint64_t max);
  uint64_t memory_max() const { return memory_max_; }

  // From now on the character devices in `guarded` (say, every GPU of the
  // host) may be opened in a cgroup of this tree only where AllowDevices()
  // allowed them: every cgroup Create() makes gets a device program (a BPF
  // program of type CGROUP_DEVICE; cgroup v2 has no devices.deny file)
  // refusing all of them with EPERM, whatever the account. Other devices
  // stay open. Checks first, on a cgroup of its own, that the kernel loads
  // and attaches such a program. Errors: FailedPrecondition naming why
  // (no bpf(), no privilege for it); the tree then guards nothing.
  absl::Status GuardDevices(std::vector<DeviceNumber> guarded);
  const std::vector<DeviceNumber>& guarded_devices() const { return guarded_; }

  // Lets the cgroup of `name` open the guarded devices in `allowed` (the
  // others stay refused), replacing what it was allowed before. Processes
  // already in it are bound by the new program at once. Errors: Internal
  // naming the cgroup.
  absl::Status AllowDevices(const std::string& name,
                            const std::vector<DeviceNumber>& allowed) const;

  // Checks, on a cgroup of its own, that the kernel loads and attaches the
  // bind programs GuardPorts() uses. Errors: FailedPrecondition naming why
  // (no bpf(), no privilege for it, no bind hooks in the kernel).
  absl::Status CheckPortGuard() const;

  // Refuses with EPERM every bind() a process in the cgroup of `name` makes
  // to a port in `guarded` other than `allowed` (0 = to all of them), over
  // IPv4 and IPv6 (v4-mapped addresses included) and for any protocol; a
  // bind to port 0 or outside `guarded` goes through. Replaces the ports
  // guarded there before; processes already in it are bound at once. A
  // bind hook (BPF programs of type CGROUP_SOCK_ADDR), so it covers binds
  // only: a port the kernel picks itself (connect or listen without a bind)
  // is not looked at. Errors: InvalidArgument for an empty range; Internal
  // naming the cgroup.
  absl::Status GuardPorts(const std::string& name, PortRange guarded,
                          uint16_t allowed) const;

  // The cgroup of `name` (one path component), created when missing, with
  // the pids limit when one is set (and, with guarded devices, none of them
  // allowed). Returns its directory. Errors: Internal naming the directory
  // or the file that could not be written.
  absl::StatusOr<std::string> Create(const std::string& name) const;

  // The directory `name` would have.
  std::string PathOf(const std::string& name) const;

  // Kills every process in the cgroup of `name` (cgroup.kill, or SIGKILL to
  // each pid in cgroup.procs where the kernel has no cgroup.kill), waits
  // until it is empty and removes it. Returns how many processes were in
  // it. Fine when it does not exist. Errors: DeadlineExceeded when it is
  // not empty by `deadline`.
  absl::StatusOr<size_t> Destroy(
      const std::string& name,
      std::chrono::steady_clock::time_point deadline) const;

  // The child cgroups present (e.g. left by a process that died).
  std::vector<std::string> Children() const;

  // Removes the parent when it is empty; for shutdown.
  void RemoveParent() const;

 private:
  explicit CgroupTree(std::string parent) : parent_(std::move(parent)) {}

  const std::string parent_;
  // Makes `controller` available in the parent (see LimitPids).
  absl::Status EnableController(const std::string& controller) const;

  uint64_t pids_max_ = 0;              // 0 = no limit.
  uint64_t memory_max_ = 0;            // 0 = no limit.
  std::vector<DeviceNumber> guarded_;  // Sorted; empty = no device program.
};

}  // namespace gdt

#endif  // GDT_COMMON_CGROUP_H_
