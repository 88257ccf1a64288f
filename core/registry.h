// KernelRegistry: the kernels a process serves, by name.
#ifndef KERNELSERVE_CORE_REGISTRY_H_
#define KERNELSERVE_CORE_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernel.h"

namespace kernelserve {

// Thread safety: Register before sharing; afterwards the const methods are thread-safe.
class KernelRegistry {
 public:
  // Takes ownership. AlreadyExists when the name is taken.
  absl::Status Register(std::unique_ptr<Kernel> kernel);
  // Accepts "mean_pooling" or "mean_pooling@v1". An unknown name (or version) is a caller
  // error: InvalidArgument naming the known kernels.
  absl::StatusOr<const Kernel*> Find(std::string_view name) const;
  std::vector<const Kernel*> kernels() const;
  // How many times Find ran: a call is planned with one lookup, and runs without any.
  int64_t lookups() const { return lookups_.load(std::memory_order_relaxed); }

 private:
  std::map<std::string, std::unique_ptr<Kernel>, std::less<>> kernels_;
  mutable std::atomic<int64_t> lookups_{0};
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_REGISTRY_H_
