#ifndef GDT_TESTING_JOINED_THREAD_H_
#define GDT_TESTING_JOINED_THREAD_H_

// A thread that a test joins however the test ends.

#include <functional>
#include <thread>
#include <utility>

namespace gdt::test {

// A failed ASSERT returns from the test early. A std::thread that is still
// joinable then terminates the whole test binary, so the tests after it
// never run and the log ends in "terminate called without an active
// exception". A JoinedThread that the test has not joined by the end of its
// scope runs `release` first, which makes the thread's work end (tear the
// member down, shut the server down, open the gate the thread waits at),
// then joins it.
class JoinedThread {
 public:
  template <typename Body>
  JoinedThread(Body&& body, std::function<void()> release)
      : release_(std::move(release)), thread_(std::forward<Body>(body)) {}
  JoinedThread(const JoinedThread&) = delete;
  JoinedThread& operator=(const JoinedThread&) = delete;
  ~JoinedThread() {
    if (!thread_.joinable()) return;
    release_();
    thread_.join();
  }

  // The test's own join, once it has let the thread's work end itself.
  void Join() { thread_.join(); }

 private:
  std::function<void()> release_;
  std::thread thread_;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_JOINED_THREAD_H_
