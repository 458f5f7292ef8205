#include "common/work_queue.h"

#include <atomic>
#include <chrono>
#include <future>

#include "gtest/gtest.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;

TEST(WorkQueueTest, RunsTasksOnItsThreads) {
  std::promise<std::thread::id> ran;
  {
    WorkQueue queue(2, 4);
    ASSERT_TRUE(
        queue.TrySubmit([&ran] { ran.set_value(std::this_thread::get_id()); }));
    std::future<std::thread::id> id = ran.get_future();
    ASSERT_EQ(id.wait_for(30s), std::future_status::ready);
    EXPECT_NE(id.get(), std::this_thread::get_id());
  }
}

TEST(WorkQueueTest, RefusesAtOnceWhenEveryThreadIsBusyAndTheBacklogIsFull) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  std::atomic<int> done{0};
  {
    WorkQueue queue(1, 2);
    ASSERT_TRUE(queue.TrySubmit([&] {
      started.set_value();
      released.wait();
      ++done;
    }));
    ASSERT_EQ(started.get_future().wait_for(30s), std::future_status::ready);
    // The only thread is blocked: two tasks wait, the third is refused.
    EXPECT_TRUE(queue.TrySubmit([&] { ++done; }));
    EXPECT_TRUE(queue.TrySubmit([&] { ++done; }));
    EXPECT_EQ(queue.queued(), 2u);
    EXPECT_FALSE(queue.TrySubmit([&] { ++done; }));
    release.set_value();
  }
  // Destruction ran every accepted task.
  EXPECT_EQ(done.load(), 3);
}

}  // namespace
}  // namespace gdt
