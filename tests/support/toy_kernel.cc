#include "tests/support/toy_kernel.h"

#include <chrono>
#include <utility>
#include <vector>

#include "core/schema.h"

namespace kernelserve::testing {
namespace {

struct ToyProblem : Problem {
  TensorSpec x;
  double factor = 2.0;
};

const KernelSchema& ToySchema() {
  static const KernelSchema* const schema = new KernelSchema{
      .name = "toy_scale",
      .version = 1,
      .doc = "out = factor * x",
      .inputs = {{"x", true, {DType::kF32}, {1, 2, 3}, "[N], [N,M] or [N,M,K]", "the values"}},
      .outputs = {{"out", "f32", "shape of x", "factor * x"}},
      .params = {{"factor", ParamType::kFloat, 2.0, -1000.0, 1000.0, "the scale"}},
      .vjp = "",
      .vjp_of = ""};
  return *schema;
}

class ToyKernel : public Kernel {
 public:
  const KernelSchema& schema() const override { return ToySchema(); }
  TensorSpecMap OutputSpecs(const Problem& problem) const override {
    return {{"out", ProblemAs<ToyProblem>(problem).x}};
  }

 protected:
  absl::StatusOr<std::shared_ptr<const Problem>> AnalyzeChecked(
      const TensorSpecMap& inputs, const Attributes& attrs) const override {
    auto problem = std::make_shared<ToyProblem>();
    problem->x = inputs.at("x");
    problem->factor = ParamOr<double>(schema(), attrs, "factor");
    return problem;
  }
};

class ToyRun : public PreparedRun {
 public:
  ToyRun(const ToyProblem& problem, const Tensor* x) : problem_(problem), x_(x) {}
  absl::StatusOr<double> Launch(const KernelConfig& /*config*/) override {
    const auto start = std::chrono::steady_clock::now();
    out_ = Tensor::Empty(DType::kF32, x_->shape());
    for (int64_t i = 0; i < x_->numel(); ++i) {
      out_.SetFloat(i, static_cast<float>(problem_.factor) * x_->GetFloat(i));
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  absl::StatusOr<TensorMap> Fetch() override { return TensorMap{{"out", out_}}; }

 private:
  const ToyProblem problem_;
  const Tensor* const x_;
  Tensor out_;
};

class ToyCpu : public PlatformImpl {
 public:
  Platform platform() const override { return Platform::kCpu; }
  const ConfigSchema& config_schema() const override {
    static const ConfigSchema* const kSchema = new ConfigSchema();  // no fields
    return *kSchema;
  }
  absl::Status Supports(const Problem&, const DeviceInfo&) const override {
    return absl::OkStatus();
  }
  KernelConfig Heuristic(const Problem&, const DeviceInfo&) const override { return Config(); }
  std::vector<KernelConfig> Candidates(const Problem&, const DeviceInfo&) const override {
    return {Config()};
  }
  absl::Status CheckConfig(const KernelConfig& config, const Problem&,
                           const DeviceInfo&) const override {
    if (!config.platform.empty() && config.platform != "cpu") {
      return absl::InvalidArgumentError("toy_scale runs on the cpu only");
    }
    return config_schema().Check(config, "toy_scale on cpu");
  }
  absl::StatusOr<std::unique_ptr<PreparedRun>> Prepare(const Problem& problem,
                                                       const TensorMap& inputs,
                                                       const DeviceInfo&) const override {
    return std::make_unique<ToyRun>(ProblemAs<ToyProblem>(problem), &inputs.at("x"));
  }

 private:
  static KernelConfig Config() {
    KernelConfig config;
    config.platform = "cpu";
    return config;
  }
};

}  // namespace

std::unique_ptr<Kernel> MakeToyKernel() {
  auto kernel = std::make_unique<ToyKernel>();
  kernel->AddImpl(std::make_unique<ToyCpu>());
  return kernel;
}

}  // namespace kernelserve::testing
