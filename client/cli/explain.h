// What a failed call's status leaves out for the person at the terminal, added to its message:
// that no server answers at the target and how to start one, or which deadline ran out.
// All functions are thread-safe.
#ifndef KERNELSERVE_CLIENT_CLI_EXPLAIN_H_
#define KERNELSERVE_CLIENT_CLI_EXPLAIN_H_

#include "absl/status/status.h"
#include "client/client.h"

namespace kernelserve::cli {

// True for an UNAVAILABLE of gRPC's own transport: no server at the target (refused, no such
// socket, a name that does not resolve) or the connection lost under a call. False for an
// UNAVAILABLE the server sent (shutting down, its Redis store) and for every other code.
bool IsConnectionFailure(const absl::Status& status);

// `status` with its code and message kept and a hint appended to the message: for a connection
// failure, that no kernelserve server answers at options.target and how to start one there
// (`make run`, `kernelserve-server --listen TARGET`) or point --target elsewhere; for
// DEADLINE_EXCEEDED, the deadline options set and the flag that sets it. Others unchanged.
absl::Status ExplainFailure(const absl::Status& status, const ClientOptions& options);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_EXPLAIN_H_
