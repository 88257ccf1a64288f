// The form of a mean pooling call: one type for the analysis (MeanPoolingProblem), the CUDA
// config choice (cuda::MeanPoolingShape) and the CUDA kernels (a template argument). Plain C++17
// without dependencies, so that nvcc compiles it too.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_FORM_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_FORM_H_

#include <string_view>

namespace kernelserve {

// kDense: x [B,S,H], every row counts. kMasked: x [B,S,H] with mask [B,S]. kVarlen: x [T,H] or
// [1,T,H] with cu_seqlens [N+1]. The values are stable (the CUDA dispatch keys on them).
enum class PoolingForm : int { kDense = 0, kMasked = 1, kVarlen = 2 };

// "dense", "masked" or "varlen".
constexpr std::string_view PoolingFormName(PoolingForm form) {
  switch (form) {
    case PoolingForm::kDense:
      return "dense";
    case PoolingForm::kMasked:
      return "masked";
    case PoolingForm::kVarlen:
      return "varlen";
  }
  return "unknown";
}

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_MEAN_POOLING_FORM_H_
