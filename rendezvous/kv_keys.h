#ifndef GDT_RENDEZVOUS_KV_KEYS_H_
#define GDT_RENDEZVOUS_KV_KEYS_H_

// Keys of a gang's key-value store that gdt itself uses: part of the
// contract between the coordinator and the tools in a job. No gRPC here.

namespace gdt::rendezvous {

// The gang's checkpoint notice: the deadline (Unix seconds) by which the
// gang stops, optionally followed by a space and a one-line note on who gave
// it. Set by the first member whose own notice comes (its job timeout
// nears; the deadline alone), or by the coordinator when it preempts the
// gang (with the note "preempted by the coordinator for gang G (priority
// P)"); `gdt-ckpt run` in every member polls it and prints the note. Cleared
// with the store at the end of the epoch, so a retried epoch starts without a
// notice.
inline constexpr char kCheckpointNoticeKey[] = "gdt/checkpoint-notice";

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_KV_KEYS_H_
