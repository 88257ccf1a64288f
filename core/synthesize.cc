// The default Kernel::SynthesizeInputs: random data for tuning from shapes alone.
#include <random>

#include "core/kernel.h"
#include "core/status_macros.h"

namespace kernelserve {

absl::StatusOr<TensorMap> Kernel::SynthesizeInputs(const Problem& /*problem*/,
                                                   const TensorSpecMap& specs,
                                                   uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  TensorMap out;
  for (const auto& [name, spec] : specs) {
    if (const InputSchema* input = schema().FindInput(name);
        input != nullptr && input->shape_only) {
      out.emplace(name, Tensor::ShapeOnly(spec.dtype, spec.shape));
      continue;
    }
    KS_ASSIGN_OR_RETURN(int64_t n, NumElements(spec.shape));
    Tensor t = Tensor::Empty(spec.dtype, spec.shape);
    for (int64_t i = 0; i < n; ++i) {
      t.SetFloat(i, HoldsFloats(spec.dtype) ? uniform(rng) : 1.0f);
    }
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace kernelserve
