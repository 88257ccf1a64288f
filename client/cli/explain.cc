#include "client/cli/explain.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kernelserve::cli {
namespace {

// Pieces of gRPC's own messages (lower case) for a target where no server answers, and for a
// connection lost under a call (the Python client's kernelserve/errors.py looks for the same).
constexpr absl::string_view kTransportFailures[] = {
    "failed to connect", "dns resolution failed", "errors resolving", "socket closed",
    "connection reset",  "broken pipe",           "stream removed",   "goaway"};

std::string NoServerHint(const std::string& target) {
  return absl::StrCat("no kernelserve server answers at ", target,
                      " (not started, or stopped): start one with `make run` in a kernelserve "
                      "checkout or `kernelserve-server --listen ",
                      target, "`, or point --target (KERNELSERVE_TARGET) at a running one");
}

std::string DeadlineHint(absl::Duration deadline) {
  return absl::StrCat("the deadline was ", absl::FormatDuration(deadline),
                      " per call: --deadline sets it (0 = none)");
}

absl::Status WithHint(const absl::Status& status, absl::string_view hint) {
  return absl::Status(status.code(), absl::StrCat(status.message(), "; ", hint));
}

}  // namespace

bool IsConnectionFailure(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) return false;
  const std::string lower = absl::AsciiStrToLower(status.message());
  // The server's own Redis errors quote their socket's errors too.
  if (absl::StartsWith(lower, "redis")) return false;
  for (absl::string_view piece : kTransportFailures) {
    if (absl::StrContains(lower, piece)) return true;
  }
  return false;
}

absl::Status ExplainFailure(const absl::Status& status, const ClientOptions& options) {
  if (IsConnectionFailure(status)) return WithHint(status, NoServerHint(options.target));
  // A tuning's own time budget (AutotuneRequest.time_budget_ms) is not the call's deadline.
  if (status.code() == absl::StatusCode::kDeadlineExceeded &&
      options.deadline != absl::InfiniteDuration() &&
      !absl::StartsWith(status.message(), "the tuning time budget")) {
    return WithHint(status, DeadlineHint(options.deadline));
  }
  return status;
}

}  // namespace kernelserve::cli
