// The kernelserve command-line tool: parses the command line, connects and runs a command.
#ifndef KERNELSERVE_CLIENT_CLI_CLI_H_
#define KERNELSERVE_CLIENT_CLI_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cli/args.h"
#include "client/client.h"

namespace kernelserve::cli {

// ClientOptions from the global flags (--target, --token-file, --tls-*, --deadline), which hold
// KERNELSERVE_TARGET and KERNELSERVE_TOKEN_FILE when those flags are absent. InvalidArgument for
// a bad value; NotFound for an unreadable token file.
absl::StatusOr<ClientOptions> ClientOptionsFromArgs(const Args& args);

// Runs the tool on `argv` (without the program name). Returns the exit code: 0 on success
// (help and --version print to `out`), 2 for a command line that does not parse, otherwise the
// status code of the failure (the server's, or INVALID_ARGUMENT = 3 for a bad flag value),
// after printing "kernelserve: ..." to `err` (with ExplainFailure's hint: where no server
// answers and how to start one, or the deadline that ran out).
int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           bool err_is_tty);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_CLI_H_
