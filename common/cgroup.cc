#include "common/cgroup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/mount_info.h"
#include "common/status_macros.h"

namespace gdt {
namespace {

namespace fs = std::filesystem;

// How often Destroy() looks whether the cgroup is empty yet.
constexpr std::chrono::milliseconds kPoll(10);

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  if (!file) return false;
  file << text;
  file.flush();
  return static_cast<bool>(file);
}

std::vector<pid_t> PidsIn(const std::string& dir) {
  return CgroupPids(dir).value_or(std::vector<pid_t>{});
}

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off,
              int32_t imm) {
  bpf_insn out{};
  out.code = code;
  out.dst_reg = dst;
  out.src_reg = src;
  out.off = off;
  out.imm = imm;
  return out;
}

// A device program refusing the character devices in `denied` (sorted)
// and letting everything else through: for each denied device, a major
// that differs skips its minor test; an equal minor jumps to the refusal.
std::vector<bpf_insn> DeviceProgram(const std::vector<DeviceNumber>& denied) {
  const int n = static_cast<int>(denied.size());
  const int allow = 5 + 2 * n;  // Index of "r0 = 1".
  const int deny = allow + 2;   // Index of "r0 = 0".
  std::vector<bpf_insn> program;
  // struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }:
  // the device type is the low 16 bits of access_type.
  program.push_back(
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_1, 0, 0));
  program.push_back(Insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff));
  program.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0,
                         static_cast<int16_t>(allow - 3), BPF_DEVCG_DEV_CHAR));
  program.push_back(
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_3, BPF_REG_1, 4, 0));
  program.push_back(
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_4, BPF_REG_1, 8, 0));
  for (int i = 0; i < n; ++i) {
    const DeviceNumber& device = denied[static_cast<size_t>(i)];
    program.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_3, 0, 1,
                           static_cast<int32_t>(device.major)));
    program.push_back(Insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_4, 0,
                           static_cast<int16_t>(deny - (7 + 2 * i)),
                           static_cast<int32_t>(device.minor)));
  }
  program.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1));
  program.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  program.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
  program.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return program;
}

// A bind program (IPv4 or IPv6 alike) refusing ports in `guarded` other
// than `allowed`: the port, which the context holds in network byte order,
// is turned to host order and compared with the range's ends.
std::vector<bpf_insn> BindProgram(PortRange guarded, uint16_t allowed) {
  const bool exception = allowed >= guarded.first && allowed <= guarded.last;
  const int deny = exception ? 5 : 4;  // Index of "r0 = 0".
  const int allow = deny + 2;          // Index of "r0 = 1".
  std::vector<bpf_insn> program;
  program.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_1,
                         offsetof(bpf_sock_addr, user_port), 0));
  program.push_back(Insn(BPF_ALU | BPF_END | BPF_TO_BE, BPF_REG_2, 0, 0, 16));
  program.push_back(Insn(BPF_JMP | BPF_JLT | BPF_K, BPF_REG_2, 0,
                         static_cast<int16_t>(allow - 3), guarded.first));
  program.push_back(Insn(BPF_JMP | BPF_JGT | BPF_K, BPF_REG_2, 0,
                         static_cast<int16_t>(allow - 4), guarded.last));
  if (exception) {
    program.push_back(Insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_2, 0,
                           static_cast<int16_t>(allow - 5), allowed));
  }
  program.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
  program.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  program.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1));
  program.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return program;
}

// Builds a program whose jumps name labels, resolved by Finish().
class ProgramBuilder {
 public:
  int NewLabel() {
    labels_.push_back(-1);
    return static_cast<int>(labels_.size()) - 1;
  }
  void Place(int label) {
    labels_[static_cast<size_t>(label)] = static_cast<int>(program_.size());
  }
  void Add(bpf_insn insn) { program_.push_back(insn); }
  // `code` (a BPF_JMP or BPF_JMP32 with BPF_K) on `reg` and `imm`, or an
  // unconditional jump (BPF_JA), to `label`.
  void Jump(uint8_t code, uint8_t reg, int32_t imm, int label) {
    jumps_.emplace_back(program_.size(), label);
    program_.push_back(Insn(code, reg, 0, 0, imm));
  }
  std::vector<bpf_insn> Finish() {
    for (const auto& [at, label] : jumps_) {
      program_[at].off = static_cast<int16_t>(
          labels_[static_cast<size_t>(label)] - static_cast<int>(at) - 1);
    }
    return std::move(program_);
  }

 private:
  std::vector<bpf_insn> program_;
  std::vector<int> labels_;                    // Index, by label.
  std::vector<std::pair<size_t, int>> jumps_;  // Jump's index, label.
};

// The 32-bit word `bytes` holds at `at`, as the kernel loads it from a
// context field in network byte order (raw: no byte order turned).
int32_t RawWord(const std::array<uint8_t, 16>& bytes, size_t at) {
  uint32_t word = 0;
  std::memcpy(&word, bytes.data() + at, sizeof(word));
  return static_cast<int32_t>(word);
}

std::array<uint8_t, 16> MaskOf(int length) {
  std::array<uint8_t, 16> mask{};
  for (int bit = 0; bit < length; ++bit) {
    mask[static_cast<size_t>(bit / 8)] |=
        static_cast<uint8_t>(0x80 >> (bit % 8));
  }
  return mask;
}

// Jumps to `to` when the 32-bit word in `reg` matches `value` under `mask`
// (raw words); falls through otherwise. `scratch` is overwritten.
void MatchWord(ProgramBuilder& builder, uint8_t reg, uint8_t scratch,
               int32_t value, int32_t mask, uint8_t jump, int to) {
  if (mask == -1) {
    builder.Jump(BPF_JMP32 | jump | BPF_K, reg, value, to);
    return;
  }
  builder.Add(Insn(BPF_ALU | BPF_MOV | BPF_X, scratch, reg, 0, 0));
  builder.Add(Insn(BPF_ALU | BPF_AND | BPF_K, scratch, 0, 0, mask));
  builder.Jump(BPF_JMP32 | jump | BPF_K, scratch, value & mask, to);
}

// A connect (or UDP send) program for IPv4 (`ipv6` false) or IPv6 refusing
// ports in `guard.range` other than `guard.connect` at `guard.connect_to`.
// The port, in network byte order in the context, is turned to host order
// for the range; addresses are compared as the raw words the context holds.
// An IPv6 program takes a v4-mapped address to the IPv4 prefixes.
std::vector<bpf_insn> ConnectProgram(const PortGuard& guard, bool ipv6) {
  ProgramBuilder builder;
  const int allow = builder.NewLabel();
  const int deny = builder.NewLabel();
  builder.Add(Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_1,
                   offsetof(bpf_sock_addr, user_port), 0));
  builder.Add(Insn(BPF_ALU | BPF_END | BPF_TO_BE, BPF_REG_2, 0, 0, 16));
  builder.Jump(BPF_JMP | BPF_JLT | BPF_K, BPF_REG_2, guard.range.first, allow);
  builder.Jump(BPF_JMP | BPF_JGT | BPF_K, BPF_REG_2, guard.range.last, allow);
  const bool exception =
      guard.connect >= guard.range.first && guard.connect <= guard.range.last;
  if (exception) {
    builder.Jump(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, guard.connect, deny);
    if (guard.connect_to.empty()) {
      builder.Jump(BPF_JMP | BPF_JA, 0, 0, allow);
    } else {
      const int ipv4 = builder.NewLabel();
      const int other = builder.NewLabel();
      if (ipv6) {
        // r6..r9: the address's four words; a v4-mapped one (::ffff:a.b.c.d)
        // goes on as IPv4 in r3.
        for (int word = 0; word < 4; ++word) {
          builder.Add(Insn(BPF_LDX | BPF_W | BPF_MEM,
                           static_cast<uint8_t>(BPF_REG_6 + word), BPF_REG_1,
                           static_cast<int16_t>(
                               offsetof(bpf_sock_addr, user_ip6) + 4 * word),
                           0));
        }
        std::array<uint8_t, 16> mapped{};
        mapped[10] = mapped[11] = 0xff;
        builder.Jump(BPF_JMP32 | BPF_JNE | BPF_K, BPF_REG_6, 0, other);
        builder.Jump(BPF_JMP32 | BPF_JNE | BPF_K, BPF_REG_7, 0, other);
        builder.Jump(BPF_JMP32 | BPF_JNE | BPF_K, BPF_REG_8, RawWord(mapped, 8),
                     other);
        builder.Add(
            Insn(BPF_ALU | BPF_MOV | BPF_X, BPF_REG_3, BPF_REG_9, 0, 0));
        builder.Jump(BPF_JMP | BPF_JA, 0, 0, ipv4);
      } else {
        builder.Add(Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_3, BPF_REG_1,
                         offsetof(bpf_sock_addr, user_ip4), 0));
      }
      builder.Place(ipv4);
      for (const IpPrefix& prefix : guard.connect_to) {
        if (prefix.ipv6) continue;
        MatchWord(builder, BPF_REG_3, BPF_REG_2, RawWord(prefix.bytes, 0),
                  RawWord(MaskOf(prefix.length), 0), BPF_JEQ, allow);
      }
      builder.Jump(BPF_JMP | BPF_JA, 0, 0, deny);
      if (ipv6) {
        builder.Place(other);
        for (const IpPrefix& prefix : guard.connect_to) {
          if (!prefix.ipv6) continue;
          const int next = builder.NewLabel();
          const std::array<uint8_t, 16> mask = MaskOf(prefix.length);
          for (size_t word = 0; word < 4; ++word) {
            const int32_t bits = RawWord(mask, 4 * word);
            if (bits == 0) continue;
            MatchWord(builder, static_cast<uint8_t>(BPF_REG_6 + word),
                      BPF_REG_2, RawWord(prefix.bytes, 4 * word), bits, BPF_JNE,
                      next);
          }
          builder.Jump(BPF_JMP | BPF_JA, 0, 0, allow);
          builder.Place(next);
        }
        builder.Jump(BPF_JMP | BPF_JA, 0, 0, deny);
      }
    }
  }
  builder.Place(deny);
  builder.Add(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
  builder.Add(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  builder.Place(allow);
  builder.Add(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1));
  builder.Add(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return builder.Finish();
}

long Bpf(int command, bpf_attr& attr) {
  return syscall(__NR_bpf, command, &attr, sizeof(attr));
}

// What a cgroup program is: its type, where it attaches, whether the kernel
// wants that attach point at load time, and a name for errors.
struct ProgramKind {
  bpf_prog_type type;
  bpf_attach_type attach;
  bool expected_at_load;
  const char* what;
};
constexpr ProgramKind kDeviceProgram{
    BPF_PROG_TYPE_CGROUP_DEVICE, BPF_CGROUP_DEVICE, false, "a device program"};
constexpr ProgramKind kBind4Program{BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
                                    BPF_CGROUP_INET4_BIND, true,
                                    "an IPv4 bind program"};
constexpr ProgramKind kBind6Program{BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
                                    BPF_CGROUP_INET6_BIND, true,
                                    "an IPv6 bind program"};
constexpr ProgramKind kConnect4Program{BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
                                       BPF_CGROUP_INET4_CONNECT, true,
                                       "an IPv4 connect program"};
constexpr ProgramKind kConnect6Program{BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
                                       BPF_CGROUP_INET6_CONNECT, true,
                                       "an IPv6 connect program"};
constexpr ProgramKind kSend4Program{BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
                                    BPF_CGROUP_UDP4_SENDMSG, true,
                                    "an IPv4 UDP send program"};
constexpr ProgramKind kSend6Program{BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
                                    BPF_CGROUP_UDP6_SENDMSG, true,
                                    "an IPv6 UDP send program"};

// Loads `program` and attaches it to the cgroup `dir`, replacing the
// program of its kind attached there before (no flags: one program per
// cgroup and kind, which its processes cannot override).
absl::Status AttachProgram(const std::string& dir, const ProgramKind& kind,
                           const std::vector<bpf_insn>& program) {
  static constexpr char kLicense[] = "Apache-2.0";
  char log[1024] = {};
  bpf_attr load{};
  load.prog_type = kind.type;
  if (kind.expected_at_load) load.expected_attach_type = kind.attach;
  load.insns = reinterpret_cast<uint64_t>(program.data());
  load.insn_cnt = static_cast<uint32_t>(program.size());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  // Without a log first: the verifier fails a load whose log does not fit.
  const long prog = Bpf(BPF_PROG_LOAD, load);
  if (prog < 0) {
    const int error = errno;
    // Again with a log for the reason (its first part, should it not fit).
    load.log_buf = reinterpret_cast<uint64_t>(log);
    load.log_size = sizeof(log);
    load.log_level = 1;
    Bpf(BPF_PROG_LOAD, load);
    log[sizeof(log) - 1] = 0;
    return absl::FailedPreconditionError(absl::StrCat(
        "the kernel refuses to load ", kind.what, " (bpf BPF_PROG_LOAD): ",
        std::strerror(error), log[0] != 0 ? absl::StrCat(": ", log) : ""));
  }
  const int cgroup = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cgroup < 0) {
    const int error = errno;
    close(static_cast<int>(prog));
    return absl::InternalError(
        absl::StrCat("cannot open cgroup ", dir, ": ", std::strerror(error)));
  }
  bpf_attr attach{};
  attach.target_fd = static_cast<uint32_t>(cgroup);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog);
  attach.attach_type = kind.attach;
  const long attached = Bpf(BPF_PROG_ATTACH, attach);
  const int error = errno;
  close(cgroup);
  // The cgroup holds the program from now on.
  close(static_cast<int>(prog));
  if (attached < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot attach ", kind.what, " to cgroup ", dir,
                     " (bpf BPF_PROG_ATTACH): ", std::strerror(error)));
  }
  return absl::OkStatus();
}

// Detaches the program of each kind in `kinds` from the cgroup `dir`, where
// there is one.
void DetachPrograms(const std::string& dir,
                    const std::vector<const ProgramKind*>& kinds) {
  const int cgroup = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cgroup < 0) return;
  for (const ProgramKind* kind : kinds) {
    bpf_attr detach{};
    detach.target_fd = static_cast<uint32_t>(cgroup);
    detach.attach_type = kind->attach;
    Bpf(BPF_PROG_DETACH, detach);
  }
  close(cgroup);
}

absl::Status AttachDeviceProgram(const std::string& dir,
                                 const std::vector<DeviceNumber>& denied) {
  return AttachProgram(dir, kDeviceProgram, DeviceProgram(denied));
}

absl::Status AttachPortPrograms(const std::string& dir,
                                const PortGuard& guard) {
  const std::vector<bpf_insn> bind = BindProgram(guard.range, guard.bind);
  GDT_RETURN_IF_ERROR(AttachProgram(dir, kBind4Program, bind));
  GDT_RETURN_IF_ERROR(AttachProgram(dir, kBind6Program, bind));
  if (!guard.connections) {
    // Programs a guard with connections attached there before go.
    DetachPrograms(dir, {&kConnect4Program, &kConnect6Program, &kSend4Program,
                         &kSend6Program});
    return absl::OkStatus();
  }
  const std::vector<bpf_insn> connect4 = ConnectProgram(guard, false);
  const std::vector<bpf_insn> connect6 = ConnectProgram(guard, true);
  GDT_RETURN_IF_ERROR(AttachProgram(dir, kConnect4Program, connect4));
  GDT_RETURN_IF_ERROR(AttachProgram(dir, kConnect6Program, connect6));
  GDT_RETURN_IF_ERROR(AttachProgram(dir, kSend4Program, connect4));
  return AttachProgram(dir, kSend6Program, connect6);
}

}  // namespace

absl::StatusOr<IpPrefix> ParseIpPrefix(std::string_view text) {
  IpPrefix prefix;
  const std::string whole(text);
  std::string address = whole;
  const size_t slash = address.find('/');
  const bool has_length = slash != std::string::npos;
  if (has_length) address.resize(slash);
  if (inet_pton(AF_INET, address.c_str(), prefix.bytes.data()) == 1) {
    prefix.length = 32;
  } else if (inet_pton(AF_INET6, address.c_str(), prefix.bytes.data()) == 1) {
    prefix.ipv6 = true;
    prefix.length = 128;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", whole, "\" is no IPv4 or IPv6 address"));
  }
  if (has_length) {
    int length = 0;
    if (!absl::SimpleAtoi(whole.substr(slash + 1), &length) || length < 1 ||
        length > prefix.length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", whole, "\" has no prefix length in 1..", prefix.length));
    }
    prefix.length = length;
  }
  return prefix;
}

std::string FormatIpPrefix(const IpPrefix& prefix) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(prefix.ipv6 ? AF_INET6 : AF_INET, prefix.bytes.data(), text,
            sizeof(text));
  return absl::StrCat(text, "/", prefix.length);
}

absl::StatusOr<DeviceNumber> CharDeviceOf(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no device ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISCHR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a character device"));
  }
  return DeviceNumber{major(info.st_rdev), minor(info.st_rdev)};
}

absl::StatusOr<std::vector<pid_t>> CgroupPids(const std::string& dir) {
  const std::string path = dir + "/cgroup.procs";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::string message = absl::StrCat(path, ": ", std::strerror(errno));
    return errno == ENOENT ? absl::NotFoundError(message)
                           : absl::InternalError(message);
  }
  std::string text;
  char buffer[4096];
  ssize_t got = 0;
  while ((got = read(fd, buffer, sizeof buffer)) > 0) {
    text.append(buffer, static_cast<size_t>(got));
  }
  const int error = errno;
  close(fd);
  if (got < 0) {
    // The cgroup went away while it was read.
    const std::string message = absl::StrCat(path, ": ", std::strerror(error));
    return error == ENODEV ? absl::NotFoundError(message)
                           : absl::InternalError(message);
  }
  std::vector<pid_t> pids;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

absl::StatusOr<std::string> OwnCgroupDir() {
  std::string own;
  for (absl::string_view line :
       absl::StrSplit(ReadAll("/proc/self/cgroup"), '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) own = std::string(line);
  }
  if (own.empty()) {
    return absl::NotFoundError("this process is in no cgroup v2 hierarchy");
  }
  for (const MountInfo& mount : ReadMountInfo()) {
    if (mount.type != "cgroup2") continue;
    absl::string_view relative = own;
    if (mount.root != "/" && !absl::ConsumePrefix(&relative, mount.root)) {
      continue;
    }
    if (mount.root == "/" && relative == "/") relative = "";
    return mount.mount_point + std::string(relative);
  }
  return absl::NotFoundError("no cgroup2 file system is mounted");
}

absl::StatusOr<std::unique_ptr<CgroupTree>> CgroupTree::Open(
    const std::string& parent) {
  std::error_code error;
  fs::create_directories(parent, error);
  const std::string probe = parent + "/.probe";
  if (!error) fs::create_directory(probe, error);
  if (error || access((probe + "/cgroup.procs").c_str(), W_OK) != 0) {
    const std::string why =
        error ? error.message()
              : absl::StrCat("cannot write ", probe,
                             "/cgroup.procs: ", std::strerror(errno));
    rmdir(probe.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup v2 is not writable at ", parent, ": ", why));
  }
  rmdir(probe.c_str());
  return std::unique_ptr<CgroupTree>(new CgroupTree(parent));
}

std::string CgroupTree::PathOf(const std::string& name) const {
  return absl::StrCat(parent_, "/", name);
}

absl::Status CgroupTree::EnableController(const std::string& controller) const {
  auto has = [&controller](const std::string& file) {
    for (absl::string_view word : absl::StrSplit(
             ReadAll(file), absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      if (word == controller) return true;
    }
    return false;
  };
  // The parent and its ancestors up to the nearest that has the controller
  // (each level's cgroup.controllers lists what its parent passes on).
  std::vector<fs::path> levels;
  bool found = false;
  std::string top;
  for (fs::path level = fs::path(parent_).lexically_normal();;
       level = level.parent_path()) {
    const std::string controllers = (level / "cgroup.controllers").string();
    if (access(controllers.c_str(), R_OK) != 0) break;  // Left the mount.
    top = controllers;
    levels.push_back(level);
    if (has(controllers)) {
      found = true;
      break;
    }
    if (level == level.parent_path()) break;
  }
  if (!found) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", controller,
        " controller is not available in this cgroup v2 hierarchy (",
        top.empty() ? parent_ : top,
        " does not list it; is it bound to a cgroup v1 hierarchy?)"));
  }
  // From the top down: each level passes it on to the next.
  for (auto level = levels.rbegin(); level != levels.rend(); ++level) {
    const std::string control = (*level / "cgroup.subtree_control").string();
    if (has(control)) continue;
    if (!WriteText(control, "+" + controller)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot enable the ", controller, " controller in ",
                       control, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status CgroupTree::LimitPids(uint64_t max) {
  pids_max_ = 0;
  if (max == 0) return absl::OkStatus();
  GDT_RETURN_IF_ERROR(EnableController("pids"));
  pids_max_ = max;
  return absl::OkStatus();
}

absl::Status CgroupTree::LimitMemory(uint64_t max) {
  memory_max_ = 0;
  if (max == 0) return absl::OkStatus();
  GDT_RETURN_IF_ERROR(EnableController("memory"));
  memory_max_ = max;
  return absl::OkStatus();
}

absl::Status CgroupTree::GuardDevices(std::vector<DeviceNumber> guarded) {
  guarded_.clear();
  if (guarded.empty()) return absl::OkStatus();
  std::sort(guarded.begin(), guarded.end());
  guarded.erase(std::unique(guarded.begin(), guarded.end()), guarded.end());
  // A cgroup no member can be named: member names are escaped path
  // components, which never start with a dot.
  const std::string probe = PathOf(".device-probe");
  if (mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create cgroup ", probe, ": ", std::strerror(errno)));
  }
  const absl::Status attached = AttachDeviceProgram(probe, guarded);
  rmdir(probe.c_str());
  GDT_RETURN_IF_ERROR(attached);
  guarded_ = std::move(guarded);
  return absl::OkStatus();
}

absl::Status CgroupTree::AllowDevices(
    const std::string& name, const std::vector<DeviceNumber>& allowed) const {
  std::vector<DeviceNumber> denied;
  for (const DeviceNumber& device : guarded_) {
    if (std::find(allowed.begin(), allowed.end(), device) == allowed.end()) {
      denied.push_back(device);
    }
  }
  const absl::Status attached = AttachDeviceProgram(PathOf(name), denied);
  if (attached.ok()) return attached;
  return absl::InternalError(attached.message());
}

namespace {

// Attaches the port programs for `guard` to a cgroup no member can have
// (member names are escaped path components, which never start with a dot)
// and removes it again.
absl::Status ProbePortPrograms(const std::string& probe,
                               const PortGuard& guard) {
  if (mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create cgroup ", probe, ": ", std::strerror(errno)));
  }
  const absl::Status attached = AttachPortPrograms(probe, guard);
  rmdir(probe.c_str());
  return attached;
}

}  // namespace

absl::Status CgroupTree::CheckPortGuard() const {
  PortGuard guard;
  guard.range = {1, 1};
  guard.connections = false;
  return ProbePortPrograms(PathOf(".port-probe"), guard);
}

absl::Status CgroupTree::CheckConnectGuard() const {
  // Every kind of instruction the programs use.
  PortGuard guard;
  guard.range = {1, 2};
  guard.bind = 1;
  guard.connect = 2;
  for (const char* text : {"127.0.0.0/8", "::1", "fe80::/10"}) {
    guard.connect_to.push_back(*ParseIpPrefix(text));
  }
  return ProbePortPrograms(PathOf(".connect-probe"), guard);
}

absl::Status CgroupTree::GuardPorts(const std::string& name,
                                    const PortGuard& guard) const {
  if (guard.range.first == 0 || guard.range.first > guard.range.last) {
    return absl::InvalidArgumentError(
        absl::StrCat("no ports to guard in ", guard.range.first, "..",
                     guard.range.last, " (it needs 1 <= first <= last)"));
  }
  for (const IpPrefix& prefix : guard.connect_to) {
    if (prefix.length < 1 || prefix.length > (prefix.ipv6 ? 128 : 32)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad prefix length ", prefix.length, " of ", FormatIpPrefix(prefix)));
    }
  }
  const absl::Status attached = AttachPortPrograms(PathOf(name), guard);
  if (attached.ok()) return attached;
  return absl::InternalError(attached.message());
}

absl::StatusOr<std::string> CgroupTree::Create(const std::string& name) const {
  const std::string dir = PathOf(name);
  const bool made = mkdir(dir.c_str(), 0755) == 0;
  if (!made && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create cgroup ", dir, ": ", std::strerror(errno)));
  }
  // A new cgroup (or one found, left by an agent that stopped) may open
  // none of the guarded devices until AllowDevices() says which.
  if (!guarded_.empty()) {
    if (absl::Status attached = AttachDeviceProgram(dir, guarded_);
        !attached.ok()) {
      if (made) rmdir(dir.c_str());
      return absl::InternalError(attached.message());
    }
  }
  if (pids_max_ > 0 && !WriteText(dir + "/pids.max", absl::StrCat(pids_max_))) {
    return absl::InternalError(absl::StrCat(
        "cannot write ", dir, "/pids.max: ", std::strerror(errno)));
  }
  if (memory_max_ > 0) {
    for (const auto& [file, text] :
         {std::pair<std::string, std::string>{"memory.max",
                                              absl::StrCat(memory_max_)},
          {"memory.oom.group", "1"}}) {
      if (!WriteText(dir + "/" + file, text)) {
        return absl::InternalError(absl::StrCat("cannot write ", dir, "/", file,
                                                ": ", std::strerror(errno)));
      }
    }
    // Absent where the kernel has no swap accounting: nothing to dodge.
    if (access((dir + "/memory.swap.max").c_str(), F_OK) == 0 &&
        !WriteText(dir + "/memory.swap.max", "0")) {
      return absl::InternalError(absl::StrCat(
          "cannot write ", dir, "/memory.swap.max: ", std::strerror(errno)));
    }
  }
  return dir;
}

absl::StatusOr<size_t> CgroupTree::Destroy(
    const std::string& name,
    std::chrono::steady_clock::time_point deadline) const {
  const std::string dir = PathOf(name);
  if (access(dir.c_str(), F_OK) != 0) return 0;
  absl::StatusOr<size_t> found = Kill(name, deadline);
  if (!found.ok()) return found.status();
  // A cgroup whose last process just died may still count it as populated
  // for a moment; rmdir then answers EBUSY.
  while (rmdir(dir.c_str()) != 0 && errno == EBUSY &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(kPoll);
  }
  return *found;
}

absl::StatusOr<size_t> CgroupTree::Kill(
    const std::string& name,
    std::chrono::steady_clock::time_point deadline) const {
  const std::string dir = PathOf(name);
  if (access(dir.c_str(), F_OK) != 0) return 0;
  const size_t found = PidsIn(dir).size();
  // cgroup.kill reaches every process, including ones forked while it runs;
  // older kernels lack it, and SIGKILL to each pid until none is left does
  // the same in rounds.
  const bool kill_file = WriteText(dir + "/cgroup.kill", "1");
  while (true) {
    const std::vector<pid_t> pids = PidsIn(dir);
    if (pids.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "cgroup ", dir, " still holds ", pids.size(), " processes (e.g. pid ",
          pids.front(), ") after SIGKILL"));
    }
    if (!kill_file) {
      for (pid_t pid : pids) kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(kPoll);
  }
  return found;
}

std::vector<std::string> CgroupTree::Children() const {
  std::vector<std::string> names;
  std::error_code error;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(parent_, error)) {
    if (entry.is_directory(error) && !error) {
      names.push_back(entry.path().filename().string());
    }
  }
  return names;
}

void CgroupTree::RemoveParent() const { rmdir(parent_.c_str()); }

}  // namespace gdt
