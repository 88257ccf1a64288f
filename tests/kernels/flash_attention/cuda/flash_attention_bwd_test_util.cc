#include "tests/kernels/flash_attention/cuda/flash_attention_bwd_test_util.h"

#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/runtime/cuda/cuda_run.h"
#include "tests/support/kernel_run.h"
#include "tests/support/testing.h"

namespace kernelserve {
namespace {

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t total = 0;
  for (int64_t x : v) total += x;
  return total;
}

}  // namespace

Tensor Offsets(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets = {0};
  for (int64_t n : lengths) offsets.push_back(offsets.back() + n);
  return Tensor::FromInts(DType::kI32, {static_cast<int64_t>(offsets.size())}, offsets);
}

Tensor Segments(int64_t b, int64_t s, uint64_t seed) {
  const Tensor draw = RandomTensor(DType::kI64, {b, s}, seed, 0.0f, 9.0f);
  std::vector<int64_t> ids(static_cast<size_t>(b * s));
  for (int64_t i = 0; i < b; ++i) {
    int64_t id = 1;
    for (int64_t j = 0; j < s; ++j) {
      if (draw.GetInt(i * s + j) == 0) ++id;
      ids[static_cast<size_t>(i * s + j)] = j >= s - 5 ? 0 : id;
    }
  }
  return Tensor::FromInts(DType::kI64, {b, s}, ids);
}

std::vector<BwdCase> DtypeHeadDimCases() {
  std::vector<BwdCase> cases;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t d : {64, 128}) {
      BwdCase c;
      c.dtype = dtype;
      c.d = d;
      c.label = absl::StrCat(dtype == DType::kBF16 ? "bf16" : "f16", " D=", d);
      cases.push_back(c);
      BwdCase causal = c;
      causal.params = {{"causal", true}};
      causal.label += " causal";
      cases.push_back(causal);
    }
  }
  return cases;
}

double BwdTolerance(DType dtype) { return dtype == DType::kBF16 ? 2e-2 : 5e-3; }

TensorMap BwdInputs(const BwdCase& c, uint64_t seed) {
  const bool varlen = !c.q_lengths.empty();
  const Shape q = varlen ? Shape{Sum(c.q_lengths) + 3, c.hq, c.d} : Shape{c.b, c.sq, c.hq, c.d};
  const Shape kv = varlen ? Shape{Sum(c.k_lengths) + 3, c.hkv, c.d} : Shape{c.b, c.sk, c.hkv, c.d};
  TensorMap fwd = {{"q", RandomTensor(c.dtype, q, seed, -2.0f, 2.0f)},
                   {"k", RandomTensor(c.dtype, kv, seed + 1)},
                   {"v", RandomTensor(c.dtype, kv, seed + 2)}};
  if (varlen) {
    fwd["cu_seqlens_q"] = Offsets(c.q_lengths);
    fwd["cu_seqlens_k"] = Offsets(c.k_lengths);
  }
  if (c.segments) {
    fwd["q_segment_ids"] = Segments(c.b, c.sq, seed + 5);
    fwd["kv_segment_ids"] = fwd.at("q_segment_ids");
  }
  if (!c.bias.empty()) {
    Tensor bias = RandomTensor(DType::kF32, c.bias, seed + 3);
    if (c.masked_row) {
      for (int64_t plane = 0; plane < c.bias[0] * c.bias[1]; ++plane) {
        for (int64_t j = 0; j < c.sk; ++j) {
          bias.SetFloat(plane * c.sq * c.sk + j, -std::numeric_limits<float>::infinity());
        }
      }
    }
    fwd["bias"] = bias;
  }
  Attributes fwd_params;
  for (const auto& [name, value] : c.params) {
    if (name != "return_dbias" && name != "deterministic") fwd_params[name] = value;
  }
  fwd_params["return_lse"] = true;
  absl::StatusOr<TensorMap> outs =
      testing::RunOnCpu(*MakeFlashAttention(), fwd, fwd_params, KernelConfig{});
  EXPECT_TRUE(outs.ok()) << c.label << ": " << outs.status();
  TensorMap inputs = fwd;
  if (outs.ok()) {
    inputs["out"] = outs->at("out");
    inputs["lse"] = outs->at("lse");
  }
  inputs["dout"] = RandomTensor(c.dtype, q, seed + 4);
  return inputs;
}

bool CheckBwdOnGpu(const Kernel& kernel, const PlatformImpl& gpu, const DeviceInfo& device,
                   const BwdCase& c, uint64_t seed, std::vector<KernelConfig> configs) {
  const TensorMap inputs = BwdInputs(c, seed);
  const Attributes attrs = *kernel.schema().CanonicalParams(c.params);
  const std::shared_ptr<const Problem> problem = *kernel.Analyze(SpecsOf(inputs), attrs);
  const absl::Status supported = gpu.Supports(*problem, device);
  if (!supported.ok()) {
    EXPECT_EQ(supported.code(), absl::StatusCode::kUnimplemented) << c.label << supported;
    std::printf("  %s refuses %s: %s\n", std::string(PlatformName(gpu.platform())).c_str(),
                c.label.c_str(), std::string(supported.message()).c_str());
    return false;
  }
  const TensorMap want = *testing::RunOnCpu(kernel, inputs, c.params, KernelConfig{});
  std::unique_ptr<PreparedRun> run = *gpu.Prepare(*problem, inputs, device);
  if (configs.empty()) configs = gpu.Candidates(*problem, device);
  const auto param = c.params.find("deterministic");
  const bool deterministic = param == c.params.end() || std::get<bool>(param->second);
  EXPECT_FALSE(configs.empty()) << c.label;
  for (const KernelConfig& config : configs) {
    const std::string where = absl::StrCat(c.label, " {", config.DebugString(), "}");
    EXPECT_TRUE(gpu.CheckConfig(config, *problem, device).ok()) << where;
    std::string first_bits;
    for (int round = 0; round < 2; ++round) {
      EXPECT_TRUE(cuda::PoisonOutputs(*run).ok()) << where;
      absl::StatusOr<double> seconds = run->Launch(config);
      if (!seconds.ok()) {
        ADD_FAILURE() << where << ": " << seconds.status();
        break;
      }
      const TensorMap got = *run->Fetch();
      EXPECT_EQ(got.size(), want.size()) << where;
      std::string bits;
      for (const auto& [name, tensor] : want) {
        const Tensor& mine = got.at(name);
        EXPECT_EQ(mine.spec(), tensor.spec()) << where << " " << name;
        const AllCloseResult finite = AllClose(mine, tensor, 1e9, 1e9);  // no NaN, no inf
        EXPECT_TRUE(finite.ok) << where << " " << name << ": " << finite.message;
        EXPECT_LT(RelativeError(mine, tensor), BwdTolerance(c.dtype)) << where << " " << name;
        bits += mine.bytes();
      }
      if (round == 0) first_bits = bits;
      if (deterministic) EXPECT_TRUE(bits == first_bits) << where << ": not the same bits twice";
      if (c.masked_row) {  // query row 0 of sequence 0, every head: dq exactly 0
        const Tensor& dq = got.at("dq");
        for (int64_t x = 0; x < c.hq * c.d; ++x) EXPECT_EQ(dq.GetFloat(x), 0.0f) << where;
      }
    }
  }
  return true;
}

}  // namespace kernelserve
