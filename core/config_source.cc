#include "core/config_source.h"

namespace kernelserve {

std::string_view ConfigSourceName(ConfigSource source) {
  switch (source) {
    case ConfigSource::kOverride:
      return "override";
    case ConfigSource::kOverlay:
      return "overlay";
    case ConfigSource::kMemory:
      return "memory";
    case ConfigSource::kFile:
      return "file";
    case ConfigSource::kRedis:
      return "redis";
    case ConfigSource::kAutotune:
      return "autotune";
    case ConfigSource::kHeuristic:
      return "heuristic";
  }
  return "unknown";
}

}  // namespace kernelserve
