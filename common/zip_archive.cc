#include "common/zip_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/status_macros.h"

namespace gdt {
namespace {

namespace fs = std::filesystem;

struct ReadCloser {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct WriteCloser {
  void operator()(archive* a) const { archive_write_free(a); }
};

bool SafeRelative(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  for (const absl::string_view part : absl::StrSplit(name, '/')) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

absl::Status CreateZip(const std::string& root,
                       const std::vector<std::string>& relative_paths,
                       const std::string& zip) {
  std::unique_ptr<archive, WriteCloser> a(archive_write_new());
  archive_write_set_format_zip(a.get());
  if (archive_write_open_filename(a.get(), zip.c_str()) != ARCHIVE_OK) {
    return absl::UnavailableError(absl::StrCat("cannot write zip ", zip, ": ",
                                               archive_error_string(a.get())));
  }
  std::vector<char> buffer(1 << 20);
  for (const std::string& rel : relative_paths) {
    const std::string path = root + "/" + rel;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("cannot read ", path));
    }
    std::unique_ptr<archive_entry, decltype(&archive_entry_free)> entry(
        archive_entry_new(), archive_entry_free);
    // The entry's permission bits and modification time go along.
    archive_entry_set_perm(entry.get(), st.st_mode & 0777);
    archive_entry_set_mtime(entry.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    const auto write_header = [&]() -> absl::Status {
      if (archive_write_header(a.get(), entry.get()) != ARCHIVE_OK) {
        return absl::UnavailableError(absl::StrCat(
            "cannot write zip ", zip, ": ", archive_error_string(a.get())));
      }
      return absl::OkStatus();
    };
    if (S_ISDIR(st.st_mode)) {
      std::string name = rel;
      if (name.empty() || name.back() != '/') name += '/';
      archive_entry_set_pathname(entry.get(), name.c_str());
      archive_entry_set_filetype(entry.get(), AE_IFDIR);
      archive_entry_set_size(entry.get(), 0);
      GDT_RETURN_IF_ERROR(write_header());
      continue;
    }
    archive_entry_set_pathname(entry.get(), rel.c_str());
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      const ssize_t n = readlink(path.c_str(), target.data(), target.size());
      if (n < 0 || static_cast<size_t>(n) >= target.size()) {
        return absl::NotFoundError(absl::StrCat("cannot read link ", path));
      }
      target.resize(static_cast<size_t>(n));
      archive_entry_set_filetype(entry.get(), AE_IFLNK);
      archive_entry_set_symlink(entry.get(), target.c_str());
      archive_entry_set_size(entry.get(), 0);
      GDT_RETURN_IF_ERROR(write_header());
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot archive ", path,
                       ": not a regular file, "
                       "directory or symbolic link"));
    }
    archive_entry_set_perm(entry.get(), (st.st_mode & 0777) | 0600);
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
    archive_entry_set_size(entry.get(), static_cast<la_int64_t>(st.st_size));
    archive_entry_set_filetype(entry.get(), AE_IFREG);
    GDT_RETURN_IF_ERROR(write_header());
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto n = in.gcount();
      if (n > 0 && archive_write_data(a.get(), buffer.data(),
                                      static_cast<size_t>(n)) < 0) {
        return absl::UnavailableError(absl::StrCat(
            "cannot write zip ", zip, ": ", archive_error_string(a.get())));
      }
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return absl::UnavailableError(absl::StrCat("cannot write zip ", zip, ": ",
                                               archive_error_string(a.get())));
  }
  return absl::OkStatus();
}

namespace {

// Writes the data of the current entry to `fd`, counting it in `extracted`
// against limits.max_bytes.
absl::Status CopyEntry(archive* a, int fd, const std::string& zip,
                       const std::string& name, const std::string& target,
                       const ExtractLimits& limits, std::vector<char>& buffer,
                       uint64_t& extracted) {
  while (true) {
    const la_ssize_t n = archive_read_data(a, buffer.data(), buffer.size());
    if (n == 0) return absl::OkStatus();
    if (n < 0) {
      return absl::DataLossError(absl::StrCat("corrupt zip ", zip, ": entry \"",
                                              name,
                                              "\": ", archive_error_string(a)));
    }
    if (static_cast<uint64_t>(n) > limits.max_bytes - extracted) {
      return absl::DataLossError(absl::StrCat(
          "zip ", zip, ": its files expand to more than ", limits.max_bytes,
          " bytes (at entry \"", name, "\"); not extracted further"));
    }
    extracted += static_cast<uint64_t>(n);
    for (la_ssize_t done = 0; done < n;) {
      const ssize_t wrote =
          write(fd, buffer.data() + done, static_cast<size_t>(n - done));
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote < 0) {
        return absl::UnavailableError(
            absl::StrCat("cannot write ", target, ": ", std::strerror(errno)));
      }
      done += wrote;
    }
  }
}

}  // namespace

absl::Status ExtractZip(const std::string& zip, const std::string& dest,
                        const ExtractLimits& limits) {
  std::unique_ptr<archive, ReadCloser> a(archive_read_new());
  archive_read_support_format_zip(a.get());
  if (archive_read_open_filename(a.get(), zip.c_str(), 1 << 20) != ARCHIVE_OK) {
    return absl::DataLossError(absl::StrCat("cannot open zip ", zip, ": ",
                                            archive_error_string(a.get())));
  }
  std::error_code error;
  fs::create_directories(dest, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", dest, ": ", error.message()));
  }
  std::vector<char> buffer(1 << 20);
  uint64_t extracted = 0;
  struct Directory {
    std::string name;
    mode_t perm;
    bool has_mtime;
    timespec mtime;
  };
  std::vector<Directory> directories;
  archive_entry* entry = nullptr;
  while (true) {
    const int rc = archive_read_next_header(a.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK) {
      return absl::DataLossError(absl::StrCat("corrupt zip ", zip, ": ",
                                              archive_error_string(a.get())));
    }
    const char* const pathname = archive_entry_pathname(entry);
    const std::string name = pathname != nullptr ? pathname : "";
    if (limits.select && !limits.select(name)) continue;
    if (!SafeRelative(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("zip ", zip, ": unsafe entry name \"", name, "\""));
    }
    const mode_t type = archive_entry_filetype(entry);
    const std::string target = (fs::path(dest) / name).string();
    // Made the way gitlab-runner extracts artifacts: whatever is in the way
    // (a link in `dest`, in the path of a directory or a file) is replaced,
    // never written through.
    if (type == AE_IFDIR) {
      GDT_RETURN_IF_ERROR(MakeDirsBeneath(dest, name));
      if (limits.links) {
        directories.push_back(
            {name,
             static_cast<mode_t>(archive_entry_perm(entry) & 07777),
             archive_entry_mtime_is_set(entry) != 0,
             {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}});
      }
      continue;
    }
    if (type == AE_IFLNK && limits.links) {
      const char* const link = archive_entry_symlink(entry);
      GDT_RETURN_IF_ERROR(
          CreateSymlinkBeneath(dest, name, link != nullptr ? link : ""));
      continue;
    }
    if (type != AE_IFREG) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zip ", zip, ": entry \"", name, "\" is not a regular file"));
    }
    absl::StatusOr<int> fd = CreateFileBeneath(dest, name);
    if (!fd.ok()) return fd.status();
    absl::Status written =
        CopyEntry(a.get(), *fd, zip, name, target, limits, buffer, extracted);
    // The entry's permission bits and modification time, when it has them.
    if (written.ok()) {
      const mode_t perm = archive_entry_perm(entry) & 0777;
      if (perm != 0 && fchmod(*fd, perm) != 0) {
        written = absl::UnavailableError(absl::StrCat(
            "cannot set the mode of ", target, ": ", std::strerror(errno)));
      }
      if (written.ok() && archive_entry_mtime_is_set(entry)) {
        const timespec times[2] = {
            {0, UTIME_OMIT},
            {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
        if (futimens(*fd, times) != 0) {
          written = absl::UnavailableError(absl::StrCat(
              "cannot set the time of ", target, ": ", std::strerror(errno)));
        }
      }
    }
    const int closed = close(*fd);
    GDT_RETURN_IF_ERROR(written);
    if (closed != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot write ", target, ": ", std::strerror(errno)));
    }
  }
  // The directories' modes and times, once nothing more is written in
  // them (the innermost first).
  for (auto it = directories.rbegin(); it != directories.rend(); ++it) {
    absl::StatusOr<int> fd = OpenDirBeneath(dest, it->name);
    if (!fd.ok()) return fd.status();
    const std::string target = (fs::path(dest) / it->name).string();
    absl::Status set;
    if (it->perm != 0 && fchmod(*fd, it->perm) != 0) {
      set = absl::UnavailableError(absl::StrCat(
          "cannot set the mode of ", target, ": ", std::strerror(errno)));
    }
    const timespec times[2] = {{0, UTIME_OMIT}, it->mtime};
    if (set.ok() && it->has_mtime && futimens(*fd, times) != 0) {
      set = absl::UnavailableError(absl::StrCat(
          "cannot set the time of ", target, ": ", std::strerror(errno)));
    }
    close(*fd);
    GDT_RETURN_IF_ERROR(set);
  }
  return absl::OkStatus();
}

}  // namespace gdt
