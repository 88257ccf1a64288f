// The project's log: one line per event on stderr, for what an operator should see (a server
// that cannot start, a listener in trouble, a work item that threw). Debian's Abseil has no
// absl/log, hence this.
//
//   KS_LOG(WARNING) << "kernelserve-server: listening on " << address << ": " << why;
//   KS_LOG(ERROR).RequestId(id) << "the answer could not be written";
//
// Each line: a UTC timestamp, the level, the source location and the text, with a request id
// field after the location where the caller gives one:
//
//   2026-11-27T14:10:28.123456Z WARNING server/listener.cc:562] kernelserve-server: ...
//   2026-11-27T14:10:28.123456Z ERROR server/service.cc:120 request=42] ...
//
// Lines below the minimum level (SetMinLevel; kInfo unless set, kernelserve-server's
// --log-level) are not formatted at all.
//
// Thread safety: everything here may be called from any thread. Each line goes to stderr in one
// write(2), so lines of concurrent threads never interleave; SetMinLevel applies to the lines
// started after it.
#ifndef KERNELSERVE_CORE_UTILS_LOG_H_
#define KERNELSERVE_CORE_UTILS_LOG_H_

#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kernelserve::logging {

enum class Level : int { kInfo = 0, kWarning = 1, kError = 2 };

// "INFO", "WARNING" or "ERROR".
absl::string_view LevelName(Level level);
// The level named `name` ("info", "warning" or "error", in any case); InvalidArgument else.
absl::StatusOr<Level> ParseLevel(absl::string_view name);

// Lines below `level` are dropped from now on.
void SetMinLevel(Level level);
Level MinLevel();
inline bool Enabled(Level level) { return level >= MinLevel(); }

// The line (without its newline) for an event at `time`: see the top of this file. `file` is
// shown relative to the source tree when it lies in it. An empty `request_id` leaves the field
// out.
std::string FormatLine(absl::Time time, Level level, absl::string_view file, int line,
                       absl::string_view request_id, absl::string_view text);

// Writes the line for `text`, now, when `level` is enabled. For callers that have the text
// already (e.g. a library's own log handler, with that library's source location).
void Write(Level level, absl::string_view file, int line, absl::string_view text,
           absl::string_view request_id = {});

// One line being written: collects what is streamed into it, and writes it when destroyed (at
// the end of the KS_LOG statement). Use through KS_LOG.
class LogMessage {
 public:
  LogMessage(Level level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  ~LogMessage();

  // Adds the request id field (the id the caller knows the request by).
  LogMessage& RequestId(absl::string_view id) {
    request_id_ = std::string(id);
    return *this;
  }

  template <typename T>
  LogMessage& operator<<(const T& value) {
    text_ << value;
    return *this;
  }

 private:
  const Level level_;
  const char* const file_;
  const int line_;
  std::string request_id_;
  std::ostringstream text_;
};

namespace internal {

// Turns KS_LOG's streamed LogMessage into void, for the other branch of its ?: (binds looser
// than <<, tighter than ?:).
struct Voidify {
  void operator&(const LogMessage&) {}
};

}  // namespace internal
}  // namespace kernelserve::logging

#define KS_LOG_LEVEL_INFO ::kernelserve::logging::Level::kInfo
#define KS_LOG_LEVEL_WARNING ::kernelserve::logging::Level::kWarning
#define KS_LOG_LEVEL_ERROR ::kernelserve::logging::Level::kError

// KS_LOG(INFO), KS_LOG(WARNING) or KS_LOG(ERROR), then `<<` the text (and optionally
// .RequestId(id) first). Nothing after it is evaluated when the level is below the minimum. An
// expression, not an if-else, so that an `if` without braces around it has no ambiguous else.
#define KS_LOG(severity)                                    \
  !::kernelserve::logging::Enabled(KS_LOG_LEVEL_##severity) \
      ? (void)0                                             \
      : ::kernelserve::logging::internal::Voidify() &       \
            ::kernelserve::logging::LogMessage(KS_LOG_LEVEL_##severity, __FILE__, __LINE__)

#endif  // KERNELSERVE_CORE_UTILS_LOG_H_
