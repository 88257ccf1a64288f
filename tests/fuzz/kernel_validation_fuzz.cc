// kernel_validation_fuzz: what the executor does with a call before anything is launched, for
// both kernels, on shapes, dtypes, params, index data and configs read from the input (see
// ByteReader; make_corpus.py writes seeds): Executor::Plan (the kernel, its canonical params,
// Kernel::Analyze, the platform asked for, Supports, the cache key), then with the problem
// found: Kernel::OutputSpecs, the CPU platform's Heuristic, Candidates and CheckConfig, the
// CUDA config code (plain C++, in every build) on a GPU read from the input, and
// Kernel::ValidateData; and the chain's check of the config with the input's algorithm and
// named fields (Pin, as PutConfig and overrides meet it). Must never crash, hang or allocate
// much, and each platform must keep the promises of PlatformImpl: the heuristic is one of the
// candidates, every candidate passes CheckConfig; and Pin takes a config exactly when its
// platform runs it and its algorithm names a candidate's variant (CheckPin).
//
// Shapes keep the invariant every caller in the server guarantees (proto/convert.cc checks
// it): dims >= 0 and prod(dims) * itemsize fits in int64. Data is made only for calls of at
// most kMaxDataBytes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/executor.h"
#include "core/kernel.h"
#include "core/registry.h"
#include "core/selector_chain.h"
#include "core/store/config_cache.h"
#include "kernels/flash_attention/cuda/flash_attention_config.h"
#include "kernels/flash_attention/flash_attention_kernel.h"
#include "kernels/mean_pooling/cuda/mean_pooling_config.h"
#include "kernels/mean_pooling/mean_pooling_kernel.h"
#include "kernels/register.h"
#include "tests/fuzz/byte_reader.h"

namespace kernelserve {
namespace {

using fuzz::ByteReader;

constexpr int64_t kMaxDataBytes = int64_t{64} << 10;

const char* const kInputNames[] = {"x",
                                   "mask",
                                   "cu_seqlens",
                                   "q",
                                   "k",
                                   "v",
                                   "cu_seqlens_q",
                                   "cu_seqlens_k",
                                   "q_segment_ids",
                                   "kv_segment_ids",
                                   "bias"};
const char* const kAttrNames[] = {"chunk_size",   "causal",          "softmax_scale", "window_left",
                                  "window_right", "logits_soft_cap", "return_lse"};
const char* const kPlatforms[] = {"", "cpu", "cuda", "cudnn"};

// A CPU-only executor as the server has one (the GPU code is reached through the CUDA config
// functions below): kernels, an in-memory cache, the chain.
struct Engine {
  KernelRegistry registry;
  ConfigCache memory{16};
  ConfigSelectorChain chain{&memory, /*store=*/nullptr};
  std::unique_ptr<Executor> executor;

  Engine() {
    if (!RegisterBuiltinKernels(&registry).ok()) std::abort();
    executor = std::make_unique<Executor>(&registry, &chain, std::vector<DeviceInfo>{});
  }
};

void Fail(const std::string& kernel, const char* what, const KernelConfig& config) {
  std::fprintf(stderr, "kernel_validation_fuzz: %s: %s {%s}\n", kernel.c_str(), what,
               config.DebugString().c_str());
  std::abort();
}

bool Contains(const std::vector<KernelConfig>& configs, const KernelConfig& config) {
  return std::find(configs.begin(), configs.end(), config) != configs.end();
}

// A name from `names` (most of the time) or any string from the input.
template <size_t N>
std::string Name(ByteReader& in, const char* const (&names)[N]) {
  const uint8_t pick = in.U8();
  return pick < N ? names[pick] : in.String();
}

// A spec, or nothing when the server would have refused its shape. Dims are zigzag varints
// (-64..63 in one byte, any int64 in ten; negative ones are refused here, as the server's
// conversion refuses them).
bool ReadSpec(ByteReader& in, TensorSpec* spec) {
  spec->dtype = kAllDTypes[in.U8() % std::size(kAllDTypes)];
  const int rank = in.U8() % 6;
  for (int i = 0; i < rank; ++i) spec->shape.push_back(in.I64());
  absl::StatusOr<int64_t> count = NumElements(spec->shape);
  int64_t bytes = 0;
  return count.ok() &&
         !__builtin_mul_overflow(*count, static_cast<int64_t>(ItemSize(spec->dtype)), &bytes);
}

AttrValue ReadAttr(ByteReader& in) {
  switch (in.U8() % 4) {
    case 0:
      return in.U8() % 2 == 1;
    case 1:
      return in.I64();
    case 2:
      return in.Double();
    default:
      return in.String();
  }
}

// A config; its platform is also the platform the call asks for. `variants` gets the byte that
// says which other fields follow: bit 0 an algorithm (a string of the input), bit 1 a named
// field (a name and an int of the input); bits 2 and 3 make them a candidate's instead
// (CheckPin), bits 4 to 7 which one.
KernelConfig ReadConfig(ByteReader& in, uint8_t* variants) {
  KernelConfig config;
  config.block_q = in.Int();
  config.block_k = in.Int();
  config.block_d = in.Int();
  config.num_warps = in.Int();
  config.num_stages = in.Int();
  config.block_size = in.Int();
  config.platform = Name(in, kPlatforms);
  *variants = in.U8();
  if (*variants & 1) config.algorithm = in.String();
  if (*variants & 2) config.named[in.String()] = in.Int();
  return config;
}

// Nothing, or a GPU as the CUDA config code sees one (compute capability, SMs, shared memory).
std::unique_ptr<DeviceInfo> ReadGpu(ByteReader& in) {
  if (in.U8() % 2 == 0) return nullptr;
  auto gpu = std::make_unique<DeviceInfo>();
  gpu->platform = Platform::kCuda;
  gpu->ordinal = 0;
  gpu->fingerprint.kind = "gpu";
  gpu->fingerprint.cc_major = in.U8() % 2 == 0 ? 9 : 8;
  gpu->fingerprint.cc_minor = in.U8() % 2 == 0 ? 0 : 6;
  gpu->fingerprint.sm_count = in.Int();
  gpu->shared_memory_per_block_optin = in.I64();
  gpu->num_threads = in.Int();
  return gpu;
}

// A tensor of `spec` whose elements are read from the input (index inputs need real values).
Tensor ReadTensor(ByteReader& in, const TensorSpec& spec) {
  Tensor tensor = Tensor::Zeros(spec.dtype, spec.shape);
  const bool integer = spec.dtype == DType::kI32 || spec.dtype == DType::kI64;
  for (int64_t i = 0; i < tensor.numel() && !in.empty(); ++i) {
    const int64_t value = in.I64();
    if (spec.dtype == DType::kI64) {
      tensor.data_as<int64_t>()[i] = value;
    } else if (integer) {
      tensor.data_as<int32_t>()[i] = static_cast<int32_t>(value);
    } else if (spec.dtype == DType::kBool) {
      tensor.data_as<uint8_t>()[i] = static_cast<uint8_t>(value);
    } else {
      tensor.SetFloat(i, static_cast<float>(value));
    }
  }
  return tensor;
}

// Bytes of the tensors of `specs`, or more than kMaxDataBytes once past it (each spec's bytes
// fit int64: ReadSpec checked them; their sum need not).
int64_t DataBytes(const TensorSpecMap& specs) {
  int64_t total = 0;
  for (const auto& [name, spec] : specs) {
    const int64_t bytes =
        NumElements(spec.shape).value() * static_cast<int64_t>(ItemSize(spec.dtype));
    if (bytes > kMaxDataBytes - total) return kMaxDataBytes + 1;
    total += bytes;
  }
  return total;
}

// The promises of PlatformImpl on `device`: the heuristic is a candidate and every candidate
// passes CheckConfig. `config` (any) only has to be checked without harm.
void CheckPlatform(const CallPlan& plan, const KernelConfig& config) {
  const PlatformImpl& impl = *plan.impl;
  const Problem& problem = *plan.problem;
  const DeviceInfo& device = *plan.device;
  (void)impl.CheckConfig(config, problem, device);
  const KernelConfig heuristic = impl.Heuristic(problem, device);
  const std::vector<KernelConfig> candidates = impl.Candidates(problem, device);
  if (!Contains(candidates, heuristic)) {
    Fail(plan.kernel->name(), "heuristic not a candidate", heuristic);
  }
  for (const KernelConfig& candidate : candidates) {
    if (!impl.CheckConfig(candidate, problem, device).ok()) {
      Fail(plan.kernel->name(), "candidate fails CheckConfig", candidate);
    }
  }
}

// The chain's check of a config, the one an override and PutConfig go through
// (ConfigSelectorChain::Pin): it takes `config` (its algorithm and named fields made a
// candidate's by `variants`, see ReadConfig) exactly when the platform runs it (CheckConfig: its
// schema declares each named field) and its algorithm is empty or a candidate's, so that no text
// of a client's choosing is cached; what it takes is then in memory under the plan's key. A
// refusal is InvalidArgument.
void CheckPin(Engine& engine, const CallPlan& plan, KernelConfig config, uint8_t variants) {
  const PlatformImpl& impl = *plan.impl;
  const std::vector<KernelConfig> candidates = impl.Candidates(*plan.problem, *plan.device);
  if (!candidates.empty()) {
    const KernelConfig& pick = candidates[(variants >> 4) % candidates.size()];
    if (variants & 4) config.algorithm = pick.algorithm;
    if (variants & 8) config.named = pick.named;
  }
  auto named = [&](std::string KernelConfig::*field) {
    return (config.*field).empty() ||
           std::any_of(candidates.begin(), candidates.end(),
                       [&](const KernelConfig& c) { return c.*field == config.*field; });
  };
  const bool runs = impl.RunsConfigsOf(config.platform) &&
                    impl.CheckConfig(config, *plan.problem, *plan.device).ok();
  const bool takes = runs && named(&KernelConfig::algorithm);
  const absl::Status pinned = engine.executor->Pin(plan, config);
  if (pinned.ok() != takes) {
    Fail(plan.kernel->name(),
         takes ? "Pin refused a config the platform runs"
               : "Pin took a config with a variant no candidate has, or one "
                 "the platform does not run",
         config);
  }
  if (!pinned.ok() && !absl::IsInvalidArgument(pinned)) {
    Fail(plan.kernel->name(), "Pin refused with another code than InvalidArgument", config);
  }
  if (pinned.ok() && engine.memory.Get(plan.cache_key) != config) {
    Fail(plan.kernel->name(), "Pin took a config that memory does not hold", config);
  }
}

// The CUDA config code on `gpu` for the problem, with the promises its header makes.
void CheckCudaConfigs(const CallPlan& plan, const KernelConfig& config, const DeviceInfo& gpu) {
  if (plan.kernel->name() == "mean_pooling") {
    const auto& p = ProblemAs<MeanPoolingProblem>(*plan.problem);
    if (!IsFloating(p.dtype)) return;  // the CUDA platform's Supports refuses it
    const cuda::MeanPoolingShape shape = cuda::MeanPoolingShapeOf(p);
    const KernelConfig heuristic = cuda::MeanPoolingHeuristic(shape, gpu);
    if (!Contains(cuda::MeanPoolingCandidates(shape, gpu), heuristic)) {
      Fail("mean_pooling", "cuda heuristic not a candidate", heuristic);
    }
    return;
  }
  const auto& p = ProblemAs<FlashAttentionProblem>(*plan.problem);
  (void)cuda::FlashConfigFits(config, p.head_dim, gpu);
  // The promises hold on a GPU that some compiled config of the head dim fits (every sm_80 or
  // later GPU does). On one that none fits, the heuristic falls back to a config that does not
  // fit and is still the first candidate (docs/ROBUSTNESS.md).
  const std::vector<KernelConfig> compiled = cuda::FlashAttentionCompiledConfigs(p.head_dim);
  if (std::none_of(compiled.begin(), compiled.end(), [&](const KernelConfig& c) {
        return cuda::FlashConfigFits(c, p.head_dim, gpu);
      })) {
    return;
  }
  const KernelConfig heuristic = cuda::FlashAttentionHeuristic(p, gpu);
  const std::vector<KernelConfig> candidates = cuda::FlashAttentionCandidates(p, gpu);
  if (!candidates.empty() && !Contains(candidates, heuristic)) {
    Fail("flash_attention", "cuda heuristic not a candidate", heuristic);
  }
  for (const KernelConfig& candidate : candidates) {
    if (!cuda::FlashConfigFits(candidate, p.head_dim, gpu)) {
      Fail("flash_attention", "cuda candidate does not fit the device", candidate);
    }
  }
}

void Run(Engine& engine, const char* kernel, ByteReader& in) {
  TensorSpecMap specs;
  for (int n = in.U8() % 10; n > 0; --n) {
    std::string name = Name(in, kInputNames);
    TensorSpec spec;
    if (!ReadSpec(in, &spec)) return;
    specs[std::move(name)] = std::move(spec);
  }
  Attributes params;
  for (int n = in.U8() % 8; n > 0; --n) {
    std::string name = Name(in, kAttrNames);
    params[std::move(name)] = ReadAttr(in);
  }
  uint8_t variants = 0;
  const KernelConfig config = ReadConfig(in, &variants);
  const std::unique_ptr<DeviceInfo> gpu = ReadGpu(in);

  ExecuteOptions options;
  options.platform = config.platform;
  options.config = config;
  absl::StatusOr<CallPlan> plan = engine.executor->Plan(kernel, specs, params, options);
  if (!plan.ok()) return;
  (void)plan->kernel->OutputSpecs(*plan->problem);
  CheckPlatform(*plan, config);
  CheckPin(engine, *plan, config, variants);
  if (gpu != nullptr) CheckCudaConfigs(*plan, config, *gpu);
  if (DataBytes(specs) > kMaxDataBytes) return;
  TensorMap tensors;
  for (const auto& [name, spec] : specs) tensors[name] = ReadTensor(in, spec);
  (void)plan->kernel->ValidateData(*plan->problem, tensors);
}

}  // namespace
}  // namespace kernelserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kernelserve::Engine* const engine = new kernelserve::Engine();
  kernelserve::fuzz::ByteReader in(data, size);
  const char* kernel = in.U8() % 2 == 0 ? "mean_pooling" : "flash_attention";
  kernelserve::Run(*engine, kernel, in);
  return 0;
}
