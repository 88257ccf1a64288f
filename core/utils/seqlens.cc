#include "core/utils/seqlens.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace kernelserve {
namespace {

// Checks that `mask` is a [B,S] bool/I32/I64 tensor.
absl::Status CheckMask(const Tensor& mask) {
  if (mask.dtype() != DType::kBool && mask.dtype() != DType::kI32 && mask.dtype() != DType::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask: expected bool, i32 or i64 [B,S], got ", mask.spec().DebugString()));
  }
  if (mask.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask: expected rank 2 [B,S], got ", ShapeString(mask.shape())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> IndexValues(const Tensor& tensor, const char* what) {
  if ((tensor.dtype() != DType::kI32 && tensor.dtype() != DType::kI64) || tensor.rank() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected i32 or i64 rank 1, got ", tensor.spec().DebugString()));
  }
  return tensor.ToInts();
}

absl::StatusOr<std::vector<int64_t>> PrepareLens(const std::vector<int64_t>& cu_seqlens) {
  if (cu_seqlens.empty()) {
    return absl::InvalidArgumentError("cu_seqlens: expected at least one value [B+1], got none");
  }
  if (cu_seqlens[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cu_seqlens[0]: expected 0, got ", cu_seqlens[0]));
  }
  std::vector<int64_t> lens(cu_seqlens.size() - 1);
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("cu_seqlens[", i, "] = ", cu_seqlens[i],
                                                     " decreases from cu_seqlens[", i - 1,
                                                     "] = ", cu_seqlens[i - 1]));
    }
    lens[i - 1] = cu_seqlens[i] - cu_seqlens[i - 1];
  }
  return lens;
}

absl::StatusOr<std::vector<int64_t>> PrepareLens(const Tensor& cu_seqlens) {
  KS_ASSIGN_OR_RETURN(std::vector<int64_t> values, IndexValues(cu_seqlens, "cu_seqlens"));
  return PrepareLens(values);
}

absl::StatusOr<std::vector<int64_t>> CuSeqlensFromLens(const std::vector<int64_t>& lens) {
  std::vector<int64_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) {
    if (lens[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("lens[", i, "]: expected >= 0, got ", lens[i]));
    }
    if (__builtin_add_overflow(cu[i], lens[i], &cu[i + 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("lens: running sum overflows int64 at index ", i));
    }
  }
  return cu;
}

absl::StatusOr<std::vector<int64_t>> LensFromMask(const Tensor& mask) {
  KS_RETURN_IF_ERROR(CheckMask(mask));
  const int64_t batch = mask.dim(0);
  const int64_t seq = mask.dim(1);
  std::vector<int64_t> lens(static_cast<size_t>(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      if (mask.GetInt(b * seq + s) != 0) ++lens[static_cast<size_t>(b)];
    }
  }
  return lens;
}

absl::StatusOr<std::vector<int64_t>> CuSeqlensFromMask(const Tensor& mask) {
  KS_ASSIGN_OR_RETURN(std::vector<int64_t> lens, LensFromMask(mask));
  return CuSeqlensFromLens(lens);
}

absl::Status ValidateCuSeqlens(const std::vector<int64_t>& cu_seqlens, int64_t total_tokens) {
  if (cu_seqlens.empty()) {
    return absl::InvalidArgumentError("cu_seqlens: expected at least one value [B+1], got none");
  }
  for (size_t i = 0; i < cu_seqlens.size(); ++i) {
    const int64_t value = cu_seqlens[i];
    if (i == 0 && value != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cu_seqlens[0] = ", value, ": expected 0"));
    }
    if (i > 0 && value < cu_seqlens[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("cu_seqlens[", i, "] = ", value,
                                                     ": decreases from cu_seqlens[", i - 1,
                                                     "] = ", cu_seqlens[i - 1]));
    }
    if (value > total_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cu_seqlens[", i, "] = ", value, ": exceeds the total token count ", total_tokens));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCuSeqlens(const Tensor& cu_seqlens, int64_t total_tokens) {
  KS_ASSIGN_OR_RETURN(std::vector<int64_t> values, IndexValues(cu_seqlens, "cu_seqlens"));
  return ValidateCuSeqlens(values, total_tokens);
}

}  // namespace kernelserve
