#ifndef GDT_COMMON_MUTEX_H_
#define GDT_COMMON_MUTEX_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace gdt {

// std::mutex with Clang thread-safety annotations, so members can be marked
// ABSL_GUARDED_BY(mu_) and checked at compile time. Unlike absl::Mutex it is
// visible to ThreadSanitizer even though Debian's Abseil is not instrumented.
class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.lock();
    ++acquisitions_;
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // How many times it was taken (by Lock() or on waking from a CondVar
  // wait), counting the caller's own hold (read it while holding it): tells
  // a holder whether anyone else held it since an earlier look, e.g. to
  // reuse something built from what it guards.
  uint64_t acquisitions() const { return acquisitions_; }
  // For CondVar only.
  std::mutex& native() { return mu_; }

 private:
  friend class CondVar;
  std::mutex mu_;
  uint64_t acquisitions_ = 0;
};

// Holds a Mutex for its lifetime.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_.Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable used with a held gdt::Mutex.
class CondVar {
 public:
  // Waits until notified or `deadline`; the caller holds `mu`. Returns false
  // on timeout. Spurious wake-ups are possible: re-check the condition.
  template <typename TimePoint>
  bool WaitUntil(Mutex& mu, TimePoint deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
    const bool notified =
        cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    ++mu.acquisitions_;
    return notified;
  }
  void Wait(Mutex& mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
    cv_.wait(lock);
    lock.release();
    ++mu.acquisitions_;
  }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace gdt

#endif  // GDT_COMMON_MUTEX_H_
