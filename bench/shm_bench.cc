// kernelserve-shm-bench: one call three ways against a kernelserve-server on this host, in
// interleaved rounds: its tensors inline in the request (the plain gRPC path), in a system
// shared-memory region, and in a CUDA region (this process's GPU buffer, exported with
// cudaIpcGetMemHandle). Prints, per case and way, the median client round trip and the
// server's median timing fields; --json writes them too.
//
//   kernelserve-shm-bench --target=127.0.0.1:50051 [--rounds=10] [--json=FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/client_calls.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "nlohmann/json.hpp"
#include "proto/convert.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "the server (on this host)");
ABSL_FLAG(int, rounds, 10, "rounds; each round runs every case every way");
ABSL_FLAG(int, tiny_calls, 50, "calls of the tiny case per way and round");
ABSL_FLAG(int, large_calls, 5, "calls of the attention case per way and round");
ABSL_FLAG(std::string, json, "", "also write the results to this JSON file");

namespace ks = kernelserve;

namespace {

constexpr uint64_t kAlign = 4096;

uint64_t Aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct Case {
  std::string name;
  ks::v1::ExecuteRequest request;  // inline
  std::map<std::string, uint64_t> output_bytes;
  int calls_per_round = 1;
};

std::vector<Case> Cases() {
  Case attention{
      "flash_attention f16 [4,4096,16,128] causal", {}, {}, absl::GetFlag(FLAGS_large_calls)};
  attention.request.set_kernel("flash_attention");
  attention.request.mutable_flash_attention()->set_causal(true);
  uint32_t seed = 1;
  for (const char* name : {"q", "k", "v"}) {
    (*attention.request.mutable_inputs())[name] = ks::bench::RandomF16({4, 4096, 16, 128}, seed++);
  }
  attention.output_bytes["out"] = uint64_t{4} * 4096 * 16 * 128 * 2;
  Case tiny{"mean_pooling f16 [1,16,64]", {}, {}, absl::GetFlag(FLAGS_tiny_calls)};
  tiny.request.set_kernel("mean_pooling");
  (*tiny.request.mutable_inputs())["x"] = ks::bench::RandomF16({1, 16, 64}, seed++);
  tiny.output_bytes["out"] = 64 * 2;
  return {attention, tiny};
}

// The bytes every case needs in a region: inputs then outputs, each page-aligned.
uint64_t RegionBytes(const std::vector<Case>& cases) {
  uint64_t most = 0;
  for (const Case& c : cases) {
    uint64_t bytes = 0;
    for (const auto& [name, t] : c.request.inputs()) bytes += Aligned(t.data().size());
    for (const auto& [name, n] : c.output_bytes) bytes += Aligned(n);
    most = std::max(most, bytes);
  }
  return most;
}

// `c`'s request with its tensors in region `region`, whose bytes (at `base`, host or GPU) get
// the inputs.
ks::v1::ExecuteRequest InRegion(const Case& c, const std::string& region, char* base, bool gpu) {
  ks::v1::ExecuteRequest request = c.request;
  uint64_t offset = 0;
  for (auto& [name, t] : *request.mutable_inputs()) {
    const uint64_t bytes = t.data().size();
    if (gpu) {
      cudaMemcpy(base + offset, t.data().data(), bytes, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();  // the bytes are there before the first call
    } else {
      std::memcpy(base + offset, t.data().data(), bytes);
    }
    t.clear_data();
    t.mutable_ref()->set_region(region);
    t.mutable_ref()->set_offset(offset);
    t.mutable_ref()->set_byte_size(bytes);
    offset += Aligned(bytes);
  }
  for (const auto& [name, bytes] : c.output_bytes) {
    ks::v1::TensorRef& ref = (*request.mutable_output_regions())[name];
    ref.set_region(region);
    ref.set_offset(offset);
    ref.set_byte_size(bytes);
    offset += Aligned(bytes);
  }
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ks::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.deadline = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<ks::Client>> client = ks::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "shm-bench: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  const std::vector<Case> cases = Cases();
  const uint64_t bytes = RegionBytes(cases);
  absl::StatusOr<std::unique_ptr<ks::SharedMemoryRegion>> system =
      ks::SharedMemoryRegion::CreateSystem(**client, "bench-system", bytes);
  void* gpu = nullptr;
  cudaIpcMemHandle_t handle{};
  if (!system.ok() || cudaMalloc(&gpu, bytes) != cudaSuccess ||
      cudaIpcGetMemHandle(&handle, gpu) != cudaSuccess) {
    std::fprintf(stderr, "shm-bench: no system region (%s) or GPU buffer\n",
                 std::string(system.status().message()).c_str());
    return 1;
  }
  const std::string raw(reinterpret_cast<const char*>(&handle), sizeof(handle));
  (void)(*client)->UnregisterSharedMemory("bench-cuda");
  absl::StatusOr<std::unique_ptr<ks::SharedMemoryRegion>> cuda_region =
      ks::SharedMemoryRegion::RegisterCuda(**client, "bench-cuda", raw, gpu, bytes, 0);
  if (!cuda_region.ok()) {
    std::fprintf(stderr, "shm-bench: RegisterCuda: %s\n",
                 std::string(cuda_region.status().message()).c_str());
    return 1;
  }
  const std::vector<std::string> ways = {"inline", "system", "cuda"};
  std::map<std::string, std::map<std::string, ks::bench::CallSamples>>
      samples;  // case -> way -> samples
  for (int round = 0; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    for (const Case& c : cases) {
      for (const std::string& way : ways) {
        auto request = std::make_shared<const ks::v1::ExecuteRequest>(
            way == "inline"   ? c.request
            : way == "system" ? InRegion(c, "bench-system", (*system)->data(), /*gpu=*/false)
                              : InRegion(c, "bench-cuda", static_cast<char*>(gpu), /*gpu=*/true));
        ks::bench::CallSamples discard;
        ks::bench::CallSamples* into =
            round == 0 ? &discard : &samples[c.name][way];  // round 0 warms up
        for (int i = 0; i < c.calls_per_round; ++i) ks::bench::TimeCall(**client, request, into);
      }
    }
  }
  nlohmann::json report = nlohmann::json::array();
  std::printf(
      "| case | way | round trip p50 | min | recv | queue | select | server total | kernel | h2d | "
      "d2h | errors |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    for (const std::string& way : ways) {
      const ks::bench::CallSamples& s = samples[c.name][way];
      std::printf(
          "| %s | %s | %.0f us | %.0f | %.0f | %.0f | %.0f | %.0f us | %.0f | %.0f | %.0f | "
          "%d%s%s |\n",
          c.name.c_str(), way.c_str(), ks::bench::Median(s.round_trip_us),
          ks::bench::Min(s.round_trip_us), ks::bench::Median(s.recv_us),
          ks::bench::Median(s.queue_us), ks::bench::Median(s.select_us),
          ks::bench::Median(s.total_us), ks::bench::Median(s.kernel_us),
          ks::bench::Median(s.h2d_us), ks::bench::Median(s.d2h_us), s.errors,
          s.errors > 0 ? " " : "", s.last_error.c_str());
      report.push_back({{"case", c.name},
                        {"way", way},
                        {"calls", s.round_trip_us.size()},
                        {"round_trip_p50_us", ks::bench::Median(s.round_trip_us)},
                        {"round_trip_min_us", ks::bench::Min(s.round_trip_us)},
                        {"recv_p50_us", ks::bench::Median(s.recv_us)},
                        {"queue_p50_us", ks::bench::Median(s.queue_us)},
                        {"select_p50_us", ks::bench::Median(s.select_us)},
                        {"server_total_p50_us", ks::bench::Median(s.total_us)},
                        {"kernel_p50_us", ks::bench::Median(s.kernel_us)},
                        {"h2d_p50_us", ks::bench::Median(s.h2d_us)},
                        {"d2h_p50_us", ks::bench::Median(s.d2h_us)},
                        {"errors", s.errors}});
    }
  }
  cuda_region->reset();  // unregisters
  cudaFree(gpu);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path) << report.dump(2) << "\n";
  }
  return 0;
}
