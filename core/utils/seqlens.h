// Variable-length sequence bookkeeping on host data: cu_seqlens (cumulative offsets of packed
// sequences), per-sequence lengths, and padding masks.
//
// All functions are pure and thread-safe; they copy what they return.
#ifndef KERNELSERVE_CORE_UTILS_SEQLENS_H_
#define KERNELSERVE_CORE_UTILS_SEQLENS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace kernelserve {

// The values of a rank-1 I32 or I64 tensor (e.g. cu_seqlens) as int64. InvalidArgument for
// another dtype or rank; `what` names the input in the message ("cu_seqlens").
absl::StatusOr<std::vector<int64_t>> IndexValues(const Tensor& tensor, const char* what);

// cu_seqlens [B+1] -> lens [B] (lens[i] = cu[i+1] - cu[i]). InvalidArgument when cu_seqlens is
// empty, does not start at 0, or decreases (the message names the index and value).
absl::StatusOr<std::vector<int64_t>> PrepareLens(const std::vector<int64_t>& cu_seqlens);
// Same for a rank-1 I32/I64 tensor.
absl::StatusOr<std::vector<int64_t>> PrepareLens(const Tensor& cu_seqlens);

// lens [B] -> cu_seqlens [B+1] starting at 0. InvalidArgument on a negative length or an
// int64 overflow of the running sum.
absl::StatusOr<std::vector<int64_t>> CuSeqlensFromLens(const std::vector<int64_t>& lens);

// A padding mask [B,S] (bool, I32 or I64; nonzero = token present) -> lens [B], the number of
// present tokens per row. InvalidArgument for another dtype or rank.
absl::StatusOr<std::vector<int64_t>> LensFromMask(const Tensor& mask);
// A padding mask [B,S] -> cu_seqlens [B+1].
absl::StatusOr<std::vector<int64_t>> CuSeqlensFromMask(const Tensor& mask);

// Checks cu_seqlens against a packed total of `total_tokens`: non-empty, starts at 0, never
// decreases and no value exceeds `total_tokens`. InvalidArgument naming the first bad index
// and its value.
absl::Status ValidateCuSeqlens(const std::vector<int64_t>& cu_seqlens, int64_t total_tokens);
// Same for a rank-1 I32/I64 tensor.
absl::Status ValidateCuSeqlens(const Tensor& cu_seqlens, int64_t total_tokens);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_SEQLENS_H_
