#ifndef GDT_COMMON_BACKOFF_H_
#define GDT_COMMON_BACKOFF_H_

// The delay between retries of a call that failed for a passing reason (a
// coordinator restarting, a network blip): it grows exponentially up to a
// cap and is randomised, so that many clients cut off by the same outage do
// not all come back in the same instant. Not thread-safe: each retry loop
// owns one.

#include <chrono>
#include <cstdint>
#include <random>

namespace gdt {

class Backoff {
 public:
  enum class Jitter {
    // initial, 2x, 4x, ... up to max: no randomness (for callers that must
    // be predictable).
    kNone,
    // Uniform in [0, min(max, initial * 2^n)] ("full jitter"): spreads the
    // clients most, but a delay may be near zero.
    kFull,
    // `initial` first, then uniform in [initial, min(max, 3 * previous)]
    // ("decorrelated jitter"): never below `initial`, grows about as fast
    // as doubling.
    kDecorrelated,
  };

  struct Options {
    std::chrono::milliseconds initial{200};
    std::chrono::milliseconds max{2000};
    Jitter jitter = Jitter::kDecorrelated;
  };

  // Seeded from std::random_device.
  explicit Backoff(const Options& options);
  // Seeded with `seed`: the same seed gives the same delays (for tests).
  Backoff(const Options& options, uint64_t seed);

  // The delay to wait before the next attempt; each call advances.
  std::chrono::milliseconds Next();
  // Back to the first delay (after a success, or when the peer changed).
  void Reset();

 private:
  int64_t Uniform(int64_t low, int64_t high);

  Options options_;
  std::mt19937_64 random_;
  // The un-jittered exponential step (kNone, kFull) or the last delay
  // (kDecorrelated), in milliseconds.
  int64_t current_ = 0;
};

}  // namespace gdt

#endif  // GDT_COMMON_BACKOFF_H_
