#include "proto/parse.h"

#include "absl/strings/str_cat.h"
#include "core/utils/log.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/wire_check.h"

namespace kernelserve::wire {

namespace {

logging::Level LevelOf(google::protobuf::LogLevel level) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      return logging::Level::kInfo;
    case google::protobuf::LOGLEVEL_WARNING:
      return logging::Level::kWarning;
    default:
      return logging::Level::kError;
  }
}

// Protobuf's own log lines, at protobuf's source location, but for a message that fails to
// parse.
void LogUnlessParseError(google::protobuf::LogLevel level, const char* filename, int line,
                         const std::string& message) {
  if (level < google::protobuf::LOGLEVEL_FATAL &&
      message.find("parsing a protocol buffer") != std::string::npos) {
    return;
  }
  logging::Write(LevelOf(level), filename, line, absl::StrCat("libprotobuf: ", message));
}

}  // namespace

void FilterParseLogs() { google::protobuf::SetLogHandler(&LogUnlessParseError); }

absl::Status MalformedRequest(const grpc::ByteBuffer& buffer,
                              const google::protobuf::Descriptor* type) {
  std::string fault = DescribeMalformed(buffer, type);
  if (fault.empty()) fault = "the protobuf parser refused them";
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", buffer.Length(), " request bytes are not a valid ", type->full_name(), ": ", fault));
}

}  // namespace kernelserve::wire
