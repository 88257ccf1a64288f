// The version of the kernelserve CLI and client library: the project's version and commit.
#ifndef KERNELSERVE_CLIENT_CLI_VERSION_H_
#define KERNELSERVE_CLIENT_CLI_VERSION_H_

#include <string>

namespace kernelserve::cli {

// "kernelserve 0.1.0 (git 1234abcd5678)": the commit is the short hash, "+dirty" with local
// changes, or "unknown" (cmake/git_revision.cmake). Thread-safe.
std::string VersionString();

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_VERSION_H_
