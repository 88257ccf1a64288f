// LaunchMeanPooling and its compiled instances.
#include <algorithm>
#include <climits>

#include "kernels/mean_pooling/cuda/mean_pooling_device.cuh"
#include "kernels/mean_pooling/cuda/mean_pooling_instances.h"
#include "kernels/mean_pooling/cuda/mean_pooling_launch.h"

namespace kernelserve::cuda {
namespace {

constexpr size_t kWorkspaceAlign = 256;
// Grid limits (gridDim.x, gridDim.y).
constexpr int64_t kMaxGridX = INT_MAX;
constexpr int64_t kMaxGridY = 65535;

size_t AlignUp(size_t n) { return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

int Log2(int power_of_two) {
  int shift = 0;
  while ((1 << shift) < power_of_two) ++shift;
  return shift;
}

bool ValidShape(const PoolingLaunchShape& s) {
  const bool lanes_pow2 = s.lanes > 0 && (s.lanes & (s.lanes - 1)) == 0;
  return s.threads > 0 && s.threads % 32 == 0 && s.threads <= pooling::kMaxBlockThreads &&
         lanes_pow2 && s.lanes <= s.threads && s.block_rows > 0;
}

}  // namespace

PoolingPlan PlanMeanPooling(const PoolingDeviceArgs& args, const PoolingLaunchShape& shape,
                            int vec) {
  PoolingPlan plan;
  const int64_t per_row = (args.hidden + vec - 1) / vec;
  plan.tiles = std::max<int64_t>(1, (per_row + shape.lanes - 1) / shape.lanes);
  plan.chunks = std::max<int64_t>(1, (args.used_rows + shape.block_rows - 1) / shape.block_rows);
  const size_t slots = static_cast<size_t>(plan.chunks) * 2;
  plan.counters_bytes =
      AlignUp(static_cast<size_t>(args.num_sequences) * plan.tiles * sizeof(unsigned));
  plan.counts_offset = plan.counters_bytes;
  const size_t counts_bytes = AlignUp(slots * plan.tiles * sizeof(int));  // used when masked
  plan.partials_offset = plan.counts_offset + counts_bytes;
  plan.workspace_bytes =
      plan.partials_offset + AlignUp(slots * static_cast<size_t>(args.hidden) * sizeof(float));
  return plan;
}

template <typename T, PoolingForm kForm, int kVec, int kStages>
cudaError_t LaunchMeanPooling(const PoolingDeviceArgs& args, const PoolingLaunchShape& shape,
                              void* workspace, cudaStream_t stream) {
  if (!ValidShape(shape) || args.num_sequences < 0 || args.hidden < 0 || args.used_rows < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.num_sequences == 0 || args.hidden == 0) return cudaSuccess;  // nothing to write
  const PoolingPlan plan = PlanMeanPooling(args, shape, kVec);
  if (plan.chunks > kMaxGridX || plan.tiles > kMaxGridY) return cudaErrorInvalidConfiguration;
  pooling::KernelParams params;
  params.args = args;
  params.lanes = shape.lanes;
  params.lane_shift = Log2(shape.lanes);
  params.block_rows = shape.block_rows;
  params.chunks = plan.chunks;
  params.tiles = static_cast<int>(plan.tiles);
  char* base = static_cast<char*>(workspace);
  params.counters = reinterpret_cast<unsigned*>(base);
  params.counts = reinterpret_cast<int*>(base + plan.counts_offset);
  params.partials = reinterpret_cast<float*>(base + plan.partials_offset);
  const dim3 grid(static_cast<unsigned>(plan.chunks), static_cast<unsigned>(plan.tiles));
  pooling::MeanPoolingKernel<T, kForm, kVec, kStages><<<grid, shape.threads, 0, stream>>>(params);
  return cudaGetLastError();
}

#define KS_INSTANTIATE_POOLING(DT, CT, FORM, VEC, STAGES)                              \
  template cudaError_t LaunchMeanPooling<CT, PoolingForm::FORM, VEC, STAGES>(          \
      const PoolingDeviceArgs& args, const PoolingLaunchShape& shape, void* workspace, \
      cudaStream_t stream);
KS_FOR_EACH_POOLING_INSTANCE(KS_INSTANTIATE_POOLING)
#undef KS_INSTANTIATE_POOLING

}  // namespace kernelserve::cuda
