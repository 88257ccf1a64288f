#include "bench/bench_cases.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/bench_fill.h"
#include "core/status_macros.h"
#include "core/utils/random_tensor.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/mean_pooling/cuda/mean_pooling_config.h"
#include "kernels/mean_pooling/cuda/mean_pooling_dispatch.h"
#include "kernels/mean_pooling/cuda/mean_pooling_space.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_platform.h"

namespace kernelserve::bench {
namespace {

constexpr int kWarmup = 5;
constexpr int kMaxBuffers = 8;
// window_left and window_right of the "window" attention case.
constexpr int64_t kBenchWindow = 512;

struct CudaFree {
  void operator()(void* p) const { (void)cudaFree(p); }  // nothing to do on failure
};
using DevicePtr = std::unique_ptr<void, CudaFree>;

absl::StatusOr<DevicePtr> Malloc(size_t bytes) {
  void* p = nullptr;
  KS_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return DevicePtr(p);
}

// Owns two events; times the stream work between them.
class EventPair {
 public:
  ~EventPair() {
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
  }
  absl::Status Init() {
    KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
    KS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
    return absl::OkStatus();
  }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }
  absl::StatusOr<double> ElapsedUs() const {
    KS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
    float ms = 0;
    KS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e3;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

FillType FillTypeOf(DType dtype) {
  return dtype == DType::kF32 ? FillType::kF32
                              : (dtype == DType::kF16 ? FillType::kF16 : FillType::kBF16);
}

cuda::MeanPoolingShape ShapeOf(const BenchCase& c) {
  cuda::MeanPoolingShape shape;
  shape.form = c.form;
  shape.dtype = c.dtype;
  shape.num_sequences = c.batch;
  shape.total_rows = RowsOf(c);
  shape.hidden = c.hidden;
  return shape;
}

// The device inputs of a case, with the launch arguments pointing at buffer 0.
struct CaseBuffers {
  std::vector<DevicePtr> x;
  DevicePtr mask, offsets, out, workspace;
  cuda::PoolingDeviceArgs args;
};

absl::Status Upload(const void* host, size_t bytes, DevicePtr& dst) {
  KS_ASSIGN_OR_RETURN(dst, Malloc(bytes));
  KS_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst.get(), host, bytes, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status MakeBuffers(const BenchCase& c, int buffers, size_t workspace_bytes,
                         cudaStream_t stream, CaseBuffers& b) {
  const int64_t rows = RowsOf(c);
  const size_t x_bytes = static_cast<size_t>(rows * c.hidden) * ItemSize(c.dtype);
  for (int i = 0; i < buffers; ++i) {
    KS_ASSIGN_OR_RETURN(DevicePtr x, Malloc(x_bytes));
    KS_CUDA_RETURN_IF_ERROR(
        FillRandom(x.get(), rows * c.hidden, FillTypeOf(c.dtype), 1000 + i, stream));
    b.x.push_back(std::move(x));
  }
  b.args.x = b.x.front().get();
  b.args.num_sequences = c.batch;
  b.args.seq_len = c.seq_len;
  b.args.hidden = c.hidden;
  b.args.used_rows = rows;
  if (c.form == PoolingForm::kMasked) {
    std::vector<uint8_t> mask(static_cast<size_t>(c.batch * c.seq_len), 0);
    for (int64_t s = 0; s < c.batch; ++s) {
      std::fill_n(mask.begin() + s * c.seq_len, c.lengths[s], 1);
    }
    KS_RETURN_IF_ERROR(Upload(mask.data(), mask.size(), b.mask));
    b.args.mask = static_cast<const uint8_t*>(b.mask.get());
  } else if (c.form == PoolingForm::kVarlen) {
    std::vector<int64_t> offsets = {0};
    for (int64_t n : c.lengths) offsets.push_back(offsets.back() + n);
    KS_RETURN_IF_ERROR(Upload(offsets.data(), offsets.size() * sizeof(int64_t), b.offsets));
    b.args.cu_seqlens = static_cast<const int64_t*>(b.offsets.get());
  }
  KS_ASSIGN_OR_RETURN(b.out, Malloc(static_cast<size_t>(c.batch * c.hidden) * ItemSize(c.dtype)));
  b.args.out = b.out.get();
  KS_ASSIGN_OR_RETURN(b.workspace, Malloc(workspace_bytes));
  KS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.workspace.get(), 0, workspace_bytes, stream));
  KS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::StatusOr<double> TimeConfig(const BenchCase& c, CaseBuffers& b, const KernelConfig& config,
                                  int iters, cudaStream_t stream) {
  const int vec = cuda::PoolVectorWidth(static_cast<int64_t>(ItemSize(c.dtype)), c.hidden);
  KS_ASSIGN_OR_RETURN(const cuda::PoolingLaunchFn launch,
                      cuda::SelectPoolingLaunch(c.dtype, c.form, vec, config.num_stages));
  const cuda::PoolingLaunchShape shape{config.num_warps * 32, cuda::PoolLanes(config),
                                       config.block_size};
  EventPair events;
  KS_RETURN_IF_ERROR(events.Init());
  std::vector<double> times;
  for (int i = 0; i < kWarmup + iters; ++i) {
    b.args.x = b.x[static_cast<size_t>(i) % b.x.size()].get();
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.start(), stream));
    KS_CUDA_RETURN_IF_ERROR(launch(b.args, shape, b.workspace.get(), stream));
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.stop(), stream));
    KS_ASSIGN_OR_RETURN(const double us, events.ElapsedUs());
    if (i >= kWarmup) times.push_back(us);
  }
  return Median(std::move(times));
}

}  // namespace

std::vector<BenchCase> DefaultCases(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto draw = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<BenchCase> cases;
  const std::vector<std::pair<DType, std::vector<int64_t>>> dense = {
      {DType::kBF16, {32, 2048, 4096}},
      {DType::kF32, {32, 2048, 4096}},
      {DType::kBF16, {64, 512, 1024}}};
  for (PoolingForm form : {PoolingForm::kDense, PoolingForm::kMasked}) {
    for (const auto& [dtype, dims] : dense) {
      BenchCase c;
      c.form = form;
      c.dtype = dtype;
      c.batch = dims[0];
      c.seq_len = dims[1];
      c.hidden = dims[2];
      c.name = absl::StrCat(form == PoolingForm::kDense ? "dense " : "masked ",
                            Sv(DTypeName(dtype)), " [", dims[0], ",", dims[1], ",", dims[2], "]");
      if (form == PoolingForm::kMasked) {
        for (int64_t s = 0; s < c.batch; ++s) c.lengths.push_back(draw(c.seq_len / 4, c.seq_len));
      }
      cases.push_back(c);
    }
  }
  BenchCase varlen;
  varlen.form = PoolingForm::kVarlen;
  varlen.dtype = DType::kBF16;
  varlen.batch = 256;
  varlen.hidden = 4096;
  for (int64_t s = 0; s < varlen.batch; ++s) varlen.lengths.push_back(draw(1, 4096));
  varlen.name = absl::StrCat("varlen bf16 256x[1..4096], H=4096 (T=", RowsOf(varlen), ")");
  cases.push_back(varlen);
  return cases;
}

int64_t RowsOf(const BenchCase& c) {
  if (c.form != PoolingForm::kVarlen) return c.batch * c.seq_len;
  return std::accumulate(c.lengths.begin(), c.lengths.end(), int64_t{0});
}

int64_t CountedRowsOf(const BenchCase& c) {
  if (c.form == PoolingForm::kDense) return RowsOf(c);
  return std::accumulate(c.lengths.begin(), c.lengths.end(), int64_t{0});
}

absl::StatusOr<CaseResult> RunCase(const BenchCase& c, const DeviceInfo& device, int iters,
                                   bool tune, cudaStream_t stream) {
  CaseResult result;
  result.x_bytes = RowsOf(c) * c.hidden * static_cast<int64_t>(ItemSize(c.dtype));
  int l2_bytes = 0;
  KS_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device.ordinal));
  result.buffers = static_cast<int>(
      std::clamp<int64_t>((4 * static_cast<int64_t>(l2_bytes) + result.x_bytes - 1) /
                              std::max<int64_t>(result.x_bytes, 1),
                          1, kMaxBuffers));
  const cuda::MeanPoolingShape shape = ShapeOf(c);
  result.heuristic.config = cuda::MeanPoolingHeuristic(shape, device);
  const std::vector<KernelConfig> candidates =
      tune ? cuda::MeanPoolingCandidates(shape, device)
           : std::vector<KernelConfig>{result.heuristic.config};
  result.candidates = static_cast<int>(candidates.size());
  CaseBuffers b;
  {
    cuda::PoolingDeviceArgs sizes;
    sizes.num_sequences = c.batch;
    sizes.used_rows = RowsOf(c);
    sizes.hidden = c.hidden;
    size_t workspace = 0;
    const int vec = cuda::PoolVectorWidth(static_cast<int64_t>(ItemSize(c.dtype)), c.hidden);
    for (const KernelConfig& k : candidates) {
      const cuda::PoolingLaunchShape s{k.num_warps * 32, cuda::PoolLanes(k), k.block_size};
      workspace = std::max(workspace, cuda::PlanMeanPooling(sizes, s, vec).workspace_bytes);
    }
    KS_RETURN_IF_ERROR(MakeBuffers(c, result.buffers, workspace, stream, b));
  }
  KS_ASSIGN_OR_RETURN(result.heuristic.median_us,
                      TimeConfig(c, b, result.heuristic.config, iters, stream));
  result.tuned = result.heuristic;
  for (const KernelConfig& k : candidates) {
    KS_ASSIGN_OR_RETURN(const double us, TimeConfig(c, b, k, std::max(iters / 4, 5), stream));
    if (us < result.tuned.median_us) result.tuned = {k, us};
  }
  if (!(result.tuned.config == result.heuristic.config)) {  // re-time the winner in full
    KS_ASSIGN_OR_RETURN(result.tuned.median_us,
                        TimeConfig(c, b, result.tuned.config, iters, stream));
  }
  return result;
}

absl::StatusOr<double> MeasureCopyBandwidth(size_t bytes, int iters, cudaStream_t stream) {
  KS_ASSIGN_OR_RETURN(DevicePtr src, Malloc(bytes));
  KS_ASSIGN_OR_RETURN(DevicePtr dst, Malloc(bytes));
  KS_CUDA_RETURN_IF_ERROR(
      FillRandom(src.get(), static_cast<int64_t>(bytes / 4), FillType::kF32, 7, stream));
  EventPair events;
  KS_RETURN_IF_ERROR(events.Init());
  std::vector<double> times;
  for (int i = 0; i < kWarmup + iters; ++i) {
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.start(), stream));
    KS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
    KS_CUDA_RETURN_IF_ERROR(cudaEventRecord(events.stop(), stream));
    KS_ASSIGN_OR_RETURN(const double us, events.ElapsedUs());
    if (i >= kWarmup) times.push_back(us);
  }
  return 2.0 * static_cast<double>(bytes) / (Median(std::move(times)) * 1e-6);
}

std::vector<AttentionCase> DefaultAttentionCases(uint64_t seed) {
  std::vector<AttentionCase> cases;
  auto dense = [&](int64_t b, int64_t s, int64_t hq, int64_t hkv, int64_t d, bool causal) {
    AttentionCase c;
    c.name = absl::StrCat("bf16 D=", d, " [", b, ",", s, "] Hq=", hq,
                          hkv != hq ? absl::StrCat(" Hkv=", hkv) : "", causal ? " causal" : "");
    c.batch = b;
    c.seq_len = s;
    c.heads_q = hq;
    c.heads_kv = hkv;
    c.head_dim = d;
    c.causal = causal;
    cases.push_back(c);
  };
  for (bool causal : {false, true}) {
    dense(8, 2048, 16, 16, 128, causal);
    dense(4, 4096, 16, 16, 128, causal);
    dense(2, 8192, 16, 16, 128, causal);
  }
  dense(16, 1024, 16, 16, 64, false);
  // The other head dims: 96 and 256 run on wgmma (96 padded to 128), 32 on mma.sync.
  for (int64_t d : {32, 96, 256}) {
    for (bool causal : {false, true}) dense(8, 2048, 16, 16, d, causal);
  }
  dense(2, 4096, 32, 8, 128, false);
  dense(2, 4096, 32, 8, 128, true);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> length(128, 4096);
  AttentionCase varlen;
  varlen.batch = 64;
  varlen.heads_q = varlen.heads_kv = 16;
  varlen.head_dim = 128;
  for (int i = 0; i < 64; ++i) varlen.lengths.push_back(length(rng));
  for (bool causal : {false, true}) {
    varlen.causal = causal;
    varlen.name = absl::StrCat("bf16 D=128 varlen 64x[128..4096] Hq=16", causal ? " causal" : "");
    cases.push_back(varlen);
  }
  // Each option against the plain [4,4096] case (the own kernels run them all; cuDNN runs the
  // window and the bias).
  for (const char* option : {"softcap", "window", "segments", "bias"}) {
    dense(4, 4096, 16, 16, 128, false);
    cases.back().option = option;
    cases.back().name += absl::StrCat(" ", option);
  }
  return cases;
}

double AttentionFlops(const AttentionCase& c) {
  double pairs = 0.0;
  if (c.option == "window") {
    // Row i sees keys [i - 512, i + 512] inside [0, S).
    for (int64_t i = 0; i < c.seq_len; ++i) {
      pairs += static_cast<double>(std::min(i + kBenchWindow, c.seq_len - 1) -
                                   std::max(i - kBenchWindow, int64_t{0}) + 1);
    }
    pairs *= static_cast<double>(c.batch);
  } else if (c.lengths.empty()) {
    pairs = static_cast<double>(c.batch) * static_cast<double>(c.seq_len) *
            static_cast<double>(c.seq_len);
  } else {
    for (int64_t n : c.lengths) pairs += static_cast<double>(n) * static_cast<double>(n);
  }
  const double flops = 4.0 * pairs * static_cast<double>(c.heads_q * c.head_dim);
  return c.causal ? flops / 2 : flops;
}

namespace {

TensorMap AttentionInputs(const AttentionCase& c) {
  const int64_t d = c.head_dim;
  if (c.lengths.empty()) {
    TensorMap inputs = {{"q", RandomTensor(c.dtype, {c.batch, c.seq_len, c.heads_q, d}, 11)},
                        {"k", RandomTensor(c.dtype, {c.batch, c.seq_len, c.heads_kv, d}, 12)},
                        {"v", RandomTensor(c.dtype, {c.batch, c.seq_len, c.heads_kv, d}, 13)}};
    if (c.option == "segments") {
      const std::vector<int64_t> ones(static_cast<size_t>(c.batch * c.seq_len), 1);
      inputs["q_segment_ids"] = Tensor::FromInts(DType::kI64, {c.batch, c.seq_len}, ones);
      inputs["kv_segment_ids"] = inputs.at("q_segment_ids");
    } else if (c.option == "bias") {
      inputs["bias"] = RandomTensor(DType::kF32, {1, 1, c.seq_len, c.seq_len}, 14);
    }
    return inputs;
  }
  std::vector<int64_t> offsets = {0};
  for (int64_t n : c.lengths) offsets.push_back(offsets.back() + n);
  const int64_t total = offsets.back();
  const Tensor cu = Tensor::FromInts(DType::kI32, {static_cast<int64_t>(offsets.size())}, offsets);
  return {{"q", RandomTensor(c.dtype, {total, c.heads_q, d}, 11)},
          {"k", RandomTensor(c.dtype, {total, c.heads_kv, d}, 12)},
          {"v", RandomTensor(c.dtype, {total, c.heads_kv, d}, 13)},
          {"cu_seqlens_q", cu},
          {"cu_seqlens_k", cu}};
}

absl::StatusOr<double> TimeAttention(PreparedRun& run, const KernelConfig& config, int iters) {
  for (int i = 0; i < 3; ++i) KS_RETURN_IF_ERROR(run.Launch(config).status());
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    KS_ASSIGN_OR_RETURN(const double seconds, run.Launch(config));
    us.push_back(seconds * 1e6);
  }
  return Median(std::move(us));
}

}  // namespace

absl::StatusOr<AttentionResult> RunAttentionCase(const AttentionCase& c, const DeviceInfo& device,
                                                 int iters, bool tune) {
  std::unique_ptr<Kernel> kernel = MakeFlashAttention();
  const TensorMap inputs = AttentionInputs(c);
  Attributes params = {{"causal", c.causal}};
  if (c.option == "softcap") params["logits_soft_cap"] = 30.0;
  if (c.option == "window") {
    params["window_left"] = kBenchWindow;
    params["window_right"] = kBenchWindow;
  }
  KS_ASSIGN_OR_RETURN(const Attributes attrs, kernel->schema().CanonicalParams(params));
  KS_ASSIGN_OR_RETURN(const std::shared_ptr<const Problem> problem,
                      kernel->Analyze(SpecsOf(inputs), attrs));
  const PlatformImpl* cuda = kernel->GpuAuto();  // the own kernels and cuDNN's plans
  KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedRun> run, cuda->Prepare(*problem, inputs, device));
  AttentionResult result;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point first = Clock::now();
  result.heuristic.config = cuda->Heuristic(*problem, device);
  const Clock::time_point second = Clock::now();
  (void)cuda->Heuristic(*problem, device);
  result.first_heuristic_ms = std::chrono::duration<double, std::milli>(second - first).count();
  result.cached_heuristic_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - second).count();
  KS_ASSIGN_OR_RETURN(result.heuristic.median_us,
                      TimeAttention(*run, result.heuristic.config, iters));
  result.tuned = result.heuristic;
  if (!tune) return result;
  for (const KernelConfig& config : cuda->Candidates(*problem, device)) {
    ++result.candidates;
    KS_ASSIGN_OR_RETURN(const double us, TimeAttention(*run, config, iters));
    result.each.push_back({config, us});
    if (us < result.tuned.median_us) result.tuned = {config, us};
    Timing& best = config.platform == "cudnn" ? result.best_cudnn : result.best_cuda;
    if (best.median_us == 0.0 || us < best.median_us) best = {config, us};
  }
  return result;
}

}  // namespace kernelserve::bench
