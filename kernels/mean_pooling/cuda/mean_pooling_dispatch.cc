#include "kernels/mean_pooling/cuda/mean_pooling_dispatch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"
#include "kernels/mean_pooling/cuda/mean_pooling_instances.h"
#include "kernels/mean_pooling/cuda/mean_pooling_space.h"

namespace kernelserve::cuda {
namespace {

static_assert(kPoolStages[0] == 4 && kPoolStages[1] == 8,
              "kPoolStages must match the stage counts of KS_FOR_EACH_POOLING_INSTANCE");
static_assert(kPoolMaxThreads == kPoolingKernelMaxThreads,
              "the config space and the kernel's launch bound disagree");

// One integer per (dtype, form, vector width, stages), for the switch below.
constexpr int Key(DType dtype, PoolingForm form, int vec, int stages) {
  return ((static_cast<int>(dtype) * 4 + static_cast<int>(form)) * 32 + vec) * 32 + stages;
}

}  // namespace

absl::StatusOr<PoolingLaunchFn> SelectPoolingLaunch(DType dtype, PoolingForm form, int vec,
                                                    int stages) {
  if (vec >= 1 && vec < 32 && stages >= 0 && stages < 32) {
#define KS_POOLING_CASE(DT, CT, FORM, VEC, STAGES)     \
  case Key(DType::DT, PoolingForm::FORM, VEC, STAGES): \
    return &LaunchMeanPooling<CT, PoolingForm::FORM, VEC, STAGES>;
    switch (Key(dtype, form, vec, stages)) {
      KS_FOR_EACH_POOLING_INSTANCE(KS_POOLING_CASE)
      default:
        break;
    }
#undef KS_POOLING_CASE
  }
  return absl::UnimplementedError(absl::StrCat(
      "mean pooling: no CUDA kernel compiled for dtype ", Sv(DTypeName(dtype)), ", form ",
      Sv(PoolingFormName(form)), ", ", vec, " values per lane, num_stages ", stages,
      " (compiled: f32/f16/bf16, 16-byte or single-value lanes, num_stages 4 or 8)"));
}

}  // namespace kernelserve::cuda
