// kernelserve-copy-bench: the host side of the GPU data path against its floors, in one run.
//
// For each size: pinned and pageable cudaMemcpy both ways, host memcpy on one thread and on
// the shared host copier, and the CUDA platform's own staged Upload / Download (what a
// request's bytes go through); cudaHostRegister + DMA + cudaHostUnregister per copy (pinning a
// received buffer for each call instead of keeping a pool); cudaHostAlloc + cudaFreeHost (what a
// block new to the pinned pool costs). GB/s are bytes / median time of --iters runs. Run it with
// KERNELSERVE_COPY_THREADS=1 for the one-thread staging of earlier builds.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/runtime/cpu/host_copy.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, sizes_mib, "8,64,256,1024", "request sizes in MiB, comma separated");
ABSL_FLAG(int, iters, 7, "timed runs per measurement (after one warm-up); the median is kept");
ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(std::string, json, "", "also write the results to this JSON file");

namespace ks = kernelserve;

namespace {

bool Ok(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "copy-bench: %s: %s\n", what, cudaGetErrorString(error));
  return false;
}

// Median seconds of `iters` runs of `fn` after one warm-up.
double MedianSeconds(int iters, const std::function<void()>& fn) {
  fn();
  std::vector<double> seconds;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int iters = std::max(1, absl::GetFlag(FLAGS_iters));
  if (!Ok(cudaSetDevice(absl::GetFlag(FLAGS_device)), "cudaSetDevice")) return 1;
  auto resources = ks::cuda::ThisThreadResources(absl::GetFlag(FLAGS_device));
  if (!resources.ok()) {
    std::fprintf(stderr, "copy-bench: %s\n", resources.status().ToString().c_str());
    return 1;
  }
  cudaStream_t stream = (*resources)->stream();
  nlohmann::json out = {{"copy_threads", ks::cpu::SharedHostCopier().threads()},
                        {"sizes", nlohmann::json::array()}};
  std::printf("host copier threads: %d\n", ks::cpu::SharedHostCopier().threads());
  std::printf("%8s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s  (GB/s)\n", "MiB", "pin h2d", "pin d2h",
              "page h2d", "page d2h", "memcpy1", "copier", "Upload", "Download", "reg h2d",
              "hostalloc");
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    size_t mib = 0;
    if (!absl::SimpleAtoi(text, &mib) || mib == 0) continue;
    const size_t bytes = mib << 20;
    std::vector<char> pageable(bytes, 1), pageable_out(bytes, 0);
    void* pinned = nullptr;
    void* device = nullptr;
    if (!Ok(cudaMallocHost(&pinned, bytes), "cudaMallocHost") ||
        !Ok(cudaMalloc(&device, bytes), "cudaMalloc")) {
      return 1;
    }
    std::memset(pinned, 2, bytes);
    auto copy = [&](void* dst, const void* src, cudaMemcpyKind kind) {
      return [=] {
        Ok(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
        Ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      };
    };
    const double gb = static_cast<double>(bytes) / 1e9;
    nlohmann::json row = {
        {"mib", mib},
        {"pinned_h2d", gb / MedianSeconds(iters, copy(device, pinned, cudaMemcpyHostToDevice))},
        {"pinned_d2h", gb / MedianSeconds(iters, copy(pinned, device, cudaMemcpyDeviceToHost))},
        {"pageable_h2d",
         gb / MedianSeconds(iters, copy(device, pageable.data(), cudaMemcpyHostToDevice))},
        {"pageable_d2h",
         gb / MedianSeconds(iters, copy(pageable_out.data(), device, cudaMemcpyDeviceToHost))},
        {"memcpy_1_thread",
         gb / MedianSeconds(iters,
                            [&] { std::memcpy(pageable_out.data(), pageable.data(), bytes); })},
        {"host_copier", gb / MedianSeconds(iters,
                                           [&] {
                                             ks::cpu::SharedHostCopier().Copy(
                                                 pageable_out.data(), pageable.data(), bytes);
                                           })},
        {"upload",
         gb / MedianSeconds(
                  iters,
                  [&] { (void)(*resources)->Upload(pageable.data(), bytes, device, stream); })},
        {"download",
         gb / MedianSeconds(
                  iters,
                  [&] {
                    (void)(*resources)->Download(device, bytes, pageable_out.data(), stream);
                  })},
        // Locking the pages of a received buffer for each call instead of keeping a pool:
        // cudaHostRegister, the DMA, cudaHostUnregister.
        {"registered_h2d",
         gb / MedianSeconds(iters,
                            [&] {
                              Ok(cudaHostRegister(pageable.data(), bytes, cudaHostRegisterDefault),
                                 "cudaHostRegister");
                              copy(device, pageable.data(), cudaMemcpyHostToDevice)();
                              Ok(cudaHostUnregister(pageable.data()), "cudaHostUnregister");
                            })},
        // What a block new to the pinned pool costs: cudaHostAlloc and cudaFreeHost.
        {"host_alloc",
         gb / MedianSeconds(iters,
                            [&] {
                              void* block = nullptr;
                              if (Ok(cudaHostAlloc(&block, bytes, cudaHostAllocPortable),
                                     "cudaHostAlloc")) {
                                Ok(cudaFreeHost(block), "cudaFreeHost");
                              }
                            })},
    };
    // The staged round trip must bring the bytes back unchanged.
    std::memset(pageable_out.data(), 0, bytes);
    const bool same = (*resources)->Upload(pageable.data(), bytes, device, stream).ok() &&
                      (*resources)->Download(device, bytes, pageable_out.data(), stream).ok() &&
                      pageable == pageable_out;
    row["round_trip_equal"] = same;
    std::printf("%8zu %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f%s\n", mib,
                row["pinned_h2d"].get<double>(), row["pinned_d2h"].get<double>(),
                row["pageable_h2d"].get<double>(), row["pageable_d2h"].get<double>(),
                row["memcpy_1_thread"].get<double>(), row["host_copier"].get<double>(),
                row["upload"].get<double>(), row["download"].get<double>(),
                row["registered_h2d"].get<double>(), row["host_alloc"].get<double>(),
                same ? "" : "  ROUND TRIP DIFFERS");
    out["sizes"].push_back(row);
    cudaFreeHost(pinned);
    cudaFree(device);
    if (!same) return 1;
  }
  if (!absl::GetFlag(FLAGS_json).empty()) std::ofstream(absl::GetFlag(FLAGS_json)) << out.dump(2);
  return 0;
}
