#ifndef GDT_TESTING_WAIT_H_
#define GDT_TESTING_WAIT_H_

// Waiting for a condition in a test, with a deadline instead of a sleep.

#include <chrono>
#include <thread>

namespace gdt::test {

// Polls `condition` every `poll` until it holds (true) or `timeout` has
// passed (false). The condition is checked once more at the deadline, so a
// zero timeout still looks once.
template <typename Condition>
bool WaitFor(Condition&& condition, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace gdt::test

#endif  // GDT_TESTING_WAIT_H_
