#include "proto/parse.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/wire_check.h"

namespace kernelserve::wire {

namespace {

void LogUnlessParseError(google::protobuf::LogLevel level, const char* filename, int line,
                         const std::string& message) {
  if (level < google::protobuf::LOGLEVEL_FATAL &&
      message.find("parsing a protocol buffer") != std::string::npos) {
    return;
  }
  std::fprintf(stderr, "[libprotobuf %s:%d] %s\n", filename, line, message.c_str());
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
