// kernelserve-gpu-bench: CUDA mean pooling against the GPU's own copy bandwidth, and CUDA flash
// attention forward in TFLOP/s.
//
// Prints the device-to-device copy bandwidth it measures, then per case the kernel time of the
// heuristic config and of the fastest candidate, the read bandwidth (bytes of x read once /
// time) and its ratio to the copy bandwidth. --json writes the same numbers (and the cases'
// lengths) for bench/peers.py, which times PyTorch on the same cases. See docs/GPU.md.
// Attention cases print the heuristic and tuned time and TFLOP/s (4*B*Hq*Sq*Sk*D, halved when
// causal); the JSON's "attention" list carries them for bench/peers.py too, and its
// "attention_bwd" list flash_attention_bwd's (cuda platform: own kernels and cuDNN's plans,
// 2.5x the forward's FLOPs), its "attention_dbias" list the same with a bias, without and with
// return_dbias.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bench/bench_cases.h"
#include "bench/bwd_bench.h"
#include "core/utils/random_tensor.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/flash_attention/flash_attention_bwd.h"
#include "kernels/mean_pooling/mean_pooling.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "kernels/runtime/cuda/launch_gate.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, json, "", "also write the results to this JSON file");
ABSL_FLAG(int, iters, 50, "timed runs per config (after 5 warm-up runs); the median is kept");
ABSL_FLAG(bool, launch_gate, true,
          "time the kernels alone (the stream waits at a gate while the host queues each "
          "launch, as the server does for large calls); false: the events also count the host's "
          "queuing");
ABSL_FLAG(bool, tune, true, "also time every candidate config and report the fastest");
ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(uint64_t, seed, 4, "seed of the masked and varlen lengths");
ABSL_FLAG(bool, pooling, true, "run the mean pooling cases");
ABSL_FLAG(bool, attention, true, "run the flash attention cases");
ABSL_FLAG(std::string, attention_only, "",
          "run only the attention cases whose name contains one of these '|'-separated strings "
          "(empty = all; names contain commas), e.g. \"bias|D=64|[4,4096] Hq=16\"");
ABSL_FLAG(bool, backward, true,
          "run the backward kernels' cases (mean_pooling_bwd, flash_attention_bwd)");

namespace ks = kernelserve;

namespace {

std::string UtcNow() {
  char text[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return text;
}

nlohmann::json TimingJson(const ks::bench::Timing& t, double x_bytes, double copy) {
  const double bps = x_bytes / (t.median_us * 1e-6);
  return {{"config", t.config.DebugString()},
          {"us", t.median_us},
          {"read_TBps", bps / 1e12},
          {"ratio_to_copy", bps / copy}};
}

void PrintRow(const char* label, const ks::bench::Timing& t, double x_bytes, double copy) {
  const double bps = x_bytes / (t.median_us * 1e-6);
  std::printf("    %-9s %9.1f us %6.2f TB/s %5.2fx copy  {%s}\n", label, t.median_us, bps / 1e12,
              bps / copy, t.config.DebugString().c_str());
}

// True when `filter` is empty or `name` contains one of its '|'-separated parts.
bool Selected(const std::string& name, const std::string& filter) {
  if (filter.empty()) return true;
  for (absl::string_view part : absl::StrSplit(filter, '|', absl::SkipEmpty())) {
    if (absl::StrContains(name, part)) return true;
  }
  return false;
}

// Times the attention cases and appends them to out["attention"]. Returns the failures.
int RunAttention(const ks::DeviceInfo& device, nlohmann::json& out) {
  int failures = 0;
  out["attention"] = nlohmann::json::array();
  for (const ks::bench::AttentionCase& c :
       ks::bench::DefaultAttentionCases(absl::GetFlag(FLAGS_seed))) {
    if (!Selected(c.name, absl::GetFlag(FLAGS_attention_only))) continue;
    const auto r = ks::bench::RunAttentionCase(c, device, absl::GetFlag(FLAGS_iters),
                                               absl::GetFlag(FLAGS_tune));
    if (!r.ok()) {
      std::printf("%s: FAILED %s\n", c.name.c_str(), r.status().ToString().c_str());
      ++failures;
      continue;
    }
    const double flops = ks::bench::AttentionFlops(c);
    auto tflops = [&](const ks::bench::Timing& t) { return flops / (t.median_us * 1e-6) / 1e12; };
    std::printf("%s: %d candidates\n", c.name.c_str(), r->candidates);
    for (const auto& [label, t] : {std::pair{"heuristic", r->heuristic}, {"tuned", r->tuned}}) {
      std::printf("    %-9s %9.1f us %6.1f TFLOP/s  {%s}\n", label, t.median_us, tflops(t),
                  t.config.DebugString().c_str());
    }
    for (const auto& [label, t] :
         {std::pair{"best cuda", r->best_cuda}, {"best cudnn", r->best_cudnn}}) {
      if (t.median_us > 0.0) {
        std::printf("    %-10s %8.1f us %6.1f TFLOP/s  {%s}\n", label, t.median_us, tflops(t),
                    t.config.DebugString().c_str());
      }
    }
    std::printf(
        "    heuristic call: first %.1f ms (builds cuDNN's graph where it runs the case), "
        "then %.3f ms\n",
        r->first_heuristic_ms, r->cached_heuristic_ms);
    nlohmann::json each = nlohmann::json::array();
    for (const ks::bench::Timing& t : r->each) {
      std::printf("      candidate %9.1f us %6.1f TFLOP/s  {%s}\n", t.median_us, tflops(t),
                  t.config.DebugString().c_str());
      each.push_back({{"config", t.config.DebugString()}, {"us", t.median_us}});
    }
    out["attention"].push_back(
        {{"name", c.name},
         {"dtype", std::string(ks::DTypeName(c.dtype))},
         {"batch", c.batch},
         {"seq_len", c.seq_len},
         {"heads_q", c.heads_q},
         {"heads_kv", c.heads_kv},
         {"head_dim", c.head_dim},
         {"causal", c.causal},
         {"lengths", c.lengths},
         {"option", c.option},
         {"flops", flops},
         {"heuristic",
          {{"config", r->heuristic.config.DebugString()},
           {"us", r->heuristic.median_us},
           {"TFLOPs", tflops(r->heuristic)}}},
         {"tuned",
          {{"config", r->tuned.config.DebugString()},
           {"us", r->tuned.median_us},
           {"TFLOPs", tflops(r->tuned)}}},
         {"candidates", each},
         {"cuda_TFLOPs", r->best_cuda.median_us > 0 ? tflops(r->best_cuda) : 0.0},
         {"cudnn_TFLOPs", r->best_cudnn.median_us > 0 ? tflops(r->best_cudnn) : 0.0},
         {"first_heuristic_ms", r->first_heuristic_ms},
         {"cached_heuristic_ms", r->cached_heuristic_ms}});
  }
  return failures;
}

// mean_pooling_bwd: bytes of dx written per second against the copy bandwidth (bytes read
// plus written per second) of the 1 GiB copy and of a copy of dx's size (a small dx cannot
// fill the GPU for as long). Returns the number of failed cases.
int RunPoolingBwd(const ks::DeviceInfo& device, double copy, cudaStream_t stream,
                  nlohmann::json& out) {
  std::unique_ptr<ks::Kernel> kernel = ks::MakeMeanPoolingBwd();
  out["pooling_bwd"] = nlohmann::json::array();
  int failures = 0;
  for (const ks::bench::PoolingBwdCase& c : ks::bench::PoolingBwdCases(absl::GetFlag(FLAGS_seed))) {
    const auto r = ks::bench::TimeKernel(*kernel, c.inputs, {}, device, absl::GetFlag(FLAGS_iters),
                                         absl::GetFlag(FLAGS_tune));
    const absl::StatusOr<double> same_size =
        ks::bench::MeasureCopyBandwidth(static_cast<size_t>(c.dx_bytes), 20, stream);
    if (!r.ok() || !same_size.ok()) {
      std::printf("mean_pooling_bwd %s: FAILED %s\n", c.name.c_str(),
                  (r.ok() ? same_size.status() : r.status()).ToString().c_str());
      ++failures;
      continue;
    }
    const auto dx = static_cast<double>(c.dx_bytes);
    std::printf("mean_pooling_bwd %s: dx %.1f MiB, %d candidates; copy of dx's size %.3f TB/s\n",
                c.name.c_str(), dx / (1 << 20), r->candidates, *same_size / 1e12);
    PrintRow("heuristic", r->heuristic, dx, copy);
    PrintRow("tuned", r->tuned, dx, copy);
    std::printf("    tuned vs the copy of dx's size: %.2fx\n",
                dx / (r->tuned.median_us * 1e-6) / *same_size);
    out["pooling_bwd"].push_back({{"name", c.name},
                                  {"dx_bytes", c.dx_bytes},
                                  {"copy_same_size_TBps", *same_size / 1e12},
                                  {"heuristic", TimingJson(r->heuristic, dx, copy)},
                                  {"tuned", TimingJson(r->tuned, dx, copy)}});
  }
  return failures;
}

// The fastest of `each` on the cudnn platform (cudnn) or off it (the own kernels); an empty
// Timing when there is none.
ks::bench::Timing BestOf(const std::vector<ks::bench::Timing>& each, bool cudnn) {
  ks::bench::Timing best;
  for (const ks::bench::Timing& t : each) {
    if ((t.config.platform == "cudnn") != cudnn) continue;
    if (best.median_us == 0.0 || t.median_us < best.median_us) best = t;
  }
  return best;
}

// flash_attention_bwd on its cuda platform (the own kernels and cuDNN's plans), in TFLOP/s
// (2.5x the forward's FLOPs), appended to out["attention_bwd"] with the best own config, the
// best cuDNN plan and the heuristic's config with deterministic=false. Returns the number of
// failed cases.
int RunAttentionBwd(const ks::DeviceInfo& device, nlohmann::json& out) {
  std::unique_ptr<ks::Kernel> kernel = ks::MakeFlashAttentionBwd();
  out["attention_bwd"] = nlohmann::json::array();
  int failures = 0;
  for (const ks::bench::AttentionCase& c :
       ks::bench::AttentionBwdCases(absl::GetFlag(FLAGS_seed))) {
    const absl::StatusOr<ks::TensorMap> inputs = ks::bench::AttentionBwdInputs(c, device);
    const absl::StatusOr<ks::bench::KernelTiming> r =
        inputs.ok() ? ks::bench::TimeKernel(*kernel, *inputs, {{"causal", c.causal}}, device,
                                            absl::GetFlag(FLAGS_iters), absl::GetFlag(FLAGS_tune))
                    : absl::StatusOr<ks::bench::KernelTiming>(inputs.status());
    if (!r.ok()) {
      std::printf("flash_attention_bwd %s: FAILED %s\n", c.name.c_str(),
                  r.status().ToString().c_str());
      ++failures;
      continue;
    }
    const double flops = ks::bench::AttentionBwdFlops(c);
    auto tflops = [&](const ks::bench::Timing& t) {
      return t.median_us > 0 ? flops / (t.median_us * 1e-6) / 1e12 : 0.0;
    };
    // The same call with deterministic=false (the heuristic's config, cuDNN's first plan on
    // Hopper, and every candidate when tuning): what giving up the same bits buys.
    const absl::StatusOr<ks::bench::KernelTiming> any_order =
        ks::bench::TimeKernel(*kernel, *inputs, {{"causal", c.causal}, {"deterministic", false}},
                              device, absl::GetFlag(FLAGS_iters), absl::GetFlag(FLAGS_tune));
    const ks::bench::Timing own = BestOf(r->each, false);
    const ks::bench::Timing cudnn = BestOf(r->each, true);
    std::printf("flash_attention_bwd %s: %d candidates\n", c.name.c_str(), r->candidates);
    for (const ks::bench::Timing& t : r->each) {
      std::printf("    candidate  %8.1f us %6.1f TFLOP/s  {%s}\n", t.median_us, tflops(t),
                  t.config.DebugString().c_str());
    }
    nlohmann::json row = {{"name", c.name},         {"dtype", std::string(ks::DTypeName(c.dtype))},
                          {"batch", c.batch},       {"seq_len", c.seq_len},
                          {"heads_q", c.heads_q},   {"heads_kv", c.heads_kv},
                          {"head_dim", c.head_dim}, {"causal", c.causal},
                          {"flops", flops}};
    for (const auto& [label, t] :
         {std::pair{"heuristic", r->heuristic},
          {"tuned", r->tuned},
          {"best_own", own},
          {"best_cudnn", cudnn},
          {"any_order", any_order.ok() ? any_order->heuristic : ks::bench::Timing{}},
          {"own_any_order",
           any_order.ok() ? BestOf(any_order->each, false) : ks::bench::Timing{}}}) {
      std::printf("    %-10s %8.1f us %6.1f TFLOP/s  {%s}\n", label, t.median_us, tflops(t),
                  t.config.DebugString().c_str());
      row[label] = {{"config", t.config.DebugString()}, {"us", t.median_us}, {"TFLOPs", tflops(t)}};
    }
    out["attention_bwd"].push_back(row);
  }
  return failures;
}

// flash_attention_bwd with a bias [1, Hq, S, S]: the fastest own config without and with
// return_dbias (cuDNN builds no plan for dbias, so the own kernels compute it) and cuDNN's best
// plan without, in TFLOP/s of the backward's FLOPs, to out["attention_dbias"]. Returns the
// number of failed cases.
int RunAttentionDbias(const ks::DeviceInfo& device, nlohmann::json& out) {
  std::unique_ptr<ks::Kernel> kernel = ks::MakeFlashAttentionBwd();
  out["attention_dbias"] = nlohmann::json::array();
  int failures = 0;
  for (const ks::bench::AttentionCase& c : ks::bench::AttentionDbiasCases()) {
    const absl::StatusOr<ks::TensorMap> inputs = ks::bench::AttentionBwdInputs(c, device, true);
    const int iters = absl::GetFlag(FLAGS_iters);
    absl::Status failed = inputs.status();
    absl::StatusOr<ks::bench::KernelTiming> plain, dbias;
    if (failed.ok()) {
      plain = ks::bench::TimeKernel(*kernel, *inputs, {{"causal", c.causal}}, device, iters, true);
      failed = plain.status();
    }
    if (failed.ok()) {
      dbias = ks::bench::TimeKernel(
          *kernel, *inputs, {{"causal", c.causal}, {"return_dbias", true}}, device, iters, true);
      failed = dbias.status();
    }
    if (!failed.ok()) {
      std::printf("flash_attention_bwd dbias %s: FAILED %s\n", c.name.c_str(),
                  failed.ToString().c_str());
      ++failures;
      continue;
    }
    const double flops = ks::bench::AttentionBwdFlops(c);
    nlohmann::json row = {{"name", c.name},       {"flops", flops},       {"batch", c.batch},
                          {"seq_len", c.seq_len}, {"heads_q", c.heads_q}, {"head_dim", c.head_dim},
                          {"causal", c.causal}};
    for (const auto& [label, t] : {std::pair{"own", BestOf(plain->each, false)},
                                   {"own_dbias", BestOf(dbias->each, false)},
                                   {"cudnn", BestOf(plain->each, true)}}) {
      const double tf = t.median_us > 0 ? flops / (t.median_us * 1e-6) / 1e12 : 0.0;
      std::printf("flash_attention_bwd dbias %s: %-9s %8.1f us %6.1f TFLOP/s  {%s}\n",
                  c.name.c_str(), label, t.median_us, tf, t.config.DebugString().c_str());
      row[label] = {{"config", t.config.DebugString()}, {"us", t.median_us}, {"TFLOPs", tf}};
    }
    out["attention_dbias"].push_back(row);
  }
  return failures;
}

// Host time per launch beyond the GPU time, on a tiny attention call (bf16 [1,128,1,64]): the
// own kernel's config and cuDNN's first plan on the same prepared run. Their difference is what
// the cudnn path (graph lookup, workspace, variant pack, cuDNN's own execute) adds per cached
// call over a plain kernel launch.
void RunLaunchOverhead(const ks::DeviceInfo& device, nlohmann::json& out) {
  std::unique_ptr<ks::Kernel> kernel = ks::MakeFlashAttention();
  const ks::TensorMap inputs = {
      {"q", ks::RandomTensor(ks::DType::kBF16, {1, 128, 1, 64}, 1, -1, 1)},
      {"k", ks::RandomTensor(ks::DType::kBF16, {1, 128, 1, 64}, 2, -1, 1)},
      {"v", ks::RandomTensor(ks::DType::kBF16, {1, 128, 1, 64}, 3, -1, 1)}};
  auto problem = kernel->Analyze(ks::SpecsOf(inputs), *kernel->schema().CanonicalParams({}));
  const ks::PlatformImpl* cuda = kernel->GpuAuto();  // the own kernels and cuDNN's plans
  if (!problem.ok()) return;
  auto run = cuda->Prepare(**problem, inputs, device);
  if (!run.ok()) return;
  nlohmann::json rows = nlohmann::json::object();
  for (const ks::KernelConfig& config : cuda->Candidates(**problem, device)) {
    const std::string label = config.platform == "cudnn" ? "cudnn" : "cuda";
    if (rows.contains(label)) continue;  // the first config of each platform
    std::vector<double> extra;
    for (int i = 0; i < 520; ++i) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<double> kernel_s = (*run)->Launch(config);
      const double wall_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      if (!kernel_s.ok()) break;
      if (i >= 20) extra.push_back(wall_us - *kernel_s * 1e6);
    }
    if (extra.empty()) continue;
    std::nth_element(extra.begin(), extra.begin() + extra.size() / 2, extra.end());
    rows[label] = extra[extra.size() / 2];
    std::printf("launch overhead (%s {%s}): %.1f us per call beyond the GPU time (median of %zu)\n",
                label.c_str(), config.DebugString().c_str(), extra[extra.size() / 2], extra.size());
  }
  out["launch_overhead_us"] = rows;
}

int Run() {
  const std::vector<ks::DeviceInfo> devices = ks::EnumerateCudaDevices();
  const int ordinal = absl::GetFlag(FLAGS_device);
  if (ordinal < 0 || ordinal >= static_cast<int>(devices.size())) {
    std::fprintf(stderr, "no CUDA device %d (this process sees %zu)\n", ordinal, devices.size());
    return 1;
  }
  const ks::DeviceInfo& device = devices[static_cast<size_t>(ordinal)];
  cudaStream_t stream = nullptr;
  if (cudaSetDevice(ordinal) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "cannot set up CUDA device %d\n", ordinal);
    return 1;
  }
  const absl::StatusOr<double> copy = ks::bench::MeasureCopyBandwidth(size_t{1} << 30, 20, stream);
  if (!copy.ok()) {
    std::fprintf(stderr, "copy bandwidth: %s\n", copy.status().ToString().c_str());
    return 1;
  }
  const std::string date = UtcNow();
  std::printf("device %s (%d SMs), %s\n", device.fingerprint.name.c_str(),
              device.fingerprint.sm_count, date.c_str());
  std::printf("device-to-device copy: %.3f TB/s (bytes read + written)\n", *copy / 1e12);
  nlohmann::json out = {{"device", device.fingerprint.name},
                        {"date", date},
                        {"copy_TBps", *copy / 1e12},
                        {"cases", nlohmann::json::array()}};
  int failures = 0;
  std::vector<ks::bench::BenchCase> cases;
  if (absl::GetFlag(FLAGS_pooling)) cases = ks::bench::DefaultCases(absl::GetFlag(FLAGS_seed));
  for (const ks::bench::BenchCase& c : cases) {
    const auto r = ks::bench::RunCase(c, device, absl::GetFlag(FLAGS_iters),
                                      absl::GetFlag(FLAGS_tune), stream);
    if (!r.ok()) {
      std::printf("%s: FAILED %s\n", c.name.c_str(), r.status().ToString().c_str());
      ++failures;
      continue;
    }
    const double x_bytes = static_cast<double>(r->x_bytes);
    const double counted = static_cast<double>(ks::bench::CountedRowsOf(c)) /
                           static_cast<double>(std::max<int64_t>(ks::bench::RowsOf(c), 1));
    std::printf("%s: x %.1f MiB, %.0f%% of rows counted, %d buffer(s), %d candidates\n",
                c.name.c_str(), x_bytes / (1 << 20), counted * 100, r->buffers, r->candidates);
    PrintRow("heuristic", r->heuristic, x_bytes, *copy);
    PrintRow("tuned", r->tuned, x_bytes, *copy);
    out["cases"].push_back({{"name", c.name},
                            {"form", static_cast<int>(c.form)},
                            {"dtype", std::string(ks::DTypeName(c.dtype))},
                            {"batch", c.batch},
                            {"seq_len", c.seq_len},
                            {"hidden", c.hidden},
                            {"lengths", c.lengths},
                            {"x_bytes", r->x_bytes},
                            {"buffers", r->buffers},
                            {"heuristic", TimingJson(r->heuristic, x_bytes, *copy)},
                            {"tuned", TimingJson(r->tuned, x_bytes, *copy)}});
  }
  if (absl::GetFlag(FLAGS_backward)) {
    failures += RunPoolingBwd(device, *copy, stream, out);
    failures += RunAttentionBwd(device, out);
    failures += RunAttentionDbias(device, out);
  }
  if (absl::GetFlag(FLAGS_attention)) {
    failures += RunAttention(device, out);
    RunLaunchOverhead(device, out);
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream file(path);
    file << out.dump(1) << "\n";
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ks::cuda::SetLaunchGateMinBytes(absl::GetFlag(FLAGS_launch_gate) ? 0 : -1);
  try {
    return Run();
  } catch (const nlohmann::json::exception& e) {  // JSON building only; reported, not thrown on
    std::fprintf(stderr, "JSON: %s\n", e.what());
    return 1;
  }
}
