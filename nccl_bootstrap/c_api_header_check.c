/* Compiled as C: the C API header must stay valid C. */
#include "nccl_bootstrap/gdt_nccl_bootstrap.h"

ncclResult_t (*const gdt_nccl_c_api_check)(ncclComm_t*, const char*, int,
                                           int*, int*, char*,
                                           size_t) = gdtNcclCommInitFromEnv;
