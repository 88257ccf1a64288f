#include "server/listen_check.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kernelserve::server {

absl::Status CheckUnixSocketFree(absl::string_view listen) {
  if (!absl::StartsWith(listen, "unix:")) return absl::OkStatus();
  std::string path(listen.substr(5));
  if (absl::StartsWith(path, "//")) path = path.substr(2);  // unix:///abs/path
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::OkStatus();  // gRPC names the bad path itself
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();
  const bool answered =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  if (!answered) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("--listen=", listen,
                   ": another process is listening on this socket (a server already "
                   "running?); stop it or choose another path"));
}

bool IsLocalListener(absl::string_view listen) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) return true;
  const size_t colon = listen.rfind(':');
  const absl::string_view host =
      colon == absl::string_view::npos ? listen : listen.substr(0, colon);
  return absl::StartsWith(host, "127.") || host == "localhost" || host == "[::1]";
}

}  // namespace kernelserve::server
