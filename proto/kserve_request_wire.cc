#include "proto/kserve_request_wire.h"

#include <grpc/slice.h>
#include <grpcpp/support/slice.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "proto/wire_varint.h"

namespace kernelserve::wire {
namespace {

using inference::ModelInferRequest;

// Raw entries below this size are copied into the head; larger ones get a slice of their own.
constexpr size_t kAliasedBytes = 16 << 10;

// `request` without its raw entries. Lists every other field of ModelInferRequest: a field
// added to the message must be added here (the test of SerializeInferRequest compares the
// parse of a request with every field set).
ModelInferRequest WithoutRawContents(const ModelInferRequest& request) {
  ModelInferRequest head;
  head.set_model_name(request.model_name());
  head.set_model_version(request.model_version());
  head.set_id(request.id());
  *head.mutable_parameters() = request.parameters();
  *head.mutable_inputs() = request.inputs();
  *head.mutable_outputs() = request.outputs();
  head.GetReflection()->MutableUnknownFields(&head)->MergeFrom(
      request.GetReflection()->GetUnknownFields(request));
  return head;
}

// A slice over `bytes` that holds `owner` until gRPC lets go.
grpc::Slice AliasSlice(const std::string& bytes,
                       const std::shared_ptr<const ModelInferRequest>& owner) {
  auto* ref = new std::shared_ptr<const ModelInferRequest>(owner);
  return grpc::Slice(
      grpc_slice_new_with_user_data(
          const_cast<char*>(bytes.data()), bytes.size(),
          [](void* p) { delete static_cast<std::shared_ptr<const ModelInferRequest>*>(p); }, ref),
      grpc::Slice::STEAL_REF);
}

}  // namespace

grpc::Status SerializeInferRequest(std::shared_ptr<const ModelInferRequest> request,
                                   grpc::ByteBuffer* buffer) {
  std::string head = WithoutRawContents(*request).SerializeAsString();
  std::vector<grpc::Slice> slices;
  uint64_t total = head.size();
  constexpr uint64_t kTag = (uint64_t{ModelInferRequest::kRawInputContentsFieldNumber} << 3) | 2;
  for (const std::string& raw : request->raw_input_contents()) {
    PutVarint(kTag, &head);
    PutVarint(raw.size(), &head);
    total += raw.size() + 10;
    if (raw.size() < kAliasedBytes) {
      head += raw;
      continue;
    }
    slices.emplace_back(head);
    head.clear();
    slices.push_back(AliasSlice(raw, request));
  }
  if (total > INT_MAX) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "message over 2 GiB: protobuf cannot parse it");
  }
  if (!head.empty()) slices.emplace_back(head);
  grpc::ByteBuffer result(slices.data(), slices.size());
  buffer->Swap(&result);
  return grpc::Status::OK;
}

}  // namespace kernelserve::wire
