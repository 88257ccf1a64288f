#include "kernels/runtime/cuda/cuda_impl.h"

#include "absl/strings/str_cat.h"
#include "core/utils/string_view.h"

namespace kernelserve::cuda {

absl::Status CheckCudaDevice(std::string_view label, Platform platform, const DeviceInfo& device) {
  if (device.platform == Platform::kCuda) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(Sv(label), " (", Sv(PlatformName(platform)), "): the device is not a CUDA GPU"));
}

absl::Status CheckPrepareDevice(std::string_view label, Platform platform,
                                const DeviceInfo& device) {
  if (device.platform == Platform::kCuda && device.ordinal >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(label), " (", Sv(PlatformName(platform)), "): expected a CUDA device, got ",
                   Sv(PlatformName(device.platform)), " ordinal ", device.ordinal));
}

}  // namespace kernelserve::cuda
