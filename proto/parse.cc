#include "proto/parse.h"

#include "absl/strings/str_cat.h"
#include "proto/wire_check.h"

namespace kernelserve::wire {

absl::Status MalformedRequest(const grpc::ByteBuffer& buffer,
                              const google::protobuf::Descriptor* type) {
  std::string fault = DescribeMalformed(buffer, type);
  if (fault.empty()) fault = "the protobuf parser refused them";
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", buffer.Length(), " request bytes are not a valid ", type->full_name(), ": ", fault));
}

}  // namespace kernelserve::wire
