// cgroup v2 directories a process makes for the processes it starts, so
// that it can end all of them at once, including those that left their
// process group (setsid, daemons).
#ifndef GDT_COMMON_CGROUP_H_
#define GDT_COMMON_CGROUP_H_

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt {

// The cgroup v2 directory this process is in, from /proc/self/cgroup and
// the cgroup2 mount in /proc/self/mountinfo. Errors: NotFound when there is
// no cgroup v2 hierarchy.
absl::StatusOr<std::string> OwnCgroupDir();

// The processes in the cgroup v2 directory `dir` (its cgroup.procs).
// Errors: NotFound when the cgroup does not exist (or went away); Internal
// naming the file and why it could not be read (e.g. out of descriptors).
absl::StatusOr<std::vector<pid_t>> CgroupPids(const std::string& dir);

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

// A range of ports, both ends included.
struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
  friend bool operator==(const PortRange&, const PortRange&) = default;
};

// An IPv4 or IPv6 address with a prefix length: the addresses whose first
// `length` bits are those of `bytes`.
struct IpPrefix {
  bool ipv6 = false;
  std::array<uint8_t, 16> bytes{};  // IPv4 in the first 4.
  int length = 0;                   // 1..32 (IPv4) or 1..128 (IPv6).
  friend bool operator==(const IpPrefix&, const IpPrefix&) = default;
};

// "192.0.2.1", "127.0.0.0/8", "::1", "fe80::/10" (without a length, the
// whole address). Errors: InvalidArgument naming the text.
absl::StatusOr<IpPrefix> ParseIpPrefix(std::string_view text);
std::string FormatIpPrefix(const IpPrefix& prefix);

// What a cgroup's processes may do with the ports of a range.
struct PortGuard {
  PortRange range;
  // The one port of the range they may bind; 0 = none.
  uint16_t bind = 0;
  // The one port of the range they may connect or send to, and only at
  // these addresses (an IPv4 prefix also covers its v4-mapped IPv6 form);
  // 0 = none. With no addresses, at any address.
  uint16_t connect = 0;
  std::vector<IpPrefix> connect_to;
  // false: binds only, connections and sends are not looked at (a kernel
  // that refuses the connect programs, see CheckConnectGuard()).
  bool connections = true;
  friend bool operator==(const PortGuard&, const PortGuard&) = default;
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

  // The same for its connect and send programs, which need newer hooks and
  // instructions (32-bit jumps, Linux 5.1) than the bind programs. Errors:
  // FailedPrecondition naming why; guard with `connections` false then.
  absl::Status CheckConnectGuard() const;

  // Keeps the processes in the cgroup of `name` off the ports of
  // `guard.range` (see PortGuard), over IPv4 and IPv6 (v4-mapped addresses
  // included): bind() (any protocol), connect() (TCP and UDP) and a UDP
  // sendmsg() with an address to a port there fail with EPERM unless the
  // guard allows it. Port 0 and ports outside the range go through.
  // Replaces the guard set there before; processes already in it are bound
  // at once. Hooks of type CGROUP_SOCK_ADDR, so a port the kernel picks
  // itself as a socket's own (connect or listen without a bind) is not
  // looked at. Errors: InvalidArgument for an empty range or a bad
  // address; Internal naming the cgroup.
  absl::Status GuardPorts(const std::string& name,
                          const PortGuard& guard) const;

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

  // Kills every process in the cgroup of `name` as Destroy() does and waits
  // until it is empty, but keeps the cgroup (its member may start more
  // processes there). Returns how many processes were in it.
  // Errors: DeadlineExceeded when it is not empty by `deadline`.
  absl::StatusOr<size_t> Kill(
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
