#ifndef GDT_EXECUTOR_SIGNALS_H_
#define GDT_EXECUTOR_SIGNALS_H_

#include <atomic>

namespace gdt::executor {

// Installs SIGTERM and SIGINT handlers that only record the signal (the
// runner's kill sequence and Ctrl-C); returns the record, 0 until one
// arrives. Call once, from main().
const std::atomic<int>& InstallTerminationHandlers();

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_SIGNALS_H_
