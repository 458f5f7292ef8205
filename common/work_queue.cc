#include "common/work_queue.h"

#include <utility>

namespace gdt {

WorkQueue::WorkQueue(size_t threads, size_t max_queued)
    : max_queued_(max_queued) {
  if (threads == 0) threads = 1;
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i)
    threads_.emplace_back([this] { Work(); });
}

WorkQueue::~WorkQueue() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.NotifyAll();
  for (std::thread& thread : threads_) thread.join();
}

bool WorkQueue::TrySubmit(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (stopping_ || tasks_.size() >= max_queued_) return false;
    tasks_.push_back(std::move(task));
  }
  wake_.NotifyAll();
  return true;
}

void WorkQueue::Work() {
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      while (tasks_.empty() && !stopping_) wake_.Wait(mu_);
      if (tasks_.empty()) return;  // Stopping, and nothing is left to run.
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace gdt
