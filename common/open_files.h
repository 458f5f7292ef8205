#ifndef GDT_COMMON_OPEN_FILES_H_
#define GDT_COMMON_OPEN_FILES_H_

#include <cstdint>
#include <string>

namespace gdt {

// Below this many descriptors a daemon that anyone on its network (or any
// job on its host) can connect to is quickly out of them with idle
// connections (docs/security.md "Descriptor exhaustion").
inline constexpr uint64_t kLowOpenFilesLimit = 65536;

// Raises this process's soft RLIMIT_NOFILE to its hard limit: every
// connection to a gRPC server holds a descriptor, and gRPC's listener, once
// accept() fails with EMFILE, never accepts again. Children started through
// Subprocess get the soft limit the process had at its first call (jobs get
// what they always got). Logs `event=open_files_limit soft= hard=
// children=`, a warning below kLowOpenFilesLimit whose reason names
// `who_connects` (e.g. "a job on this host"). Safe to call more than once.
void RaiseOpenFilesLimit(const std::string& who_connects);

// This process's open descriptors and its soft RLIMIT_NOFILE, as
// "open files 1021 of 1024" (or what could be read), for reasons and logs.
std::string OpenFilesSummary();

// How many more descriptors this process may open now (its soft
// RLIMIT_NOFILE less those open), or -1 when that cannot be read.
int64_t SpareOpenFiles();

}  // namespace gdt

#endif  // GDT_COMMON_OPEN_FILES_H_
