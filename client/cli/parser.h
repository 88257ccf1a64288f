// The kernelserve command line, parsed by CLI11 (client/cli/app.h) into Args: per-command help,
// --version, environment variables, and usage errors that suggest the closest word.
#ifndef KERNELSERVE_CLIENT_CLI_PARSER_H_
#define KERNELSERVE_CLIENT_CLI_PARSER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/args.h"

namespace kernelserve::cli {

// The exit code of a usage error.
inline constexpr int kUsageExitCode = 2;

// A parsed command line. A value type.
struct CommandLine {
  // positional: the command, for cache its verb, then their arguments (e.g. {"cache", "rm",
  // KEY}); flags: the values of every flag given, by name without dashes, including
  // KERNELSERVE_TARGET / KERNELSERVE_TOKEN_FILE as "target" / "token-file" when the flag is absent.
  Args args;
  // Help or version text to print (with exit code 0) instead of running a command.
  std::string print;
};

// Parses `argv` (without the program name). A command line that does not parse is a usage
// error (IsUsageError): an unknown command, verb or flag (its message suggests the closest
// one), a missing argument or flag value, an unexpected argument, no command.
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& argv);

// InvalidArgument marked as a usage error.
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_PARSER_H_
