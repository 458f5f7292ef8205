// A walk over directory trees that members may write to, through
// descriptors (openat with O_NOFOLLOW; each listing read through the
// directory's own descriptor), so that neither a link nor a directory
// swapped meanwhile can take it elsewhere. It never follows a link, never
// enters a directory on another file system than its root's (nor a mount
// point), looks at no more entries and levels than its bounds, never
// enters nor shows the directories it keeps, holds one descriptor per
// level, and ends soon after it is cancelled. It never waits on a file
// system mounted in the tree: entries are looked at as the kernel holds
// them (AT_STATX_DONT_SYNC) and directories opened without crossing into a
// mount (RESOLVE_NO_XDEV), so a FUSE or network file system that a job
// mounts there and that never answers cannot hold it. What is done with
// each entry is the caller's: the
// measure of a member's disk use (disk_use.h) and the purge of a pool
// account's leftovers (isolation.h).
#ifndef GDT_AGENT_DIR_WALK_H_
#define GDT_AGENT_DIR_WALK_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"

namespace gdt::agent {

// What the kernel holds of `name` in `dir` (or of the path `name` with
// AT_FDCWD), not following a link and without asking the file system
// (AT_STATX_DONT_SYNC): a FUSE or network file system mounted there, which
// a job may run and leave unanswered, is never waited on. False with errno
// set.
bool StatNoWait(int dir, const char* name, struct stat* info);

// Opens the directory `path` (O_RDONLY, close-on-exec) unless it is a link
// or a file system is mounted on it (-1 with EXDEV; RESOLVE_NO_XDEV stops
// before entering the mount, so one that never answers is not waited on).
// Its parent is reached through links as given. -1 with errno set.
int OpenDirNotMounted(const std::string& path);

struct DirWalkOptions {
  // Directories never entered nor shown to the caller.
  std::vector<std::string> keep;
  // Entries looked at, counted apart for the walk's subject and for others
  // (see DirWalk::Each), and levels below a root.
  size_t max_entries = 0;
  int max_depth = 0;
  // Set: the walk ends soon (cancelled).
  const std::atomic<bool>* cancel = nullptr;
  // Each directory's entries are all read (counted against max_entries)
  // before the first is shown: for a caller that removes what it is shown,
  // since removing entries from a directory while its listing is read may
  // make some file systems skip others.
  bool list_first = false;
};

// What a walk met.
struct DirWalkResult {
  size_t entries = 0;  // The subject's entries looked at.
  size_t others = 0;   // Others' entries looked at on the way.
  // The subject's entries reached a bound (max_entries of them, or a
  // directory max_depth deep): the rest was not looked at.
  bool truncated = false;
  // Part of the walk could not be looked at: an error other than an entry
  // going away (e.g. EMFILE), or others' entries reached a bound. `error`
  // says why (the first such).
  bool incomplete = false;
  std::string error;
  bool cancelled = false;
};

class DirWalk {
 public:
  // One entry (neither "." nor "..", nor a kept directory) named `name` in
  // the directory `dir`, which lies `depth` levels below the root (0: the
  // root itself), with what statx() says of it (not following a link; as
  // the kernel holds it).
  // False stops the listing of `dir`. Valid only during the call.
  using Each = absl::FunctionRef<bool(int dir, const char* name,
                                      const struct stat& info, int depth)>;

  explicit DirWalk(DirWalkOptions options);
  DirWalk(const DirWalk&) = delete;
  DirWalk& operator=(const DirWalk&) = delete;

  // Lists the directory `path` (not a link, not a kept one), its entries
  // counted as the subject's when `own`, if `enter(info)` says so. A root
  // that is missing or a link is skipped. A root that is the top of a file
  // system mounted there is not listed, and the walk is incomplete: a job
  // may mount one over its own directory (FUSE, through fusermount) that
  // never answers.
  void Root(const std::string& path, bool own,
            absl::FunctionRef<bool(const struct stat&)> enter, Each each);

  // Lists the directory `name` (`info`) found in `dir` (`depth` levels
  // below the root). False, without listing it, when it lies on another
  // file system, is max_depth deep (a bound), or cannot be opened (an
  // error, unless it went away).
  bool Enter(int dir, const char* name, const struct stat& info, int depth,
             bool own, Each each);

  // Finds what the account `uid` owns under `root`: calls `found` for each
  // entry it owns, descending only into directories others may write to
  // (everyone, or the account's group `gid`), where the account can have
  // entries without owning the directory. Others' entries looked at on the
  // way count as the subject's when `own`.
  void FindOwned(const std::string& root, uid_t uid, gid_t gid, bool own,
                 Each found);

  // Whether Enter() with `depth` would be refused for max_depth.
  bool TooDeep(int depth) const { return depth + 1 >= options_.max_depth; }

  // The entry last shown as another's is the subject's: counted so. False
  // at the subject's bound (truncated) or once cancelled.
  bool Claim();

  // On the file system of the root being walked.
  bool OnRootFileSystem(const struct stat& info) const {
    return info.st_dev == root_dev_;
  }

  const DirWalkResult& result() const { return result_; }

 private:
  // Lists the root `path` opened as `fd` (< 0: the open failed, errno
  // set); see Root().
  void ListRoot(int fd, const std::string& path, bool own,
                absl::FunctionRef<bool(const struct stat&)> enter, Each each);
  // Takes `fd` (a directory `depth` deep) and closes it.
  void List(int fd, bool own, int depth, Each each);
  // Shows the entry `name` of the directory `fd` to `each` (unless it went
  // away or is kept); false when `each` ends the listing.
  bool Show(int fd, const char* name, int depth, Each each);
  bool Cancelled();
  bool Visit(bool own);
  void Bound(bool own, const char* which);
  void Failed(const char* call, const std::string& what);
  void Incomplete(std::string error);
  bool Kept(const struct stat& info) const;
  bool Search(uid_t uid, gid_t gid, bool own, Each found, int dir,
              const char* name, const struct stat& info, int depth);

  const DirWalkOptions options_;
  DirWalkResult result_;
  std::set<std::pair<dev_t, ino_t>> keep_;
  dev_t root_dev_ = 0;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_DIR_WALK_H_
