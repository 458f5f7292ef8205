#ifndef GDT_COMMON_GANG_LIMITS_H_
#define GDT_COMMON_GANG_LIMITS_H_

// Bounds on what one member of a gang may ask of its host, shared by the
// parts that must agree on them: the agent takes a host of at most
// kMaxGpusPerNode GPUs (host.gpus), the executor refuses a job that asks for
// more per member (GDT_GPUS_PER_NODE), and gdt-ci lint and expand refuse the
// same values before the job is pushed.

namespace gdt {

inline constexpr int kMaxGpusPerNode = 1024;   // GDT_GPUS_PER_NODE: 0..this.
inline constexpr int kMaxProcsPerNode = 1024;  // GDT_NPROC_PER_NODE: 1..this.

}  // namespace gdt

#endif  // GDT_COMMON_GANG_LIMITS_H_
