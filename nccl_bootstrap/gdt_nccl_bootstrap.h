/* C API of nccl_bootstrap: builds the NCCL communicator of a gdt job
 * (GDT_LAUNCHER: nccl) from its environment. See docs/nccl.md. */
#ifndef GDT_NCCL_BOOTSTRAP_GDT_NCCL_BOOTSTRAP_H_
#define GDT_NCCL_BOOTSTRAP_GDT_NCCL_BOOTSTRAP_H_

#include <nccl.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Builds this process's communicator named `name` (NULL: "world"): binds
 * the CUDA device of its local rank, exchanges the unique id(s) through the
 * gang key-value store and initialises NCCL, all within `timeout_ms`
 * (<= 0: 300000). On success stores the communicator in *comm and, when
 * not NULL, the rank and rank count, and returns ncclSuccess. On failure
 * returns ncclInvalidUsage (bad or missing environment, no CUDA device),
 * ncclSystemError (deadline passed, key-value store unreachable or
 * refusing) or NCCL's own error, and writes one NUL-terminated line into
 * `error` (truncated to `error_size`; may be NULL). */
ncclResult_t gdtNcclCommInitFromEnv(ncclComm_t* comm, const char* name,
                                    int timeout_ms, int* rank, int* nranks,
                                    char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* GDT_NCCL_BOOTSTRAP_GDT_NCCL_BOOTSTRAP_H_ */
