// Refusing an address another server already listens on, before gRPC binds it; telling a
// listener of this host alone from one open to the network.
#ifndef KERNELSERVE_SERVER_LISTEN_CHECK_H_
#define KERNELSERVE_SERVER_LISTEN_CHECK_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kernelserve::server {

// For `listen` = "unix:PATH": Unavailable naming the flag when a process accepts connections
// on PATH (the Listener would otherwise unlink its socket and take the path over). OK for a
// missing or stale socket file and for TCP addresses, which the Listener refuses itself when
// they are in use.
absl::Status CheckUnixSocketFree(absl::string_view listen);

// True when `listen` only takes connections from this host: "unix:PATH",
// "unix-abstract:NAME", or a host of 127.0.0.0/8, "localhost" or "[::1]".
bool IsLocalListener(absl::string_view listen);

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_LISTEN_CHECK_H_
