// Which tier of the selector chain answered.
#ifndef KERNELSERVE_CORE_CONFIG_SOURCE_H_
#define KERNELSERVE_CORE_CONFIG_SOURCE_H_

#include <string_view>

namespace kernelserve {

enum class ConfigSource { kOverride, kOverlay, kMemory, kFile, kRedis, kAutotune, kHeuristic };

// "override", "overlay", "memory", "file", "redis", "autotune", "heuristic".
std::string_view ConfigSourceName(ConfigSource source);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_CONFIG_SOURCE_H_
