#include "common/heap_trim.h"

#include <cstddef>
#include <vector>

#include "gtest/gtest.h"

namespace gdt {
namespace {

constexpr size_t kMiB = 1024 * 1024;

// A process whose allocator keeps what it frees until trimmed.
struct FakeProcess {
  size_t allocated = 0;
  size_t other = 4 * kMiB;  // Stacks and buffers a trim cannot give back.
  size_t resident = other;  // Anonymous; always >= allocated + other.
  int trims = 0;

  void Allocate(size_t bytes) {
    allocated += bytes;
    if (resident < allocated + other) resident = allocated + other;
  }
  void Free(size_t bytes) { allocated -= bytes; }  // Stays resident.

  HeapTrimmer::Hooks Hooks() {
    HeapTrimmer::Hooks hooks;
    hooks.read = [this] { return HeapReading{resident, allocated}; };
    hooks.trim = [this] {
      ++trims;
      resident = allocated + other;
    };
    return hooks;
  }
};

TEST(HeapTrimmerTest, GivesBackWhatABurstLeftResident) {
  FakeProcess process;
  process.Allocate(20 * kMiB);
  HeapTrimmer trimmer(8 * kMiB, 8, process.Hooks());

  process.Allocate(100 * kMiB);  // A burst of registrations...
  process.Free(100 * kMiB);      // ...whose temporaries are gone.
  EXPECT_EQ(trimmer.MaybeTrim(), 100 * kMiB);
  EXPECT_EQ(process.resident, 24 * kMiB);
  EXPECT_EQ(process.trims, 1);
}

TEST(HeapTrimmerTest, DoesNotTrimASteadyOrGrowingHeap) {
  FakeProcess process;
  HeapTrimmer trimmer(8 * kMiB, 8, process.Hooks());
  EXPECT_EQ(trimmer.MaybeTrim(), 0u);
  process.Allocate(200 * kMiB);  // Everything resident is in use.
  EXPECT_EQ(trimmer.MaybeTrim(), 0u);
  process.Free(7 * kMiB);  // Less than the threshold.
  EXPECT_EQ(trimmer.MaybeTrim(), 0u);
  EXPECT_EQ(process.trims, 0);
}

TEST(HeapTrimmerTest, CountsOnlyWhatWasFreedSinceTheLastTrim) {
  FakeProcess process;
  process.other = 30 * kMiB;  // Resident, never given back.
  HeapTrimmer trimmer(8 * kMiB, 8, process.Hooks());
  process.Allocate(50 * kMiB);
  process.Free(50 * kMiB);
  EXPECT_EQ(trimmer.MaybeTrim(), 50 * kMiB);
  // The 30 MiB that stayed do not make every later call trim again.
  EXPECT_EQ(trimmer.MaybeTrim(), 0u);
  EXPECT_EQ(trimmer.MaybeTrim(), 0u);
  process.Allocate(10 * kMiB);
  process.Free(10 * kMiB);
  EXPECT_EQ(trimmer.MaybeTrim(), 10 * kMiB);
  EXPECT_EQ(process.trims, 2);
}

TEST(HeapTrimmerTest, SpacesOutTrimsWhileABurstGoesOn) {
  FakeProcess process;
  HeapTrimmer trimmer(8 * kMiB, 8, process.Hooks());
  std::vector<int> trimmed_at;
  for (int call = 1; call <= 40; ++call) {
    process.Allocate(10 * kMiB);  // Every second leaves 10 MiB behind.
    process.Free(10 * kMiB);
    if (trimmer.MaybeTrim() > 0) trimmed_at.push_back(call);
  }
  // 1, then 2, 4, 8 calls apart, and 8 from then on.
  EXPECT_EQ(trimmed_at, (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 40}));
  // The burst ends: what it left is given back within 8 calls.
  process.Allocate(10 * kMiB);
  process.Free(10 * kMiB);
  int calls = 0;
  while (trimmer.MaybeTrim() == 0 && calls < 8) ++calls;
  EXPECT_LT(calls, 8);
  EXPECT_EQ(process.resident, process.allocated + process.other);
  // Quiet checks bring the spacing back down (8 calls to wait out, then
  // halved on each: 4, 2, 1): a new burst is trimmed at once.
  for (int quiet = 0; quiet < 10; ++quiet) EXPECT_EQ(trimmer.MaybeTrim(), 0u);
  process.Allocate(10 * kMiB);
  process.Free(10 * kMiB);
  EXPECT_EQ(trimmer.MaybeTrim(), 10 * kMiB);
}

TEST(HeapTrimmerTest, ReadsThisProcess) {
  // The system hooks find this process's resident set (a trimmer that read
  // 0 would never trim), and a trim of the real heap returns.
  HeapTrimmer::Hooks hooks = HeapTrimmer::SystemHooks();
  EXPECT_GT(hooks.read().resident_anon_bytes, kMiB);
  hooks.trim();
}

}  // namespace
}  // namespace gdt
