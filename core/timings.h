// Timings: where the time of one kernel call went, as the server reports it.
#ifndef KERNELSERVE_CORE_TIMINGS_H_
#define KERNELSERVE_CORE_TIMINGS_H_

#include <cstdint>

namespace kernelserve {

// Microseconds spent in each phase of a call. A value type.
struct Timings {
  int64_t select_us = 0;  // config selection (tuning included when it ran)
  int64_t h2d_us = 0;     // inputs to the device
  int64_t launch_us = 0;  // queuing the kernel on the host, outside kernel_us (gated GPU runs)
  int64_t kernel_us = 0;  // the kernel, by the platform's timer
  int64_t d2h_us = 0;     // outputs back to the host
  int64_t total_us = 0;   // the executor's run of the call (queue time is not in it)
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_TIMINGS_H_
