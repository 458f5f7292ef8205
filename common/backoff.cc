#include "common/backoff.h"

#include <algorithm>

namespace gdt {

Backoff::Backoff(const Options& options)
    : Backoff(options, std::random_device()()) {}

Backoff::Backoff(const Options& options, uint64_t seed)
    : options_(options), random_(seed) {
  options_.initial = std::max(options_.initial, std::chrono::milliseconds(1));
  options_.max = std::max(options_.max, options_.initial);
  Reset();
}

void Backoff::Reset() { current_ = 0; }

int64_t Backoff::Uniform(int64_t low, int64_t high) {
  if (high <= low) return low;
  return std::uniform_int_distribution<int64_t>(low, high)(random_);
}

std::chrono::milliseconds Backoff::Next() {
  const int64_t initial = options_.initial.count();
  const int64_t max = options_.max.count();
  switch (options_.jitter) {
    case Jitter::kNone:
    case Jitter::kFull: {
      current_ = current_ == 0 ? initial : std::min(max, current_ * 2);
      if (options_.jitter == Jitter::kNone) {
        return std::chrono::milliseconds(current_);
      }
      return std::chrono::milliseconds(Uniform(0, current_));
    }
    case Jitter::kDecorrelated: {
      current_ = current_ == 0 ? initial
                               : std::min(max, Uniform(initial, current_ * 3));
      return std::chrono::milliseconds(current_);
    }
  }
  return options_.max;
}

}  // namespace gdt
