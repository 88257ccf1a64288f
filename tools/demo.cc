// kernelserve-demo: runs both kernels through the executor on random inputs and prints what the
// config chain chose. Run it twice: the second run finds the configs in the persistent store.
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "core/config_tiers.h"
#include "core/executor.h"
#include "core/utils/random_tensor.h"
#include "kernels/register.h"

ABSL_FLAG(std::string, cache, "file",
          "persistent config store: file, file:PATH, redis://host:port/db or memory");
ABSL_FLAG(bool, autotune, false, "tune configs on a cache miss instead of using the heuristic");
ABSL_FLAG(std::string, platform, "auto", "auto, cpu or cuda");

namespace ks = kernelserve;

namespace {

void Print(const char* what, const ks::ExecuteResult& r) {
  std::printf("%s\n", what);
  for (const auto& [name, t] : r.outputs) {
    std::printf("  output %-4s %s\n", name.c_str(), t.spec().DebugString().c_str());
  }
  std::printf("  platform %s, device %d, key %s\n",
              std::string(ks::PlatformName(r.platform)).c_str(), r.device, r.cache_key.c_str());
  std::printf("  config  {%s}\n  source  %s\n", r.config.DebugString().c_str(),
              std::string(ks::ConfigSourceName(r.source)).c_str());
  std::printf("  timing  select %lld us, h2d %lld us, kernel %lld us, d2h %lld us, total %lld us\n",
              static_cast<long long>(r.timings.select_us), static_cast<long long>(r.timings.h2d_us),
              static_cast<long long>(r.timings.kernel_us), static_cast<long long>(r.timings.d2h_us),
              static_cast<long long>(r.timings.total_us));
  for (const std::string& w : r.warnings) std::printf("  warning %s\n", w.c_str());
}

int Run() {
  absl::StatusOr<ks::ConfigTiers> tiers = ks::OpenConfigTiers(absl::GetFlag(FLAGS_cache));
  if (!tiers.ok()) {
    std::fprintf(stderr, "kernelserve-demo: --cache: %s\n", tiers.status().ToString().c_str());
    return 2;
  }
  ks::KernelRegistry registry;
  if (absl::Status s = ks::RegisterBuiltinKernels(&registry); !s.ok()) {
    std::fprintf(stderr, "kernelserve-demo: %s\n", s.ToString().c_str());
    return 1;
  }
  ks::ExecutorOptions options;
  options.policy.allow_autotune = absl::GetFlag(FLAGS_autotune);
  ks::Executor executor(&registry, tiers->chain.get(), ks::DetectGpus(), options);
  std::printf("kernelserve-demo: config store %s, %zu GPU(s)\n", tiers->StoreLocation().c_str(),
              executor.gpus().size());

  ks::ExecuteOptions call;
  call.platform = absl::GetFlag(FLAGS_platform);
  ks::TensorMap pool_in;
  pool_in["x"] = ks::RandomTensor(ks::DType::kBF16, {4, 256, 512}, 1, -1.0f, 1.0f);
  ks::TensorMap attn_in;
  attn_in["q"] = ks::RandomTensor(ks::DType::kBF16, {2, 128, 8, 64}, 2, -1.0f, 1.0f);
  attn_in["k"] = ks::RandomTensor(ks::DType::kBF16, {2, 256, 2, 64}, 3, -1.0f, 1.0f);
  attn_in["v"] = ks::RandomTensor(ks::DType::kBF16, {2, 256, 2, 64}, 4, -1.0f, 1.0f);
  const ks::Attributes attn_attrs = {{"causal", true}, {"return_lse", true}};

  for (int round = 1; round <= 2; ++round) {
    absl::StatusOr<ks::ExecuteResult> pool = executor.Execute("mean_pooling", pool_in, {}, call);
    absl::StatusOr<ks::ExecuteResult> attn =
        executor.Execute("flash_attention", attn_in, attn_attrs, call);
    if (!pool.ok() || !attn.ok()) {
      std::fprintf(stderr, "kernelserve-demo: %s\n",
                   (!pool.ok() ? pool.status() : attn.status()).ToString().c_str());
      return 1;
    }
    std::printf("\n-- call %d\n", round);
    Print("mean_pooling x bf16[4,256,512]", *pool);
    Print("flash_attention q bf16[2,128,8,64] k,v bf16[2,256,2,64] causal", *attn);
  }
  if (tiers->store != nullptr) (void)tiers->store->Flush();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Runs both kernels through the executor and prints the configs.");
  absl::ParseCommandLine(argc, argv);
  return Run();
}
