// Helpers for propagating absl::Status and absl::StatusOr.
#ifndef KERNELSERVE_CORE_STATUS_MACROS_H_
#define KERNELSERVE_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KS_CONCAT_INNER_(a, b) a##b
#define KS_CONCAT_(a, b) KS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define KS_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::absl::Status ks_status_ = (expr);         \
    if (!ks_status_.ok()) return ks_status_;    \
  } while (0)

// `lhs = value of rexpr`, or returns its status when `rexpr` (an absl::StatusOr) is not OK.
#define KS_ASSIGN_OR_RETURN(lhs, rexpr) \
  KS_ASSIGN_OR_RETURN_IMPL_(KS_CONCAT_(ks_statusor_, __LINE__), lhs, rexpr)

#define KS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

#endif  // KERNELSERVE_CORE_STATUS_MACROS_H_
