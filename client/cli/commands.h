// The subcommands of the kernelserve CLI. Each prints a human table, or JSON with --json,
// and returns the server's status on failure.
#ifndef KERNELSERVE_CLIENT_CLI_COMMANDS_H_
#define KERNELSERVE_CLIENT_CLI_COMMANDS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "client/cli/args.h"
#include "client/client.h"

namespace kernelserve::cli {

// What a command works with. All pointers are borrowed and outlive the command.
struct CommandContext {
  const Client* client = nullptr;
  const Args* args = nullptr;   // positional[0] is the command's name
  std::string target;           // the server's gRPC target, as the client dialed it
  bool json = false;            // --json: machine-readable output
  std::ostream* out = nullptr;  // results
  std::ostream* err = nullptr;  // notes and the progress bar
  bool err_is_tty = false;      // draw the bench progress bar
};

absl::Status CmdHealth(const CommandContext& ctx);   // health [SERVICE]
absl::Status CmdInfo(const CommandContext& ctx);     // info
absl::Status CmdKernels(const CommandContext& ctx);  // kernels
absl::Status CmdRun(const CommandContext& ctx);      // run KERNEL --shape/--input ...
absl::Status CmdBench(const CommandContext& ctx);    // bench KERNEL --shape ... --concurrency N
absl::Status CmdTune(const CommandContext& ctx);     // tune KERNEL --shape ...
absl::Status CmdCache(const CommandContext& ctx);    // cache ls|get|put|rm
absl::Status CmdTensor(const CommandContext& ctx);   // tensor create|write|read|ls|rm

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_COMMANDS_H_
