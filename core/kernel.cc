#include "core/kernel.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/utils/string_view.h"

namespace kernelserve {

absl::StatusOr<TensorMap> PreparedRun::FetchInto(const TensorMap& places) {
  if (places.empty()) return Fetch();
  return absl::UnimplementedError(
      absl::StrCat("output '", places.begin()->first,
                   "' is in GPU memory, which this platform cannot write; run on that GPU"));
}

bool PlatformImpl::RunsConfigsOf(std::string_view config_platform) const {
  return config_platform.empty() || config_platform == PlatformName(platform());
}

bool PlatformImpl::IsCandidate(const KernelConfig& config, const Problem& problem,
                               const DeviceInfo& device) const {
  const std::vector<KernelConfig> candidates = Candidates(problem, device);
  return std::find(candidates.begin(), candidates.end(), config) != candidates.end();
}

std::string Kernel::id() const { return absl::StrCat(name(), "@v", version()); }

absl::StatusOr<std::shared_ptr<const Problem>> Kernel::Analyze(const TensorSpecMap& inputs,
                                                               const Attributes& attrs) const {
  if (absl::Status checked = schema().CheckInputs(inputs); !checked.ok()) return checked;
  return AnalyzeChecked(inputs, attrs);
}

void Kernel::AddImpl(std::unique_ptr<PlatformImpl> impl) {
  if (impl == nullptr) return;
  const Platform platform = impl->platform();
  impls_[platform] = std::move(impl);
}

void Kernel::SetGpuAutoImpl(std::unique_ptr<PlatformImpl> impl) { gpu_auto_ = std::move(impl); }

const PlatformImpl* Kernel::impl(Platform platform) const {
  auto it = impls_.find(platform);
  return it == impls_.end() ? nullptr : it->second.get();
}

std::vector<Platform> Kernel::platforms() const {
  std::vector<Platform> out;
  for (const auto& [platform, impl] : impls_) out.push_back(platform);
  return out;
}

absl::StatusOr<Platform> Kernel::ResolvePlatform(std::string_view requested,
                                                 bool gpu_present) const {
  if (requested.empty() || requested == "auto") {
    if (gpu_present && impl(Platform::kCuda) != nullptr) return Platform::kCuda;
    if (impl(Platform::kCpu) != nullptr) return Platform::kCpu;
    return absl::UnimplementedError(
        absl::StrCat("kernel '", id(), "' has no implementation that can run here"));
  }
  absl::StatusOr<Platform> platform = ParsePlatform(requested);
  if (!platform.ok()) return platform.status();
  if (impl(*platform) != nullptr) return *platform;
  std::vector<std::string> available;
  for (Platform p : platforms()) available.emplace_back(PlatformName(p));
  return absl::UnimplementedError(
      absl::StrCat("kernel '", id(), "' has no '", Sv(requested),
                   "' implementation; available: ", absl::StrJoin(available, ", ")));
}

}  // namespace kernelserve
