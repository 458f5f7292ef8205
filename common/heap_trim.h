#ifndef GDT_COMMON_HEAP_TRIM_H_
#define GDT_COMMON_HEAP_TRIM_H_

#include <cstddef>
#include <functional>

namespace gdt {

// What the process's memory looks like to the trimmer: the anonymous part
// of its resident set (heap, stacks, gRPC's buffers) and the bytes the
// allocator has handed out and not had back.
struct HeapReading {
  size_t resident_anon_bytes = 0;
  size_t allocated_bytes = 0;
};

// Gives back to the system the memory that the C allocator keeps after a
// burst of short-lived allocations. glibc returns only the top of each heap
// on free(); the holes that a burst (thousands of registrations, joins,
// status pages) leaves between long-lived objects stay resident until
// malloc_trim(0). A daemon calls MaybeTrim() about once a second: it reads
// the resident set and the allocator's count, and trims only when the
// memory resident but not allocated grew by at least `min_release_bytes`
// since the last trim, so an idle or steady process pays two cheap reads.
// A trim costs (it walks every heap, and what it gave back is faulted in
// again by the next allocations): while a burst goes on and every check
// finds enough to trim, the calls that trim are spaced 1, 2, 4, ... up to
// `max_calls_between_trims` calls apart, and each check that finds nothing
// due when a trim could run halves the spacing again. So a burst is trimmed
// at most every `max_calls_between_trims` calls, and what it left behind
// within that many calls after it ends.
//
// Not thread-safe; one per process.
class HeapTrimmer {
 public:
  struct Hooks {
    std::function<HeapReading()> read;
    std::function<void()> trim;
  };
  // /proc/self/status (RssAnon), mallinfo2() and malloc_trim(0).
  static Hooks SystemHooks();

  explicit HeapTrimmer(size_t min_release_bytes,
                       int max_calls_between_trims = 8,
                       Hooks hooks = SystemHooks());

  // Trims when due. Returns how many bytes the resident set shrank by (0
  // when it did not trim, or the trim found nothing to give back).
  size_t MaybeTrim();

 private:
  static size_t Slack(const HeapReading& reading);

  const size_t min_release_bytes_;
  const int max_calls_between_trims_;
  Hooks hooks_;
  // Calls from one trim to the next while trims keep being due.
  int calls_between_trims_ = 1;
  // Calls left before the next trim may run.
  int calls_until_trim_ = 0;
  // Resident but unallocated bytes right after the last trim (or at start).
  size_t baseline_slack_;
};

}  // namespace gdt

#endif  // GDT_COMMON_HEAP_TRIM_H_
