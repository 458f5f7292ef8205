#include "agent/disk_use.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/few_descriptors.h"
#include "testing/stuck_fuse.h"
#include "testing/temp_dir.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;

// CAP_CHECKPOINT_RESTORE, which older kernel headers do not name.
constexpr int kCapCheckpointRestore = 40;

// Writes `bytes` of data (allocated, not a hole) to `path`.
void WriteBytes(const std::string& path, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  const std::string chunk(64 << 10, 'x');
  for (size_t written = 0; written < bytes; written += chunk.size()) {
    out.write(chunk.data(), static_cast<std::streamsize>(
                                std::min(chunk.size(), bytes - written)));
  }
}

// Appends `bytes` of data to the file open as `fd`.
void AppendBytes(int fd, size_t bytes) {
  const std::string chunk(64 << 10, 'x');
  for (size_t written = 0; written < bytes;) {
    const ssize_t wrote =
        write(fd, chunk.data(), std::min(chunk.size(), bytes - written));
    ASSERT_GT(wrote, 0) << std::strerror(errno);
    written += static_cast<size_t>(wrote);
  }
}

TEST(DiskUseTest, CountsTheDirsAndTheOwnersFilesOnceWithoutFollowingLinks) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  const std::string shared = temp.Sub("tmp");
  const std::string outside = temp.Sub("outside");
  for (const std::string& dir : {builds + "/deep/er", shared, outside}) {
    fs::create_directories(dir);
  }
  chmod(shared.c_str(), 01777);
  WriteBytes(builds + "/deep/er/a", 1 << 20);
  // A second link to the same file counts once; a link to a big file
  // elsewhere counts as the link only.
  ASSERT_EQ(link((builds + "/deep/er/a").c_str(), (builds + "/b").c_str()), 0);
  WriteBytes(outside + "/big", 4 << 20);
  fs::create_symlink(outside + "/big", builds + "/link");
  fs::create_directory_symlink(outside, builds + "/dirlink");

  DiskUseScope scope;
  scope.dirs = {builds};
  const DiskUse own = MeasureDiskUse(scope);
  EXPECT_GE(own.bytes, 1u << 20);
  EXPECT_LT(own.bytes, 2u << 20);
  EXPECT_FALSE(own.truncated);

  // What the account owns in a shared root counts too (here the test's own
  // uid; the real agent gives a member's pool account).
  WriteBytes(shared + "/mine", 2 << 20);
  scope.owner = geteuid();
  scope.owner_gid = getegid();
  scope.shared_roots = {shared};
  const DiskUse with_shared = MeasureDiskUse(scope);
  EXPECT_GE(with_shared.bytes, own.bytes + (2u << 20));
  EXPECT_LT(with_shared.bytes, own.bytes + (3u << 20));
  // Another uid holds none of it.
  scope.owner = geteuid() + 4242;
  EXPECT_EQ(MeasureDiskUse(scope).bytes, own.bytes);

  // The walk is bounded.
  scope.max_entries = 2;
  EXPECT_TRUE(MeasureDiskUse(scope).truncated);
}

// Entries of others in a shared root beyond the bound leave the walk
// incomplete (they are not the member's doing); the member's own there are
// its own, and beyond the bound truncate it.
TEST(DiskUseTest, TheBoundInASharedRootCountsTheMembersOwnEntries) {
  test::TempDir temp;
  const std::string shared = temp.Sub("tmp");
  fs::create_directories(shared);
  chmod(shared.c_str(), 01777);
  const uid_t other = geteuid() + 4242;
  for (int i = 0; i < 5; ++i) {
    const std::string path = absl::StrCat(shared, "/other-", i);
    WriteBytes(path, 0);
    ASSERT_EQ(chown(path.c_str(), other, other), 0);
  }
  DiskUseScope scope;
  scope.owner = geteuid();
  scope.owner_gid = getegid();
  scope.shared_roots = {shared};
  scope.max_entries = 3;
  const DiskUse others = MeasureDiskUse(scope);
  EXPECT_TRUE(others.incomplete);
  EXPECT_FALSE(others.truncated);
  // Fewer of others' than the bound, more of its own.
  for (int i = 0; i < 3; ++i) fs::remove(absl::StrCat(shared, "/other-", i));
  for (int i = 0; i < 5; ++i) WriteBytes(absl::StrCat(shared, "/mine-", i), 0);
  const DiskUse own = MeasureDiskUse(scope);
  EXPECT_TRUE(own.truncated);
}

// Creates `path` with `bytes` of data and deletes it: the descriptor
// returned holds what no walk finds.
int OpenDeleted(const std::string& path, size_t bytes) {
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  AppendBytes(fd, bytes);
  EXPECT_EQ(unlink(path.c_str()), 0) << path;
  return fd;
}

// A child process that holds what this one has open (it inherits every
// descriptor) until destroyed.
class Holder {
 public:
  Holder() {
    int ends[2];
    EXPECT_EQ(pipe2(ends, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(ends[1]);
      char byte = 0;
      while (read(ends[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    close(ends[0]);
    release_ = ends[1];
  }
  ~Holder() {
    close(release_);  // Its read ends: it exits.
    waitpid(pid_, nullptr, 0);
  }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int release_ = -1;
};

// Runs `body` in a child process without CAP_SYS_ADMIN and
// CAP_CHECKPOINT_RESTORE (what /proc/PID/map_files needs); its exit code
// (0: passed; 90-92: the child could not be set up).
int WithoutCapSysAdmin(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (syscall(SYS_capget, &header, data) != 0) _exit(90);
    for (const int cap : {CAP_SYS_ADMIN, kCapCheckpointRestore}) {
      data[cap / 32].effective &= ~(1u << (cap % 32));
    }
    if (syscall(SYS_capset, &header, data) != 0) _exit(90);
    _exit(body());
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 91;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 92;
}

// A directory standing for a member's cgroup: its cgroup.procs lists
// `pids` (what CgroupPids() reads of a real one).
std::string FakeCgroup(const test::TempDir& temp,
                       const std::vector<pid_t>& pids) {
  const std::string dir = temp.Sub("cgroup");
  fs::create_directories(dir);
  std::string procs;
  for (const pid_t pid : pids) absl::StrAppend(&procs, pid, "\n");
  test::WriteTextFile(dir + "/cgroup.procs", procs);
  return dir;
}

// A deleted file of `bytes` on /dev/shm, kept open (the descriptor, or
// -1): on a file system that a bound over `dir` does not cover, when
// /dev/shm is another one here (`*other_fs`).
int DeletedFileOnShm(const std::string& dir, size_t bytes, bool* other_fs) {
  char path[] = "/dev/shm/gdt-disk-use-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return -1;
  AppendBytes(fd, bytes);
  unlink(path);
  struct stat dir_info = {};
  struct stat file_info = {};
  *other_fs = stat(dir.c_str(), &dir_info) == 0 && fstat(fd, &file_info) == 0 &&
              dir_info.st_dev != file_info.st_dev;
  return fd;
}

// What MeasureDeletedFiles() measured.
struct DeletedFileMeasures {
  DiskUse walked;   // The walk of the dirs alone.
  DiskUse use;      // With the cgroup's processes' deleted files.
  DiskUse bounded;  // The same, looking at 3 items at most.
};

// Measures `scope`'s dirs alone, then with the deleted files of the
// processes `pids` (a cgroup listing them): those add [min, max) bytes,
// and the file on another file system (when `other_fs`) keeps the total
// under `max_total`. A measure that may look at only 3 processes,
// descriptors and mapped files says it was cut short. Leaves `scope` with
// the cgroup and the default bound.
DeletedFileMeasures MeasureDeletedFiles(const test::TempDir& temp,
                                        DiskUseScope& scope,
                                        const std::vector<pid_t>& pids,
                                        uint64_t min, uint64_t max,
                                        bool other_fs, uint64_t max_total) {
  DeletedFileMeasures measures;
  measures.walked = MeasureDiskUse(scope);
  EXPECT_LT(measures.walked.bytes, 2u << 20)
      << "without the cgroup: the walk alone";
  scope.cgroup = FakeCgroup(temp, pids);
  measures.use = MeasureDiskUse(scope);
  EXPECT_FALSE(measures.use.incomplete) << measures.use.error;
  EXPECT_FALSE(measures.use.truncated);
  EXPECT_GE(measures.use.deleted_bytes, min);
  EXPECT_LT(measures.use.deleted_bytes, max);
  EXPECT_EQ(measures.use.bytes,
            measures.walked.bytes + measures.use.deleted_bytes);
  if (other_fs) {
    EXPECT_LT(measures.use.bytes, max_total) << "a file on another file system";
  }
  const size_t unbounded = scope.max_descriptors;
  scope.max_descriptors = 3;
  measures.bounded = MeasureDiskUse(scope);
  EXPECT_TRUE(measures.bounded.truncated);
  EXPECT_EQ(measures.bounded.descriptors, 3u);
  scope.max_descriptors = unbounded;
  return measures;
}

// A job that deletes a file it keeps open (and writing to) still holds its
// space: the walk finds no name for it, yet it counts, once however many
// of the member's processes and descriptors hold it, and only on the file
// systems the member's bound covers.
TEST(DiskUseTest, FilesItsProcessesHoldOpenAfterDeletingThemCount) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds);
  WriteBytes(builds + "/kept", 1 << 20);
  const int gone = OpenDeleted(builds + "/gone", 2 << 20);
  const int again = dup(gone);
  // Open and still linked: the walk counts it, the descriptors do not
  // again.
  const int linked =
      open((builds + "/kept").c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT
  ASSERT_GE(linked, 0);
  // On a file system the bound does not cover (when /dev/shm is one).
  bool other_fs = false;
  const int elsewhere = DeletedFileOnShm(builds, 4 << 20, &other_fs);
  ASSERT_GE(elsewhere, 0);
  Holder holder;

  DiskUseScope scope;
  scope.dirs = {builds};
  const DeletedFileMeasures measured =
      MeasureDeletedFiles(temp, scope, {getpid(), holder.pid()}, 2u << 20,
                          3u << 20, other_fs, 4u << 20);
  DiskUseScope bounded_scope = scope;
  bounded_scope.max_descriptors = 3;
  EXPECT_THAT(DiskLimitLine(measured.bounded, bounded_scope, 1 << 30),
              testing::HasSubstr("or more than 3 processes, open "
                                 "descriptors and mapped deleted files in its "
                                 "cgroup, more than the agent measures"));
  // A cgroup gone (its member torn down meanwhile) holds nothing.
  scope.cgroup = temp.Sub("gone-cgroup");
  const DiskUse gone_cgroup = MeasureDiskUse(scope);
  EXPECT_FALSE(gone_cgroup.incomplete) << gone_cgroup.error;
  EXPECT_EQ(gone_cgroup.bytes, measured.walked.bytes);
  for (const int fd : {gone, again, linked, elsewhere}) close(fd);
}

// Mappings of the test process, unmapped when it goes (so that no later
// test finds them).
class Mappings {
 public:
  Mappings() = default;
  ~Mappings() {
    for (const auto& [address, bytes] : maps_) munmap(address, bytes);
  }
  Mappings(const Mappings&) = delete;
  Mappings& operator=(const Mappings&) = delete;

  // Maps `bytes` of `fd` from `offset`, shared.
  void Map(int fd, size_t bytes, off_t offset = 0) {
    void* address = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, offset);
    ASSERT_NE(address, MAP_FAILED) << std::strerror(errno);
    maps_.emplace_back(address, bytes);
  }

  // Maps `bytes` of data (two mappings, one for each half) from a new file
  // at `path`, then closes and deletes it: the mappings hold what neither
  // a walk nor a descriptor finds.
  void MapDeleted(const std::string& path, size_t bytes) {
    const int fd = OpenDeleted(path, bytes);
    Map(fd, bytes / 2);
    Map(fd, bytes / 2, static_cast<off_t>(bytes / 2));
    close(fd);
  }

 private:
  std::vector<std::pair<void*, size_t>> maps_;
};

// A job may map a file, close it and delete it: it still holds the file's
// space with no descriptor left. Such a file counts, once however many of
// the member's mappings and processes hold it and whether or not a
// descriptor holds it too, and only on the file systems the member's bound
// covers.
TEST(DiskUseTest, FilesItsProcessesMapAfterDeletingThemCount) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: reads /proc/PID/map_files";
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds);
  WriteBytes(builds + "/kept", 1 << 20);
  Mappings mappings;
  ASSERT_NO_FATAL_FAILURE(mappings.MapDeleted(builds + "/mapped", 2 << 20));
  // Mapped and open.
  const int open_too = OpenDeleted(builds + "/open-too", 1 << 20);
  ASSERT_NO_FATAL_FAILURE(mappings.Map(open_too, 1 << 20));
  // On a file system the bound does not cover (when /dev/shm is one).
  bool other_fs = false;
  const int elsewhere = DeletedFileOnShm(builds, 4 << 20, &other_fs);
  ASSERT_GE(elsewhere, 0);
  ASSERT_NO_FATAL_FAILURE(mappings.Map(elsewhere, 4 << 20));
  close(elsewhere);
  Holder holder;  // Maps them too, and holds `open_too` open.

  DiskUseScope scope;
  scope.dirs = {builds};
  // Mapped files are looked at within the same bound as descriptors.
  MeasureDeletedFiles(temp, scope, {getpid(), holder.pid()}, 3u << 20, 4u << 20,
                      other_fs, 5u << 20);

  // An agent that may not look at mapped files (without CAP_SYS_ADMIN)
  // still counts the one a descriptor holds, and says that its walk left
  // the other out.
  EXPECT_EQ(WithoutCapSysAdmin([&] {
              const DiskUse partial = MeasureDiskUse(scope);
              if (!partial.incomplete ||
                  !absl::StrContains(partial.error, "/map_files/") ||
                  !absl::StrContains(partial.error, std::strerror(EPERM))) {
                fprintf(stderr, "incomplete=%d error=%s\n", partial.incomplete,
                        partial.error.c_str());
                return 1;
              }
              if (partial.deleted_bytes < (1u << 20) ||
                  partial.deleted_bytes >= (2u << 20)) {
                fprintf(stderr, "deleted_bytes=%llu\n",
                        static_cast<unsigned long long>(  // NOLINT
                            partial.deleted_bytes));
                return 2;
              }
              return 0;
            }),
            0);
  close(open_too);
}

// The watch walks a member again when its file systems grew (it does not
// wait for its next full walk), and that walk counts the file the member
// deleted and keeps writing to: the member is stopped.
TEST(DiskWatchTest, AMemberWritingToAFileItDeletedIsStopped) {
  // On tmpfs, where little else writes: the growth the watch sees is this.
  const test::TempDir base("/dev/shm");
  ASSERT_FALSE(base.path().empty());
  const std::string builds = base.path() + "/builds";
  fs::create_directories(builds);
  test::TempDir temp;
  const int fd = OpenDeleted(builds + "/checkpoint", 1 << 20);
  const std::string cgroup = FakeCgroup(temp, {getpid()});
  std::vector<std::string> stopped;
  DiskWatch::Options options;
  options.member_max = 4 << 20;
  options.cost_factor = 0;  // full_every stays a minute.
  DiskWatch watch(
      options,
      [&] {
        std::vector<DiskWatch::Member> members(1);
        members[0].member_id = "member";
        members[0].scope.dirs = {builds};
        members[0].scope.cgroup = cgroup;
        return members;
      },
      [&](const std::string&, const DiskUse& use, const std::string&,
          const std::string& line, bool) {
        EXPECT_GE(use.deleted_bytes, 5u << 20);
        stopped.push_back(line);
      });
  // The first round measures it (below the bound), the next one has no
  // cause to.
  watch.CheckOnce();
  watch.CheckOnce();
  const size_t walks = watch.walks();
  EXPECT_TRUE(stopped.empty());

  AppendBytes(fd, 5 << 20);
  watch.CheckOnce();
  EXPECT_EQ(watch.walks(), walks + 1);
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_TRUE(
      absl::StartsWith(stopped[0], "gdt: disk limit: this member holds "))
      << stopped[0];
  EXPECT_THAT(stopped[0], testing::HasSubstr("above member_disk_max (4194304"));
  close(fd);
}

TEST(DiskWatchTest, StopsOnlyAMemberAboveTheBound) {
  test::TempDir temp;
  const std::string big = temp.Sub("big");
  const std::string small = temp.Sub("small");
  fs::create_directories(big);
  fs::create_directories(small);
  WriteBytes(big + "/data", 3 << 20);
  WriteBytes(small + "/data", 1 << 20);
  std::vector<std::string> stopped;
  std::string where;
  DiskWatch::Options options;
  options.member_max = 2 << 20;
  options.cost_factor = 0;  // Walks as often as it is asked to.
  DiskWatch watch(
      options,
      [&] {
        std::vector<DiskWatch::Member> members(2);
        members[0].member_id = "big";
        members[0].scope.dirs = {big};
        members[1].member_id = "small";
        members[1].scope.dirs = {small};
        return members;
      },
      [&](const std::string& member_id, const DiskUse& use,
          const std::string& dirs, const std::string& line, bool first) {
        EXPECT_GT(use.bytes, 2u << 20);
        EXPECT_TRUE(first);
        stopped.push_back(member_id);
        where = dirs;
        EXPECT_TRUE(absl::StartsWith(
            line, absl::StrCat("gdt: disk limit: this member holds ", use.bytes,
                               " bytes in ", big,
                               ", above member_disk_max (2097152 bytes")))
            << line;
      });
  watch.CheckOnce();
  EXPECT_EQ(stopped, std::vector<std::string>{"big"});
  EXPECT_EQ(where, big);
  // Below the bound again (measured again: its upper bound was above):
  // not stopped.
  fs::remove(big + "/data");
  stopped.clear();
  const size_t walks = watch.walks();
  watch.CheckOnce();
  EXPECT_GT(watch.walks(), walks);
  EXPECT_TRUE(stopped.empty());
}

// One member in `dir`, measured whenever it may be above `max` (and at
// every CheckOnce() with `every_time`); `stopped` gets the lines of its
// stops.
struct OneMemberWatch {
  OneMemberWatch(const std::string& dir, uint64_t max, size_t max_entries,
                 bool every_time)
      : watch(
            Options(max, every_time),
            [dir, max_entries] {
              std::vector<DiskWatch::Member> members(1);
              members[0].member_id = "member";
              members[0].scope.dirs = {dir};
              members[0].scope.max_entries = max_entries;
              return members;
            },
            [this](const std::string&, const DiskUse&, const std::string&,
                   const std::string& line,
                   bool) { stopped.push_back(line); }) {}
  static DiskWatch::Options Options(uint64_t max, bool every_time) {
    DiskWatch::Options options;
    options.member_max = max;
    if (every_time) options.full_every = std::chrono::seconds(0);
    options.cost_factor = 0;
    return options;
  }
  std::vector<std::string> stopped;
  DiskWatch watch;
};

TEST(DiskWatchTest, AMemberWithMoreEntriesThanAWalkLooksAtIsStopped) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds);
  // Empty files: a few bytes, yet more entries than the walk looks at;
  // what lies behind them is not seen.
  for (int i = 0; i < 20; ++i) WriteBytes(absl::StrCat(builds, "/e", i), 0);
  OneMemberWatch member(builds, /*max=*/1 << 30, /*max_entries=*/10,
                        /*every_time=*/true);
  member.watch.CheckOnce();
  ASSERT_EQ(member.stopped.size(), 1u);
  EXPECT_EQ(member.stopped[0],
            absl::StrCat("gdt: disk limit: this member holds more than 10 "
                         "entries (or directories deeper than 128 levels) in ",
                         builds,
                         ", more than the agent measures (member_disk_max is "
                         "set); its processes were stopped\n"));
}

TEST(DiskWatchTest, AWalkThatRunsOutOfDescriptorsNeitherStopsNorForgets) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  const std::string deep = builds + "/a/b/c/d/e/f";
  fs::create_directories(deep);
  WriteBytes(deep + "/data", 3 << 20);

  // The walk says it missed what it could not open.
  EXPECT_EQ(test::WithFewDescriptors([&] {
              DiskUseScope scope;
              scope.dirs = {builds};
              const DiskUse use = MeasureDiskUse(scope);
              if (!use.incomplete) return 1;
              if (use.error.find("Too many open files") == std::string::npos)
                return 2;
              return use.bytes < (3u << 20) ? 0 : 3;
            }),
            0);
  // Not stopped for what it missed, yet measured again (its upper bound
  // stays above the bound) rather than trusted.
  EXPECT_EQ(test::WithFewDescriptors([&] {
              OneMemberWatch member(builds, /*max=*/2 << 20, 1000, false);
              member.watch.CheckOnce();
              if (!member.stopped.empty()) return 1;
              if (member.watch.walks() != 1) return 2;
              member.watch.CheckOnce();
              if (member.watch.walks() != 2) return 3;
              return member.stopped.empty() ? 0 : 4;
            }),
            0);
  // What it did count, above the bound, stops it.
  WriteBytes(builds + "/top", 3 << 20);
  EXPECT_EQ(test::WithFewDescriptors([&] {
              OneMemberWatch member(builds, /*max=*/2 << 20, 1000, false);
              member.watch.CheckOnce();
              return member.stopped.size() == 1 ? 0 : 1;
            }),
            0);
}

// A walk holds one descriptor per level it is down: with four free, a
// tree four levels deep (the root and three below it) is counted whole.
TEST(DiskUseTest, AWalkHoldsOneDescriptorPerLevel) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds + "/a/b/c");
  WriteBytes(builds + "/a/b/c/data", 1 << 20);
  EXPECT_EQ(test::WithFewDescriptors([&] {
              DiskUseScope scope;
              scope.dirs = {builds};
              const DiskUse use = MeasureDiskUse(scope);
              if (use.incomplete) return 1;
              return use.bytes >= (1u << 20) ? 0 : 2;
            }),
            0);
}

// A job may mount a FUSE file system (through fusermount) and never answer
// it: inside its directory, or over the directory itself. Neither holds
// the walk of its disk use, nor the watch of the other members.
TEST(DiskUseTest, AFileSystemThatNeverAnswersHoldsNoWalk) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a FUSE file system";
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  const std::string covered = temp.Sub("covered");
  const std::string big = temp.Sub("big");
  fs::create_directories(builds + "/mnt");
  fs::create_directories(covered);
  fs::create_directories(big);
  WriteBytes(builds + "/data", 1 << 20);
  WriteBytes(big + "/data", 3 << 20);
  test::StuckFuse inside(builds + "/mnt");
  if (!inside.error().empty()) GTEST_SKIP() << inside.error();
  test::StuckFuse over(covered);
  ASSERT_TRUE(over.error().empty()) << over.error();

  struct Seen {
    DiskUse inside;
    DiskUse over;
    uint64_t over_used = 0;
    std::vector<std::string> stopped;
  };
  const std::optional<Seen> ended =
      test::EndsWithin(std::chrono::seconds(20),
                       [&] {
                         Seen seen;
                         DiskUseScope scope;
                         scope.dirs = {builds};
                         seen.inside = MeasureDiskUse(scope);
                         scope.dirs = {covered};
                         seen.over = MeasureDiskUse(scope);
                         seen.over_used = FileSystemsUsedBytes(scope);
                         DiskWatch::Options options;
                         options.member_max = 2 << 20;
                         options.cost_factor = 0;
                         DiskWatch watch(
                             options,
                             [&] {
                               std::vector<DiskWatch::Member> members(3);
                               members[0].member_id = "inside";
                               members[0].scope.dirs = {builds};
                               members[1].member_id = "over";
                               members[1].scope.dirs = {covered};
                               members[2].member_id = "big";
                               members[2].scope.dirs = {big};
                               return members;
                             },
                             [&](const std::string& member_id, const DiskUse&,
                                 const std::string&, const std::string&,
                                 bool) { seen.stopped.push_back(member_id); });
                         watch.CheckOnce();
                         return seen;
                       },
                       {&inside, &over});
  ASSERT_TRUE(ended) << "the walks waited on a file system that never answers";
  const Seen& seen = *ended;

  // Inside: another file system, not entered; the rest counted.
  EXPECT_FALSE(seen.inside.incomplete) << seen.inside.error;
  EXPECT_GE(seen.inside.bytes, 1u << 20);
  // Over the directory: not walked, and said so.
  EXPECT_TRUE(seen.over.incomplete);
  EXPECT_EQ(seen.over.error, covered + ": a file system is mounted there");
  EXPECT_EQ(seen.over_used, 0u);
  // The other members are watched as ever.
  EXPECT_EQ(seen.stopped, std::vector<std::string>{"big"});
}

// A job's own FUSE mount, made through fusermount without allow_other,
// answers the agent (root) only Permission denied: it is another file
// system, left out as any other, and the walk is complete.
TEST(DiskUseTest, AMountTheAgentMayNotEnterIsLeftOutAndTheWalkComplete) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a FUSE file system";
  constexpr uid_t kJobUid = 61126;
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds + "/mnt");
  fs::create_directories(builds + "/gone");
  WriteBytes(builds + "/data", 1 << 20);
  test::StuckFuse live(builds + "/mnt", kJobUid);
  if (!live.error().empty()) GTEST_SKIP() << live.error();
  test::StuckFuse dead(builds + "/gone", kJobUid);
  ASSERT_TRUE(dead.error().empty()) << dead.error();
  dead.CloseDevice();
  // The one whose daemon is gone: asked, it could not hold the test.
  struct stat info = {};
  const int looked = lstat((builds + "/gone").c_str(), &info);
  if (looked == 0 || errno != EACCES) {
    GTEST_SKIP() << "this kernel lets root into a user's FUSE mount "
                    "(fuse's allow_sys_admin_access): lstat "
                 << (looked == 0 ? "succeeded" : std::strerror(errno));
  }

  DiskUseScope scope;
  scope.dirs = {builds};
  const std::optional<DiskUse> ended = test::EndsWithin(
      std::chrono::seconds(20), [&] { return MeasureDiskUse(scope); }, {&live});
  ASSERT_TRUE(ended) << "the walk waited on a file system that never answers";
  const DiskUse& use = *ended;

  EXPECT_FALSE(use.incomplete) << use.error;
  EXPECT_GE(use.bytes, 1u << 20);
}

TEST(DiskUseTest, ACancelledWalkEndsAtOnce) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds + "/a");
  WriteBytes(builds + "/a/data", 1 << 20);
  DiskUseScope scope;
  scope.dirs = {builds};
  std::atomic<bool> cancel{true};
  const DiskUse use = MeasureDiskUse(scope, &cancel);
  EXPECT_TRUE(use.cancelled);
  EXPECT_EQ(use.entries, 0u);
  cancel = false;
  EXPECT_FALSE(MeasureDiskUse(scope, &cancel).cancelled);
}

}  // namespace
}  // namespace gdt::agent
