// Conversions between segment ids (which packed sequence each token belongs to) and boolean
// attention masks, on host tensors.
//
// Segment id convention: ids > 0 name a segment; an id <= 0 marks padding, which attends to
// nothing and is attended by nothing. All functions are pure and thread-safe.
#ifndef KERNELSERVE_CORE_UTILS_SEGMENT_IDS_H_
#define KERNELSERVE_CORE_UTILS_SEGMENT_IDS_H_

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace kernelserve {

// q_ids [B,Sq], kv_ids [B,Sk] (I32 or I64) -> bool mask [B,Sq,Sk] where
// mask[b,i,j] = q_ids[b,i] == kv_ids[b,j] && q_ids[b,i] > 0. InvalidArgument on another dtype,
// rank, or a batch mismatch.
absl::StatusOr<Tensor> SegmentIdsToMask(const Tensor& q_ids, const Tensor& kv_ids);
// Self-attention: SegmentIdsToMask(ids, ids).
absl::StatusOr<Tensor> SegmentIdsToMask(const Tensor& ids);

// mask [B,S,S] (bool, I32 or I64; nonzero = attends) -> I32 segment ids [B,S]. Rows with equal
// contents form one segment; rows are grouped through a hash table keyed by the row's
// contents, so the cost is linear in the mask size. An all-false row gets id 0 (padding).
// Ids start at 1 in each batch, numbered in order of first appearance.
// InvalidArgument on another dtype or a shape other than [B,S,S].
absl::StatusOr<Tensor> MaskToSegmentIds(const Tensor& mask);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_SEGMENT_IDS_H_
