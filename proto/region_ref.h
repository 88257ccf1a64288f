// RegionRef: a tensor's place in a registered shared-memory region, as either protocol names
// it (kernelserve.v1's TensorRef, the KServe v2 shared_memory_* tensor parameters).
#ifndef KERNELSERVE_PROTO_REGION_REF_H_
#define KERNELSERVE_PROTO_REGION_REF_H_

#include <cstdint>
#include <map>
#include <string>

namespace kernelserve {

// A value type.
struct RegionRef {
  std::string region;      // the name it was registered under
  uint64_t offset = 0;     // from the start of the region's registered part
  uint64_t byte_size = 0;  // an input's exact bytes; room for an output's
};

// By tensor name.
using RegionRefs = std::map<std::string, RegionRef>;

}  // namespace kernelserve

#endif  // KERNELSERVE_PROTO_REGION_REF_H_
