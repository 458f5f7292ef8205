#ifndef GDT_COMMON_WORK_QUEUE_H_
#define GDT_COMMON_WORK_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace gdt {

// A fixed set of threads that run submitted tasks in order, with a bounded
// backlog. For work that may block for long (a call to another service), so
// that it never runs on threads that must stay free for other requests:
// when every thread is busy and the backlog is full, TrySubmit refuses at
// once instead of queueing without bound. Thread-safe.
class WorkQueue {
 public:
  // `threads` >= 1 workers; at most `max_queued` tasks wait for one.
  WorkQueue(size_t threads, size_t max_queued);
  // Refuses new tasks, runs every task already accepted, joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Accepts `task` to run on a worker; false (and `task` is dropped) when
  // the backlog is full or the queue is shutting down.
  bool TrySubmit(std::function<void()> task);

  // Tasks accepted and not yet started.
  size_t queued() const {
    MutexLock lock(mu_);
    return tasks_.size();
  }

 private:
  void Work();

  const size_t max_queued_;
  mutable Mutex mu_;
  CondVar wake_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gdt

#endif  // GDT_COMMON_WORK_QUEUE_H_
