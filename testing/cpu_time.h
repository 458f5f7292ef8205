#ifndef GDT_TESTING_CPU_TIME_H_
#define GDT_TESTING_CPU_TIME_H_

#include <time.h>

#include <chrono>

namespace gdt::testing {

// The CPU time the calling thread has used so far. Tests that bound the
// cost of an algorithm (a pattern that must not backtrack exponentially, a
// file that must not expand without limit) measure this rather than wall
// time, which other processes on a loaded machine stretch.
inline std::chrono::nanoseconds ThreadCpuTime() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return std::chrono::seconds(now.tv_sec) +
         std::chrono::nanoseconds(now.tv_nsec);
}

}  // namespace gdt::testing

#endif  // GDT_TESTING_CPU_TIME_H_
