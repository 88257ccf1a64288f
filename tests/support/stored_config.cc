#include "tests/support/stored_config.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace kernelserve::testing {

StoredConfig SampleStoredConfig(std::mt19937& rng, const std::string& kernel_id,
                                const std::string& fingerprint_hash) {
  std::uniform_int_distribution<int> small(1, 256);
  StoredConfig value;
  value.config.block_q = small(rng);
  value.config.block_k = small(rng);
  value.config.block_d = small(rng);
  value.config.num_warps = small(rng) % 8 + 1;
  value.config.num_stages = small(rng) % 4 + 1;
  value.config.block_size = small(rng);
  value.config.platform = rng() % 2 ? "cpu" : "cuda";
  value.config.algorithm = rng() % 2 ? "split" : "";
  if (rng() % 2) value.config.named["threads"] = small(rng);
  value.kernel_id = kernel_id;
  value.fingerprint_hash = fingerprint_hash;
  value.cache_key = absl::StrFormat("%s:%016x", kernel_id, static_cast<uint64_t>(rng()));
  value.measured_seconds = std::uniform_real_distribution<double>(1e-6, 1e-2)(rng);
  static constexpr const char* kOrigins[] = {"autotune", "pinned", "heuristic"};
  value.origin = kOrigins[rng() % 3];
  value.host = absl::StrFormat("host-%d", small(rng));
  value.stored_at_unix_ms = 1700000000000 + small(rng);
  return value;
}

}  // namespace kernelserve::testing
