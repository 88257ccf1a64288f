#include "core/utils/segment_ids.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace kernelserve {
namespace {

absl::Status CheckIds(const Tensor& ids, const char* what) {
  if ((ids.dtype() != DType::kI32 && ids.dtype() != DType::kI64) || ids.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected i32 or i64 [B,S], got ", ids.spec().DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> SegmentIdsToMask(const Tensor& q_ids, const Tensor& kv_ids) {
  KS_RETURN_IF_ERROR(CheckIds(q_ids, "q_ids"));
  KS_RETURN_IF_ERROR(CheckIds(kv_ids, "kv_ids"));
  if (q_ids.dim(0) != kv_ids.dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_ids: expected batch ", q_ids.dim(0), " like q_ids, got ", kv_ids.dim(0)));
  }
  const int64_t batch = q_ids.dim(0);
  const int64_t sq = q_ids.dim(1);
  const int64_t sk = kv_ids.dim(1);
  const std::vector<int64_t> q = q_ids.ToInts();
  const std::vector<int64_t> kv = kv_ids.ToInts();
  Tensor mask = Tensor::Zeros(DType::kBool, {batch, sq, sk});
  uint8_t* out = mask.data_as<uint8_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t id = q[static_cast<size_t>(b * sq + i)];
      if (id <= 0) continue;
      for (int64_t j = 0; j < sk; ++j) {
        out[(b * sq + i) * sk + j] = kv[static_cast<size_t>(b * sk + j)] == id ? 1 : 0;
      }
    }
  }
  return mask;
}

absl::StatusOr<Tensor> SegmentIdsToMask(const Tensor& ids) { return SegmentIdsToMask(ids, ids); }

absl::StatusOr<Tensor> MaskToSegmentIds(const Tensor& mask) {
  const bool int_like =
      mask.dtype() == DType::kBool || mask.dtype() == DType::kI32 || mask.dtype() == DType::kI64;
  if (!int_like || mask.rank() != 3 || mask.dim(1) != mask.dim(2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask: expected bool, i32 or i64 [B,S,S], got ", mask.spec().DebugString()));
  }
  const int64_t batch = mask.dim(0);
  const int64_t seq = mask.dim(1);
  Tensor ids = Tensor::Zeros(DType::kI32, {batch, seq});
  int32_t* out = ids.data_as<int32_t>();
  std::string row(static_cast<size_t>(seq), '\0');
  for (int64_t b = 0; b < batch; ++b) {
    // Row contents -> segment id; only rows whose hashes collide are compared.
    absl::flat_hash_map<std::string, int32_t> segments;
    for (int64_t i = 0; i < seq; ++i) {
      bool any = false;
      for (int64_t j = 0; j < seq; ++j) {
        const bool set = mask.GetInt((b * seq + i) * seq + j) != 0;
        row[static_cast<size_t>(j)] = set ? '\1' : '\0';
        any = any || set;
      }
      if (!any) continue;  // padding keeps id 0
      const int32_t next_id = static_cast<int32_t>(segments.size() + 1);
      out[b * seq + i] = segments.try_emplace(row, next_id).first->second;
    }
  }
  return ids;
}

}  // namespace kernelserve
