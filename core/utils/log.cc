#include "core/utils/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kernelserve::logging {
namespace {

std::atomic<Level> g_min_level{Level::kInfo};

// `file` relative to the source tree when it lies in it. The compiler gives __FILE__ as the
// build named the source: absolute (KERNELSERVE_SOURCE_PREFIX, the tree's path with a trailing
// slash, given by core/CMakeLists.txt) or relative to a build folder inside the tree.
absl::string_view SourcePath(absl::string_view file) {
#ifdef KERNELSERVE_SOURCE_PREFIX
  absl::ConsumePrefix(&file, KERNELSERVE_SOURCE_PREFIX);
#endif
  while (absl::ConsumePrefix(&file, "../") || absl::ConsumePrefix(&file, "./")) {
  }
  return file;
}

// Writes all of `line` to stderr: one write(2) unless the kernel takes less (then the rest).
void WriteToStderr(absl::string_view line) {
  while (!line.empty()) {
    const ssize_t n = write(STDERR_FILENO, line.data(), line.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone: nothing to tell anyone
    line.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

absl::string_view LevelName(Level level) {
  switch (level) {
    case Level::kInfo:
      return "INFO";
    case Level::kWarning:
      return "WARNING";
    case Level::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

absl::StatusOr<Level> ParseLevel(absl::string_view name) {
  for (Level level : {Level::kInfo, Level::kWarning, Level::kError}) {
    if (absl::EqualsIgnoreCase(name, LevelName(level))) return level;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", name, "': expected info, warning or error"));
}

void SetMinLevel(Level level) { g_min_level.store(level, std::memory_order_relaxed); }

Level MinLevel() { return g_min_level.load(std::memory_order_relaxed); }

std::string FormatLine(absl::Time time, Level level, absl::string_view file, int line,
                       absl::string_view request_id, absl::string_view text) {
  std::string out =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", time, absl::UTCTimeZone()), " ",
                   LevelName(level), " ", SourcePath(file), ":", line);
  if (!request_id.empty()) absl::StrAppend(&out, " request=", request_id);
  absl::StrAppend(&out, "] ", text);
  return out;
}

void Write(Level level, absl::string_view file, int line, absl::string_view text,
           absl::string_view request_id) {
  if (!Enabled(level)) return;
  std::string formatted = FormatLine(absl::Now(), level, file, line, request_id, text);
  formatted += '\n';
  WriteToStderr(formatted);
}

LogMessage::~LogMessage() { Write(level_, file_, line_, text_.str(), request_id_); }

}  // namespace kernelserve::logging
