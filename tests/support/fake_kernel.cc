#include "tests/support/fake_kernel.h"

#include <chrono>
#include <thread>
#include <utility>

namespace kernelserve::testing {
namespace {

class FakeRun : public PreparedRun {
 public:
  FakeRun(const Tensor* x, std::shared_ptr<FakeCounters> counters)
      : x_(x), counters_(std::move(counters)) {}

  absl::StatusOr<double> Launch(const KernelConfig& config) override {
    ++counters_->launches;
    if (int ms = counters_->launch_delay_ms.load(); ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    if (config.block_size == 5) return absl::InternalError("block_size 5 cannot launch");
    out_ = Tensor::Empty(DType::kF32, x_->shape());
    const float factor = config.block_size == 4 ? 3.0f : 2.0f;
    for (int64_t i = 0; i < x_->numel(); ++i) out_.SetFloat(i, factor * x_->GetFloat(i));
    return config.block_size == 4 ? 1e-4 : 1e-3 / config.block_size;
  }
  absl::StatusOr<TensorMap> Fetch() override { return TensorMap{{"out", out_}}; }

 private:
  const Tensor* x_;
  std::shared_ptr<FakeCounters> counters_;
  Tensor out_;
};

// The fake kernel's problem: just the spec of x.
struct FakeProblem : Problem {
  TensorSpec x;
};

class FakeImpl : public PlatformImpl {
 public:
  FakeImpl(std::shared_ptr<FakeCounters> counters, Platform platform)
      : counters_(std::move(counters)), platform_(platform) {}
  Platform platform() const override { return platform_; }
  const ConfigSchema& config_schema() const override {
    static const ConfigSchema* const kSchema = new ConfigSchema{{
        IntConfigField("block_size", 1, 5, "none: always set", "the fake's variant"),
    }};
    return *kSchema;
  }
  absl::Status Supports(const Problem&, const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  KernelConfig Heuristic(const Problem&, const DeviceInfo&) const override { return Config(1); }
  std::vector<KernelConfig> Candidates(const Problem&, const DeviceInfo&) const override {
    return {Config(1), Config(2), Config(3), Config(4), Config(5)};
  }
  absl::Status CheckConfig(const KernelConfig& config, const Problem&,
                           const DeviceInfo&) const override {
    return config_schema().Check(config, "fake");
  }
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem&, const TensorMap& inputs,
                                                       const DeviceInfo&) const override {
    ++counters_->prepares;
    return std::make_unique<FakeRun>(&inputs.at("x"), counters_);
  }

 private:
  KernelConfig Config(int block_size) const {
    return FakeConfig(block_size, PlatformName(platform_));
  }

  std::shared_ptr<FakeCounters> counters_;
  const Platform platform_;
};

// The fake GPU "auto": the configs of the fake cuda and cudnn platforms as one space; its
// heuristic is cudnn's block size 2.
class FakeGpuAutoImpl : public PlatformImpl {
 public:
  explicit FakeGpuAutoImpl(std::shared_ptr<FakeCounters> counters)
      : cuda_(counters, Platform::kCuda), cudnn_(std::move(counters), Platform::kCudnn) {}
  Platform platform() const override { return Platform::kCuda; }
  const ConfigSchema& config_schema() const override { return cuda_.config_schema(); }
  bool RunsConfigsOf(std::string_view config_platform) const override {
    return cuda_.RunsConfigsOf(config_platform) || cudnn_.RunsConfigsOf(config_platform);
  }
  absl::Status Supports(const Problem&, const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  KernelConfig Heuristic(const Problem&, const DeviceInfo&) const override {
    return FakeConfig(2, "cudnn");
  }
  std::vector<KernelConfig> Candidates(const Problem& problem,
                                       const DeviceInfo& device) const override {
    std::vector<KernelConfig> all = cuda_.Candidates(problem, device);
    for (const KernelConfig& c : cudnn_.Candidates(problem, device)) all.push_back(c);
    return all;
  }
  absl::Status CheckConfig(const KernelConfig& config, const Problem& problem,
                           const DeviceInfo& device) const override {
    return cuda_.CheckConfig(config, problem, device);
  }
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem& problem,
                                                       const TensorMap& inputs,
                                                       const DeviceInfo& device) const override {
    return cuda_.Prepare(problem, inputs, device);
  }

 private:
  FakeImpl cuda_;
  FakeImpl cudnn_;
};

}  // namespace

void AddFakeGpuPlatforms(FakeKernel* kernel, std::shared_ptr<FakeCounters> counters) {
  kernel->AddImpl(std::make_unique<FakeImpl>(counters, Platform::kCuda));
  kernel->AddImpl(std::make_unique<FakeImpl>(counters, Platform::kCudnn));
  kernel->SetGpuAutoImpl(std::make_unique<FakeGpuAutoImpl>(std::move(counters)));
}

DeviceInfo FakeGpu(int ordinal) {
  DeviceInfo gpu;
  gpu.platform = Platform::kCuda;
  gpu.ordinal = ordinal;
  gpu.fingerprint.kind = "gpu";
  return gpu;
}

KernelConfig FakeConfig(int block_size, std::string_view platform) {
  KernelConfig c;
  c.block_size = block_size;
  c.platform = std::string(platform);
  return c;
}

FakeKernel::FakeKernel(std::shared_ptr<FakeCounters> counters, bool also_cuda)
    : counters_(counters) {
  AddImpl(std::make_unique<FakeImpl>(counters, Platform::kCpu));
  if (also_cuda) AddImpl(std::make_unique<FakeImpl>(std::move(counters), Platform::kCuda));
}

const KernelSchema& FakeKernel::schema() const {
  static const KernelSchema* const schema =
      new KernelSchema{.name = "fake_scale",
                       .version = 1,
                       .doc = "out = 2 * x",
                       .inputs = {{"x", true, {DType::kF32}, {1}, "[N]", "the values"}},
                       .outputs = {{"out", "f32", "[N]", "2 * x"}},
                       .params = {},
                       .vjp = "",
                       .vjp_of = ""};
  return *schema;
}

absl::StatusOr<std::shared_ptr<const Problem>> FakeKernel::AnalyzeChecked(
    const TensorSpecMap& inputs, const Attributes&) const {
  ++counters_->analyses;
  auto problem = std::make_shared<FakeProblem>();
  problem->x = inputs.at("x");
  return problem;
}

TensorSpecMap FakeKernel::OutputSpecs(const Problem& problem) const {
  return {{"out", ProblemAs<FakeProblem>(problem).x}};
}

}  // namespace kernelserve::testing
