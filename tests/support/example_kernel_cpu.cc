#include "tests/support/example_kernel_cpu.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/cpu_impl.h"
#include "kernels/runtime/cpu/cpu_run.h"
#include "kernels/runtime/cpu/float_convert.h"
#include "kernels/runtime/cpu/parallel_for.h"
#include "tests/support/example_kernel.h"

namespace kernelserve::testing {
namespace {

constexpr int64_t kDefaultBlockRows = 16;
// Below this many elements of x one thread beats starting more (as for mean pooling).
constexpr int64_t kSingleThreadElements = int64_t{1} << 18;

absl::Status CheckArgs(const RmsNormArgs& args) {
  if (!IsFloating(args.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm: dtype ", Sv(DTypeName(args.dtype)), " is not f32, f16 or bf16"));
  }
  if (args.rows < 0 || args.hidden < 0) {
    return absl::InvalidArgumentError("rms_norm: negative size");
  }
  if (!(args.eps > 0)) return absl::InvalidArgumentError("rms_norm: eps must be > 0");
  return absl::OkStatus();
}

// Normalizes row `r` of x into out through `row` (hidden floats of scratch).
void NormalizeRow(const RmsNormArgs& args, int64_t r, const float* weight, float* row) {
  const int64_t h_count = args.hidden;
  cpu::LoadAsFloat(args.dtype, args.x, r * h_count, h_count, row);
  float sum = 0.0f;
  for (int64_t h = 0; h < h_count; ++h) sum += row[h] * row[h];
  const float inv =
      1.0f / std::sqrt(sum / static_cast<float>(h_count) + static_cast<float>(args.eps));
  for (int64_t h = 0; h < h_count; ++h) row[h] = row[h] * inv * weight[h];
  cpu::StoreFromFloat(args.dtype, row, h_count, args.out, r * h_count);
}

}  // namespace

absl::Status RmsNormCpu(const RmsNormArgs& args, const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckRmsNormCpuConfig(config));
  KS_RETURN_IF_ERROR(CheckArgs(args));
  if (args.rows == 0 || args.hidden == 0) return absl::OkStatus();  // nothing to write
  const int64_t h_count = args.hidden;
  std::vector<float> weight(static_cast<size_t>(h_count), 1.0f);
  if (args.weight != nullptr) cpu::LoadAsFloat(args.dtype, args.weight, 0, h_count, weight.data());
  const int64_t block_rows = config.block_size > 0 ? config.block_size : kDefaultBlockRows;
  const int64_t items = (args.rows + block_rows - 1) / block_rows;
  const int threads = cpu::CpuWorkerCount(cpu::RequestedThreads(config), items);
  std::vector<std::vector<float>> rows(static_cast<size_t>(threads),
                                       std::vector<float>(static_cast<size_t>(h_count)));
  return cpu::ParallelForInterruptible(
      items, threads, args.interrupt, [&](int worker, int64_t item) {
        float* row = rows[static_cast<size_t>(worker)].data();
        const int64_t last = std::min(args.rows, (item + 1) * block_rows);
        for (int64_t r = item * block_rows; r < last; ++r) {
          NormalizeRow(args, r, weight.data(), row);
        }
      });
}

absl::Status CheckRmsNormCpuConfig(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(cpu::CheckCpuPlatform(config));
  return RmsNormCpuConfigSchema().Check(config, "rms_norm on cpu");
}

const ConfigSchema& RmsNormCpuConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField("block_size", 0, kMaxRmsNormBlockRows, "0: 16", "rows per work item"),
      cpu::CpuThreadsField(),
  }};
  return *kSchema;
}

namespace {

KernelConfig RmsNormCpuConfig(int block_size, int threads) {
  KernelConfig config;
  config.block_size = block_size;
  cpu::SetRequestedThreads(&config, threads);
  config.platform = "cpu";
  return config;
}

// Points the args at x and weight in the inputs (which outlive it) and allocates out.
// Not thread-safe (see PreparedRun).
class RmsNormCpuRun : public cpu::CpuRun {
 public:
  RmsNormCpuRun(const RmsNormProblem& problem, const TensorMap& inputs) {
    args_.dtype = problem.dtype;
    args_.rows = problem.rows;
    args_.hidden = problem.hidden;
    args_.eps = problem.eps;
    args_.x = inputs.at("x").data();
    if (problem.has_weight) args_.weight = inputs.at("weight").data();
    AddOutput("out", problem.dtype, problem.shape, &args_.out);
  }

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    args_.interrupt = InterruptOrNull();
    return TimedLaunch([&] { return RmsNormCpu(args_, config); });
  }

 private:
  RmsNormArgs args_;  // points into x, weight and out
};

// rms_norm as cpu::CpuImpl runs it.
struct RmsNormCpuTraits {
  using ProblemType = RmsNormProblem;
  using Run = RmsNormCpuRun;

  static KernelConfig Heuristic(const RmsNormProblem& p, const DeviceInfo& device) {
    const bool small = p.rows * p.hidden < kSingleThreadElements;
    return RmsNormCpuConfig(kDefaultBlockRows, small ? 1 : cpu::HardwareThreads(device));
  }
  static std::vector<KernelConfig> Candidates(const RmsNormProblem& /*p*/,
                                              const DeviceInfo& device) {
    const std::set<int> threads = {1, 2, cpu::HardwareThreads(device)};
    std::vector<KernelConfig> configs;
    for (int block_size : {16, 64, 256}) {
      for (int t : threads) configs.push_back(RmsNormCpuConfig(block_size, t));
    }
    return configs;
  }
  static const ConfigSchema& ConfigFields() { return RmsNormCpuConfigSchema(); }
  static absl::Status CheckConfig(const KernelConfig& config) {
    return CheckRmsNormCpuConfig(config);
  }
};

}  // namespace

std::unique_ptr<PlatformImpl> MakeRmsNormCpu() {
  return std::make_unique<cpu::CpuImpl<RmsNormCpuTraits>>();
}

}  // namespace kernelserve::testing
