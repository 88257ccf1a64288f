// What this binary is: its version, the CUDA toolkit it was compiled with and its commit. For
// --version, the startup line, GetServerInfo and the kernelserve_build_info metric.
#ifndef KERNELSERVE_SERVER_BUILD_INFO_H_
#define KERNELSERVE_SERVER_BUILD_INFO_H_

#include <string>

namespace kernelserve::server {

// A value type.
struct BuildInfo {
  std::string version;  // the project's version, e.g. "0.1.0"
  std::string cuda;     // the CUDA toolkit's "major.minor", or "none" for a CPU-only build
  std::string git;      // the short commit, "+dirty" with local changes, or "unknown"
};

// The build of this binary. Thread-safe.
const BuildInfo& GetBuildInfo();

// "0.1.0 (git 1234abcd, cuda 13.0)".
std::string BuildInfoString();

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_BUILD_INFO_H_
