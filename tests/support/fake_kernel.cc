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

class FakeImpl : public PlatformImpl {
 public:
  explicit FakeImpl(std::shared_ptr<FakeCounters> counters) : counters_(std::move(counters)) {}
  Platform platform() const override { return Platform::kCpu; }
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const TensorMap& inputs, const Attributes&,
                                                       const DeviceInfo&) override {
    ++counters_->prepares;
    return std::make_unique<FakeRun>(&inputs.at("x"), counters_);
  }
  absl::Status CheckConfig(const KernelConfig& config, const TensorSpecMap&,
                           const DeviceInfo&) const override {
    static constexpr ConfigFieldRange kRanges[] = {{"block_size", &KernelConfig::block_size, 1, 5}};
    return CheckConfigFields(config, "fake", kRanges);
  }

 private:
  std::shared_ptr<FakeCounters> counters_;
};

}  // namespace

KernelConfig FakeConfig(int block_size) {
  KernelConfig c;
  c.block_size = block_size;
  c.platform = "cpu";
  return c;
}

FakeKernel::FakeKernel(std::shared_ptr<FakeCounters> counters) {
  AddImpl(std::make_unique<FakeImpl>(std::move(counters)));
}

std::vector<ArgDoc> FakeKernel::input_docs() const { return {{"x", true, "f32 [N]"}}; }
std::vector<ArgDoc> FakeKernel::output_docs() const { return {{"out", true, "f32 [N]"}}; }

absl::Status FakeKernel::Validate(const TensorSpecMap& inputs, const Attributes&) const {
  if (inputs.size() != 1 || !inputs.contains("x") || inputs.at("x").dtype != DType::kF32) {
    return absl::InvalidArgumentError("fake_scale takes one input 'x' of dtype f32");
  }
  return absl::OkStatus();
}

TensorSpecMap FakeKernel::OutputSpecs(const TensorSpecMap& inputs, const Attributes&) const {
  return {{"out", inputs.at("x")}};
}

KernelConfig FakeKernel::HeuristicConfig(const TensorSpecMap&, const Attributes&,
                                         const DeviceInfo&) const {
  return FakeConfig(1);
}

std::vector<KernelConfig> FakeKernel::CandidateConfigs(const TensorSpecMap&, const Attributes&,
                                                       const DeviceInfo&) const {
  return {FakeConfig(1), FakeConfig(2), FakeConfig(3), FakeConfig(4), FakeConfig(5)};
}

}  // namespace kernelserve::testing
