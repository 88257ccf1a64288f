// kernelserve-paged-bench: the CUDA paged attention kernel's K/V read bandwidth against the
// device's copy bandwidth measured in the same run (the roofline: bytes read plus written per
// second by a 1 GiB device-to-device copy), over the matrix: bf16, Hq 32 / Hkv 8, D 128
// (D 64 and 256 at one size), pages of 16 / 64 / 256 tokens in shuffled block tables, batch 1 /
// 8 / 32 / 128 at 1k, 4k and 16k tokens, batch 1 at 64k and 128k, Sq 1 and 4 (causal).
//
//   kernelserve-paged-bench [--quick] [--only=BxTOKENS] [--json=FILE]
//
// Each shape runs with the heuristic's split count and its neighbours (batches of 8 and less:
// every split count), and fp8 (e4m3) caches at the larger shapes beside their bf16 rows; a set
// of pages is read once per launch and launches rotate over enough sets (at least 256 MiB of
// pages) that L2 holds none. A launch's time is taken two ways: the median of single launches
// timed by events (each waits for the host to launch it: a few microseconds of launch latency
// count), and a CUDA graph of back-to-back launches replayed, per launch (what a decode loop
// that queues its steps, or replays a graph, gets); the graph's is the kernel's number. Append
// is timed too: a decode step's new rows alone, and appends of 4096 tokens (large appends)
// against the copy bandwidth.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_fill.h"
#include "core/device.h"
#include "kernels/paged_attention/cuda/paged_attention_config.h"
#include "kernels/paged_attention/cuda/paged_attention_dispatch.h"
#include "kernels/paged_attention/cuda/paged_attention_space.h"
#include "kernels/runtime/cuda/cuda_platform.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(bool, quick, false, "a few shapes only");
ABSL_FLAG(std::string, json, "", "also write the results to this file");
ABSL_FLAG(std::string, only, "",
          "time only the attention shapes of this batch and token count, as BxTOKENS (e.g. "
          "128x4096: every page size, dtype and head dim of it); empty = all");

namespace {

using namespace kernelserve;        // NOLINT(build/namespaces): a benchmark's main file
using namespace kernelserve::cuda;  // NOLINT(build/namespaces)

#define BENCH_CHECK(call)                                                       \
  do {                                                                          \
    const cudaError_t bench_error = (call);                                     \
    if (bench_error != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(bench_error)); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

// Device memory freed at scope end.
struct Buffer {
  void* ptr = nullptr;
  explicit Buffer(size_t bytes) {
    if (cudaMalloc(&ptr, std::max<size_t>(bytes, 16)) != cudaSuccess) ptr = nullptr;
  }
  ~Buffer() { cudaFree(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Median seconds of `fn(i)` over `reps` launches timed with events, after three warm-ups.
// `fn` launches on the legacy default stream.
template <typename Fn>
double MedianSeconds(Fn fn, int reps) {
  for (int i = 0; i < 3; ++i) fn(i);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start);
    fn(i);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Seconds per launch of `fn(i, stream)` (i = 0 .. launches - 1) captured back to back into a
// CUDA graph: the median over `replays` replays of the graph, divided by `launches`. Returns a
// negative value when the capture fails.
template <typename Fn>
double GraphSecondsPerLaunch(Fn fn, int launches, int replays) {
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return -1.0;
  for (int i = 0; i < 2; ++i) fn(i, stream);  // attributes and modules before the capture
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  double result = -1.0;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    for (int i = 0; i < launches; ++i) fn(i, stream);
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      cudaGraphLaunch(exec, stream);
      cudaGraphLaunch(exec, stream);
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      std::vector<double> times;
      for (int r = 0; r < replays; ++r) {
        cudaEventRecord(start, stream);
        cudaGraphLaunch(exec, stream);
        cudaEventRecord(stop, stream);
        cudaEventSynchronize(stop);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, start, stop);
        times.push_back(ms * 1e-3 / launches);
      }
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      std::sort(times.begin(), times.end());
      result = times[times.size() / 2];
    }
  }
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return result;
}

struct BenchShape {
  int64_t batch, tokens, seq_len_q, head_dim, page_size;
  int64_t heads_kv = 8;        // of kHeadsQ query heads
  DType cache = DType::kBF16;  // kBF16 or kF8E4M3
};

std::vector<BenchShape> Shapes(bool quick) {
  if (quick) {
    return {{1, 4096, 1, 128, 16},
            {16, 4096, 1, 128, 16},
            {64, 4096, 1, 128, 64},
            {16, 4096, 1, 128, 16, 8, DType::kF8E4M3}};
  }
  std::vector<BenchShape> shapes;
  for (int64_t page : {16, 64, 256}) {
    for (int64_t batch : {1, 8, 32, 128}) {
      for (int64_t tokens : {1024, 4096, 16384}) shapes.push_back({batch, tokens, 1, 128, page});
    }
  }
  for (int64_t tokens : {65536, 131072}) shapes.push_back({1, tokens, 1, 128, 16});
  for (int64_t batch : {1, 32}) shapes.push_back({batch, 4096, 4, 128, 16});
  for (int64_t d : {64, 256}) {
    shapes.push_back({32, 4096, 1, d, 16});
    shapes.push_back({1, 4096, 1, d, 16});
  }
  // One kv head: a token row is a single 256-byte head, so every block reads whole rows; set
  // beside the Hkv 8 shape of the same bytes, it separates the cost of the layout (each block
  // reading one head's slice of 2 KB rows) from the rest.
  shapes.push_back({32, 32768, 1, 128, 16, 1});
  // fp8 (e4m3) caches beside the bf16 rows of the same shapes above (the step-time ratio).
  for (const auto& [batch, tokens] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 4096}, {32, 4096}, {8, 16384}, {32, 16384}, {128, 16384}, {1, 65536}, {1, 131072}}) {
    shapes.push_back({batch, tokens, 1, 128, 16, 8, DType::kF8E4M3});
  }
  return shapes;
}

constexpr int64_t kHeadsQ = 32;

// The split counts a shape runs with: the heuristic's first; for batches of 8 and less (where
// the choice matters most) every listed count that leaves each split a tile, else the listed
// counts up to twice the heuristic's (and up to 4 at least).
std::vector<int> SplitsToTime(const BenchShape& s, int heuristic) {
  // Tokens per tile of the kernel the bench runs (kPagedNumWarps[0] warps).
  constexpr int64_t kTile = int64_t{kPagedTokensPerWarp} * kPagedNumWarps[0];
  std::vector<int> list = {heuristic};
  for (int sp : kPagedSplits) {
    const bool wanted = s.batch <= 8 ? sp * kTile <= s.tokens : sp <= std::max(4, 2 * heuristic);
    if (sp != heuristic && wanted) list.push_back(sp);
  }
  return list;
}

// Times one shape with SplitsToTime's counts; appends rows to `out`.
int RunShape(const BenchShape& s, double copy_bw, const DeviceInfo& gpu, std::mt19937_64& rng,
             nlohmann::json& out) {
  const bool fp8 = s.cache == DType::kF8E4M3;
  const int64_t elem = fp8 ? 1 : 2;
  const int64_t pages_per_seq = (s.tokens + s.page_size - 1) / s.page_size;
  const size_t set_bytes =
      static_cast<size_t>(s.batch * pages_per_seq * s.page_size * s.heads_kv * s.head_dim * elem);
  const int64_t sets = std::max<int64_t>(2, static_cast<int64_t>((size_t{256} << 20) / set_bytes));
  const int64_t num_pages = sets * s.batch * pages_per_seq;
  const int64_t cache_elems = num_pages * s.page_size * s.heads_kv * s.head_dim;
  Buffer k(static_cast<size_t>(cache_elems * elem)), v(static_cast<size_t>(cache_elems * elem));
  if (k.ptr == nullptr || v.ptr == nullptr) {
    std::printf("B=%ld tokens=%ld: out of memory, skipped\n", s.batch, s.tokens);
    return 0;
  }
  const bench::FillType fill = fp8 ? bench::FillType::kF8E4M3 : bench::FillType::kBF16;
  BENCH_CHECK(bench::FillRandom(k.ptr, cache_elems, fill, 1, nullptr));
  BENCH_CHECK(bench::FillRandom(v.ptr, cache_elems, fill, 2, nullptr));
  std::vector<int32_t> order(static_cast<size_t>(num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  Buffer tables(order.size() * 4), lens(static_cast<size_t>(s.batch) * 4);
  BENCH_CHECK(cudaMemcpy(tables.ptr, order.data(), order.size() * 4, cudaMemcpyHostToDevice));
  const std::vector<int32_t> len_values(static_cast<size_t>(s.batch),
                                        static_cast<int32_t>(s.tokens));
  BENCH_CHECK(
      cudaMemcpy(lens.ptr, len_values.data(), len_values.size() * 4, cudaMemcpyHostToDevice));
  // Per-head scales of the fp8 caches (their values do not change the time).
  const std::vector<float> scale_values(static_cast<size_t>(s.heads_kv), 0.02f);
  Buffer scales(scale_values.size() * 4);
  BENCH_CHECK(
      cudaMemcpy(scales.ptr, scale_values.data(), scale_values.size() * 4, cudaMemcpyHostToDevice));
  const int64_t q_elems = s.batch * s.seq_len_q * kHeadsQ * s.head_dim;
  Buffer q(static_cast<size_t>(q_elems) * 2), o(static_cast<size_t>(q_elems) * 2);
  BENCH_CHECK(bench::FillRandom(q.ptr, q_elems, bench::FillType::kBF16, 3, nullptr));
  PagedDeviceArgs args;
  args.q = q.ptr;
  args.k_cache = k.ptr;
  args.v_cache = v.ptr;
  args.cache_seqlens = static_cast<const int32_t*>(lens.ptr);
  args.out = o.ptr;
  if (fp8) {
    args.k_scale = static_cast<const float*>(scales.ptr);
    args.v_scale = static_cast<const float*>(scales.ptr);
  }
  args.batch = s.batch;
  args.seq_len_q = s.seq_len_q;
  args.num_heads_q = kHeadsQ;
  args.num_heads_kv = s.heads_kv;
  args.num_pages = num_pages;
  args.page_size = s.page_size;
  args.max_pages = pages_per_seq;
  args.max_seq_len = s.tokens;
  args.softmax_scale = 0.088f;
  args.causal = true;
  const int heuristic = PagedSplits(PagedAttentionHeuristic(
      {DType::kBF16, s.batch, s.heads_kv, kHeadsQ / s.heads_kv * s.seq_len_q,
       pages_per_seq * s.page_size, s.head_dim, fp8},
      gpu));
  auto launch = SelectPagedAttentionLaunch(DType::kBF16, s.cache, s.head_dim, kPagedNumWarps[0]);
  if (!launch.ok()) return 1;
  const double bytes = 2.0 * s.batch * s.tokens * s.heads_kv * s.head_dim * elem;
  for (int splits : SplitsToTime(s, heuristic)) {
    Buffer workspace(PagedWorkspaceBytes(args, static_cast<int>(s.head_dim), splits));
    auto run = [&](int i, cudaStream_t stream) {
      PagedDeviceArgs a = args;
      a.block_table =
          static_cast<const int32_t*>(tables.ptr) + (i % sets) * s.batch * pages_per_seq;
      (*launch)(a, splits, workspace.ptr, stream);
    };
    const double single = MedianSeconds([&](int i) { run(i, nullptr); }, 30);
    BENCH_CHECK(cudaDeviceSynchronize());
    const double t = GraphSecondsPerLaunch(run, 32, 10);
    BENCH_CHECK(cudaGetLastError());
    if (t <= 0.0) {
      std::fprintf(stderr, "graph capture failed\n");
      return 1;
    }
    const double pct = 100.0 * bytes / t / copy_bw;
    std::printf(
        "B=%-4ld tokens=%-6ld Sq=%ld D=%-3ld page=%-3ld %s splits=%-3d %8.1f us %6.0f GB/s "
        "%5.1f%% of copy (single launch %.1f us)%s%s\n",
        s.batch, s.tokens, s.seq_len_q, s.head_dim, s.page_size, fp8 ? "e4m3" : "bf16", splits,
        t * 1e6, bytes / t * 1e-9, pct, single * 1e6, splits == heuristic ? " (heuristic)" : "",
        s.heads_kv == 8 ? "" : absl::StrCat(" Hkv=", s.heads_kv).c_str());
    out.push_back({{"batch", s.batch},
                   {"tokens", s.tokens},
                   {"seq_len_q", s.seq_len_q},
                   {"head_dim", s.head_dim},
                   {"page_size", s.page_size},
                   {"heads_kv", s.heads_kv},
                   {"cache", std::string(DTypeName(s.cache))},
                   {"splits", splits},
                   {"heuristic", splits == heuristic},
                   {"us", t * 1e6},
                   {"single_launch_us", single * 1e6},
                   {"kv_GBs", bytes / t * 1e-9},
                   {"copy_pct", pct}});
  }
  return 0;
}

// Appends of `rows` bf16 tokens per sequence into shuffled pages of `cache` (bf16, or e4m3
// quantized on the way): GB/s of k and v moved (read from the inputs plus written to the pages)
// against the copy bandwidth.
int RunAppend(int64_t batch, int64_t rows, DType cache, double copy_bw, std::mt19937_64& rng,
              nlohmann::json& out) {
  const int64_t cache_elem = cache == DType::kBF16 ? 2 : 1;
  const int64_t page = 16, d = 128;
  constexpr int64_t kAppendHeadsKv = 8;
  const int64_t pages_per_seq = (rows + page - 1) / page;
  const int64_t num_pages = batch * pages_per_seq;
  const int64_t cache_elems = num_pages * page * kAppendHeadsKv * d;
  const int64_t new_elems = batch * rows * kAppendHeadsKv * d;
  Buffer kc(static_cast<size_t>(cache_elems * cache_elem));
  Buffer vc(static_cast<size_t>(cache_elems * cache_elem));
  Buffer k(static_cast<size_t>(new_elems) * 2), v(static_cast<size_t>(new_elems) * 2);
  BENCH_CHECK(bench::FillRandom(k.ptr, new_elems, bench::FillType::kBF16, 4, nullptr));
  BENCH_CHECK(bench::FillRandom(v.ptr, new_elems, bench::FillType::kBF16, 5, nullptr));
  std::vector<int32_t> order(static_cast<size_t>(num_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  Buffer table(order.size() * 4), lens(static_cast<size_t>(batch) * 4);
  BENCH_CHECK(cudaMemcpy(table.ptr, order.data(), order.size() * 4, cudaMemcpyHostToDevice));
  const std::vector<int32_t> len_values(static_cast<size_t>(batch), static_cast<int32_t>(rows));
  BENCH_CHECK(
      cudaMemcpy(lens.ptr, len_values.data(), len_values.size() * 4, cudaMemcpyHostToDevice));
  PagedAppendArgs args;
  args.k = k.ptr;
  args.v = v.ptr;
  args.k_cache = kc.ptr;
  args.v_cache = vc.ptr;
  args.block_table = static_cast<const int32_t*>(table.ptr);
  args.cache_seqlens = static_cast<const int32_t*>(lens.ptr);
  args.batch = batch;
  args.seq_len_q = rows;
  args.num_heads_kv = kAppendHeadsKv;
  args.head_dim = d;
  args.page_size = page;
  args.max_pages = pages_per_seq;
  auto append = SelectPagedAppendLaunch(DType::kBF16, cache);
  if (!append.ok()) return 1;
  const double t = MedianSeconds([&](int) { (*append)(args, nullptr); }, 30);
  BENCH_CHECK(cudaDeviceSynchronize());
  // k and v: read (bf16) and written (the cache's type).
  const double moved = 2.0 * static_cast<double>(new_elems) * static_cast<double>(2 + cache_elem);
  std::printf("append B=%-4ld rows=%-5ld into %s %9.1f us %6.0f GB/s moved %5.1f%% of copy\n",
              batch, rows, cache == DType::kBF16 ? "bf16" : "e4m3", t * 1e6, moved / t * 1e-9,
              100.0 * moved / t / copy_bw);
  out.push_back({{"batch", batch},
                 {"rows", rows},
                 {"cache", std::string(DTypeName(cache))},
                 {"us", t * 1e6},
                 {"moved_GBs", moved / t * 1e-9},
                 {"copy_pct", 100.0 * moved / t / copy_bw}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t copy_bytes = size_t{1} << 30;
  double copy_bw = 0.0;
  {
    Buffer a(copy_bytes), b(copy_bytes);
    const double t = MedianSeconds(
        [&](int) { cudaMemcpyAsync(b.ptr, a.ptr, copy_bytes, cudaMemcpyDeviceToDevice); }, 20);
    copy_bw = 2.0 * static_cast<double>(copy_bytes) / t;
  }
  std::printf("%s: device copy %.0f GB/s (read + write)\n", prop.name, copy_bw * 1e-9);
  nlohmann::json result = {{"device", prop.name},
                           {"copy_GBs", copy_bw * 1e-9},
                           {"attention", nlohmann::json::array()},
                           {"append", nlohmann::json::array()}};
  // The launch floor of a split step: two empty kernels back to back in a graph.
  const double floor = GraphSecondsPerLaunch(
      [](int, cudaStream_t stream) {
        bench::LaunchEmpty(stream);
        bench::LaunchEmpty(stream);
      },
      32, 10);
  std::printf("launch floor: two empty kernels in a graph %.1f us\n", floor * 1e6);
  result["two_empty_kernels_us"] = floor * 1e6;
  // The device as the server sees it (the heuristic reads its SM count and bandwidth).
  const std::vector<DeviceInfo> devices = EnumerateCudaDevices();
  if (devices.empty()) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  std::printf("heuristic's device: %d SMs, DRAM %.0f GB/s by clock and bus\n",
              devices[0].fingerprint.sm_count, devices[0].memory_bandwidth * 1e-9);
  result["dram_GBs_by_clock"] = devices[0].memory_bandwidth * 1e-9;
  std::mt19937_64 rng(9);
  const std::string only = absl::GetFlag(FLAGS_only);
  for (const BenchShape& s : Shapes(absl::GetFlag(FLAGS_quick))) {
    if (!only.empty() && only != absl::StrCat(s.batch, "x", s.tokens)) continue;
    if (RunShape(s, copy_bw, devices[0], rng, result["attention"]) != 0) return 1;
  }
  const std::vector<std::pair<int64_t, int64_t>> appends = {{16, 1}, {16, 4096}, {1, 65536}};
  for (DType cache : {DType::kBF16, DType::kF8E4M3}) {
    for (const auto& [batch, rows] : appends) {
      if (RunAppend(batch, rows, cache, copy_bw, rng, result["append"]) != 0) return 1;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path) << result.dump(1) << "\n";
  }
  return 0;
}
