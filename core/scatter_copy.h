// Copies gathered from scattered memory (the slices gRPC received a message in) into one
// destination, as one call that an implementation may split over threads.
#ifndef KERNELSERVE_CORE_SCATTER_COPY_H_
#define KERNELSERVE_CORE_SCATTER_COPY_H_

#include <cstddef>
#include <functional>
#include <vector>

namespace kernelserve {

// memcpy(dst, src, bytes).
struct CopyPiece {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// Performs every piece (they do not overlap) before returning. Thread-safe.
using ScatterCopy = std::function<void(const std::vector<CopyPiece>& pieces)>;

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_SCATTER_COPY_H_
