// RunServerMain: the whole of a kernelserve server binary's main().
#ifndef KERNELSERVE_SERVER_RUN_H_
#define KERNELSERVE_SERVER_RUN_H_

#include <functional>
#include <memory>
#include <vector>

#include "core/kernel.h"

namespace kernelserve::server {

// Parses the flags, starts the server with the built-in kernels and those `extra_kernels`
// make, prints the startup line and serves until SIGTERM or SIGINT, then drains. Returns the
// process exit code: 0 after a clean stop, 2 for bad flags, 1 when the server cannot start.
// Call once, from main(), before any other thread starts.
int RunServerMain(int argc, char** argv,
                  const std::vector<std::function<std::unique_ptr<Kernel>()>>& extra_kernels = {});

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_RUN_H_
