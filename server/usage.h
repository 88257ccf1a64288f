// The server's own command-line help and version: what --help, -h and --version print. absl's
// --helpfull still lists every flag of every library linked in.
#ifndef KERNELSERVE_SERVER_USAGE_H_
#define KERNELSERVE_SERVER_USAGE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kernelserve::server {

enum class UsageRequest { kNone, kHelp, kVersion };

// What `args` (argv without the program name) ask for: kHelp for --help, -help or -h, kVersion
// for --version, before a "--"; the first one found wins.
UsageRequest FindUsageRequest(const std::vector<std::string>& args);

// Usage of `program`: a synopsis, then every flag defined in server/options.cc (dashed names,
// sorted), its default and its help text. REQUIRES: the flags are linked in.
std::string HelpText(absl::string_view program);

// "kernelserve-server 0.1.0 (git ..., cuda ...)".
std::string VersionText(absl::string_view program);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_USAGE_H_
