#include "core/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/utils/elide.h"
#include "core/utils/string_view.h"

namespace kernelserve {

absl::Status KernelRegistry::Register(std::unique_ptr<Kernel> kernel) {
  if (kernel == nullptr) return absl::InvalidArgumentError("cannot register a null kernel");
  const std::string name = kernel->name();
  if (kernels_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("kernel '", name, "' is already registered as ", kernels_[name]->id()));
  }
  kernels_[name] = std::move(kernel);
  return absl::OkStatus();
}

absl::StatusOr<const Kernel*> KernelRegistry::Find(std::string_view name) const {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  const size_t at = name.find('@');
  const std::string_view base = name.substr(0, at);
  auto it = kernels_.find(base);
  if (it != kernels_.end() && (at == std::string_view::npos || it->second->id() == name)) {
    return it->second.get();
  }
  std::vector<std::string> known;
  for (const auto& [key, kernel] : kernels_) known.push_back(kernel->id());
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kernel '", Elide(name),
                   "'; known: ", known.empty() ? "none" : absl::StrJoin(known, ", ")));
}

std::vector<const Kernel*> KernelRegistry::kernels() const {
  std::vector<const Kernel*> out;
  for (const auto& [name, kernel] : kernels_) out.push_back(kernel.get());
  return out;
}

}  // namespace kernelserve
