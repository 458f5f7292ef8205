#ifndef GDT_COMMON_STATUS_MACROS_H_
#define GDT_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"

// Returns early from the enclosing function if `expr` is not OK. The only
// error-handling macro in the project; unwrap StatusOr values explicitly.
#define GDT_RETURN_IF_ERROR(expr)                               \
  do {                                                          \
    if (absl::Status gdt_status_ = (expr); !gdt_status_.ok()) { \
      return gdt_status_;                                       \
    }                                                           \
  } while (false)

#endif  // GDT_COMMON_STATUS_MACROS_H_
