#include "server/identity.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelserve::server {

std::string_view RoleName(Role role) { return role == Role::kAdmin ? "admin" : "caller"; }

std::string PeerCredentials::DebugString() const {
  std::vector<std::string> parts;
  if (uid) parts.push_back(absl::StrCat("uid ", *uid));
  if (gid) parts.push_back(absl::StrCat("gid ", *gid));
  if (pid) parts.push_back(absl::StrCat("pid ", *pid));
  return parts.empty() ? std::string("unknown") : absl::StrJoin(parts, " ");
}

}  // namespace kernelserve::server
