#ifndef GDT_RENDEZVOUS_METADATA_H_
#define GDT_RENDEZVOUS_METADATA_H_

// The gRPC metadata keys that carry credentials (docs/security.md) and
// retry hints: part of the wire contract, shared by every client and server.

#include <chrono>

namespace gdt::rendezvous {

// A CI job's own job token, on the member calls after the join.
inline constexpr char kJobTokenMetadata[] = "gdt-job-token";
// The job's GitLab CI ID token (a JWT), on the same calls, for coordinators
// that verify members by ID token.
inline constexpr char kIdTokenMetadata[] = "gdt-id-token";
// An agent's host token, on its calls to the coordinator.
inline constexpr char kHostTokenMetadata[] = "gdt-host-token";
// A member's token from its assignment, on the calls to its host's agent.
inline constexpr char kMemberTokenMetadata[] = "gdt-member-token";
// The executor's own random id, on its JoinGang calls: the same for every
// preparation attempt of one job on one runner (kept in the job's TMPDIR).
// The coordinator refuses a join of a job whose member is held by another
// executor id, so that two executors of one job id never both run.
inline constexpr char kExecutorMetadata[] = "gdt-executor";
// "Bearer <admin token>", on operator calls.
inline constexpr char kAuthorizationMetadata[] = "authorization";

// Trailing metadata of a refusal that waiting can fix (a join refused by a
// per-project rate limit, member checks paused): how many milliseconds the
// caller should wait before it tries again. A refusal without it is final.
inline constexpr char kRetryAfterMetadata[] = "gdt-retry-after-ms";
// The longest hint a client honours, whatever a server says.
inline constexpr std::chrono::seconds kMaxRetryAfter{60};

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_METADATA_H_
