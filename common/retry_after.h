#ifndef GDT_COMMON_RETRY_AFTER_H_
#define GDT_COMMON_RETRY_AFTER_H_

// A refusal that waiting can fix (a per-project rate limit, checks paused
// while GitLab does not answer) carries how long the caller should wait
// before it tries again. Such a refusal is transient: the caller waits and
// retries; a refusal without it is final. In process the hint is a payload
// of the absl::Status; on the wire it travels as trailing metadata
// (rendezvous/metadata.h, kRetryAfterMetadata).

#include <chrono>
#include <optional>

#include "absl/status/status.h"

namespace gdt {

// `status` (not OK) with the hint `after` (at least 1 ms) attached. An OK
// status is returned unchanged.
absl::Status WithRetryAfter(absl::Status status,
                            std::chrono::milliseconds after);

// The hint `status` carries; nullopt when it has none (and for OK).
std::optional<std::chrono::milliseconds> RetryAfter(const absl::Status& status);

}  // namespace gdt

#endif  // GDT_COMMON_RETRY_AFTER_H_
