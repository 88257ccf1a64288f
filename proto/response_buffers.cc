// wire::SerializeResponse of an ExecuteResponse whose output bytes live in host buffers, and
// wire::BufferSlice, which sends such bytes.
#include <grpc/slice.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "proto/tensor_wire.h"
#include "proto/wire_varint.h"

namespace kernelserve::wire {
namespace {

// The tag of length-delimited field `number`.
void PutDelimitedTag(uint32_t number, std::string* out) {
  PutVarint((uint64_t{number} << 3) | 2, out);
}

// One outputs map entry, on the wire, up to its tensor's data bytes.
std::string EntryHead(const std::string& name, const v1::Tensor& tensor, size_t data_bytes) {
  const std::string fields = tensor.SerializeAsString();  // dtype and shape; data is empty
  std::string data_prefix;
  PutDelimitedTag(v1::Tensor::kDataFieldNumber, &data_prefix);
  PutVarint(data_bytes, &data_prefix);
  const uint64_t value_bytes = fields.size() + data_prefix.size() + data_bytes;
  std::string entry;  // map entry: key = 1, value = 2
  PutDelimitedTag(1, &entry);
  PutVarint(name.size(), &entry);
  entry += name;
  PutDelimitedTag(2, &entry);
  PutVarint(value_bytes, &entry);
  std::string head;
  PutDelimitedTag(v1::ExecuteResponse::kOutputsFieldNumber, &head);
  PutVarint(entry.size() + value_bytes, &head);
  head += entry;
  head += fields;
  head += data_prefix;
  return head;
}

}  // namespace

grpc::Slice BufferSlice(std::shared_ptr<HostBuffer> buffer) {
  void* data = buffer->data();
  const size_t size = buffer->size();
  auto* ref = new std::shared_ptr<HostBuffer>(std::move(buffer));
  return grpc::Slice(
      grpc_slice_new_with_user_data(
          data, size, [](void* p) { delete static_cast<std::shared_ptr<HostBuffer>*>(p); }, ref),
      grpc::Slice::STEAL_REF);
}

grpc::Status SerializeResponse(v1::ExecuteResponse& message, TensorBuffers& buffers,
                               grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> tail;
  uint64_t tail_bytes = 0;
  auto* outputs = message.mutable_outputs();
  for (auto it = outputs->begin(); it != outputs->end();) {
    auto found = buffers.find(&it->second);
    if (found == buffers.end() || found->second == nullptr) {
      ++it;
      continue;
    }
    std::shared_ptr<HostBuffer> data = std::move(found->second);
    const std::string head = EntryHead(it->first, it->second, data->size());
    tail_bytes += head.size() + data->size();
    tail.emplace_back(head);
    tail.push_back(BufferSlice(std::move(data)));
    it = outputs->erase(it);
  }
  buffers.clear();
  if (message.ByteSizeLong() + tail_bytes > INT_MAX) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "response over 2 GiB: protobuf cannot parse it");
  }
  grpc::ByteBuffer rest;
  bool own_buffer = false;
  grpc::Status status = SerializeResponse(message, &rest, &own_buffer);
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  if (rest.Valid()) {
    status = rest.Dump(&slices);
    if (!status.ok()) return status;
  }
  for (grpc::Slice& slice : tail) slices.push_back(std::move(slice));
  grpc::ByteBuffer result(slices.data(), slices.size());
  buffer->Swap(&result);
  return grpc::Status::OK;
}

}  // namespace kernelserve::wire
