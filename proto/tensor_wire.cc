#include "proto/tensor_wire.h"

#include <sys/mman.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/unknown_field_set.h"
#include "proto/parse_copy.h"
#include "proto/wire_varint.h"

namespace kernelserve::wire {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// The field that stands in for an extracted Tensor.data in the remainder protobuf parses: the
// largest field number, as a varint holding the index of the extracted bytes. Protobuf keeps
// it among the Tensor's unknown fields, where Restore finds it. A message that carries this
// field number itself is not taken (so every marker Restore sees was placed by Rewrite).
constexpr uint32_t kMarkerField = (uint32_t{1} << 29) - 1;
constexpr int kMaxDepth = 64;
// The longest varints protobuf reads: tags and length prefixes in 5 bytes, values in 10.
constexpr int kMaxTagBytes = 5;
constexpr int kMaxSizeBytes = 5;
constexpr int kMaxVarintBytes = 10;
// The largest length prefix protobuf accepts (INT_MAX less its parser's 16 slop bytes).
constexpr uint64_t kMaxDelimitedBytes = INT_MAX - 16;

ScatterCopy& ScatterCopier() {
  static ScatterCopy* const copy = new ScatterCopy();
  return *copy;
}

// Sequential reads over the chunks of a ZeroCopyInputStream (the message's gRPC slices).
class Cursor {
 public:
  explicit Cursor(google::protobuf::io::ZeroCopyInputStream* in) : in_(in) {}

  uint64_t position() const { return position_; }

  // Reads a varint of at most `max_bytes` bytes into `value` and appends its bytes, as they
  // were sent, to `raw`.
  bool ReadVarint(int max_bytes, uint64_t* value, std::string* raw) {
    uint64_t result = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (p_ == end_ && !Refill()) return false;
      const uint8_t byte = static_cast<uint8_t>(*p_++);
      ++position_;
      raw->push_back(static_cast<char>(byte));
      result |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) {
        *value = result;
        return true;
      }
    }
    return false;
  }

  // Copies the next `n` bytes to `out`: large runs through ScatterCopier() in one call (the
  // slices are gathered first), else slice by slice.
  bool Copy(uint64_t n, char* out) {
    const ScatterCopy& copy = ScatterCopier();
    const bool gather = copy != nullptr && n >= kScatterCopyMinBytes;
    std::vector<CopyPiece> pieces;
    while (n > 0) {
      if (p_ == end_ && !Refill()) return false;
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, end_ - p_));
      if (gather) {
        pieces.push_back({out, p_, take});
      } else {
        std::memcpy(out, p_, take);
      }
      out += take;
      p_ += take;
      position_ += take;
      n -= take;
    }
    if (gather) copy(pieces);
    return true;
  }

  // Appends the next `n` bytes to `out`.
  bool Append(uint64_t n, std::string* out) {
    while (n > 0) {
      if (p_ == end_ && !Refill()) return false;
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, end_ - p_));
      out->append(p_, take);
      p_ += take;
      position_ += take;
      n -= take;
    }
    return true;
  }

 private:
  bool Refill() {
    const void* data = nullptr;
    int size = 0;
    while (in_->Next(&data, &size)) {
      if (size > 0) {
        p_ = static_cast<const char*>(data);
        end_ = p_ + size;
        return true;
      }
    }
    return false;
  }

  google::protobuf::io::ZeroCopyInputStream* in_;
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  uint64_t position_ = 0;
};

// Reserves `n` bytes in empty `s`. Large buffers ask for transparent huge pages: the pages are
// fresh (glibc maps allocations this size anew), and 2 MiB faults cost far less than 512 4 KiB
// ones. Advisory; ignored where THP is off.
void ReserveLarge(std::string* s, size_t n) {
  s->reserve(n);
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(s->data()) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(s->data()) + n) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// One field's tag as protobuf reads it (at most 5 bytes, 32 bits), its bytes appended to
// `raw`. False for field number 0 and for the marker's number.
bool ReadTag(Cursor& in, uint32_t* number, int* wire_type, std::string* raw) {
  uint64_t tag = 0;
  if (!in.ReadVarint(kMaxTagBytes, &tag, raw) || tag > UINT32_MAX) return false;
  *number = static_cast<uint32_t>(tag >> 3);
  *wire_type = static_cast<int>(tag & 7);
  return *number != 0 && *number != kMarkerField;
}

// The Tensor.data and ModelInferRequest.raw_input_contents fields taken out of a message, in
// wire order: each in a string, or in a buffer from `allocator` when it gives one.
struct Extraction {
  struct Bytes {
    std::string bytes;
    std::shared_ptr<HostBuffer> buffer;  // when set, holds the bytes (`bytes` is empty)
  };
  HostAllocator* allocator = nullptr;
  std::vector<Bytes> items;
  TensorBuffers buffers;   // filled by Restore for Tensor.data items with a buffer
  RawBuffers raw_buffers;  // filled by RestoreAll of a ModelInferRequest
};

// The bytes fields Rewrite takes out of a message: Tensor.data and
// ModelInferRequest.raw_input_contents.
bool IsExtracted(const FieldDescriptor* field) {
  static const FieldDescriptor* const kTensorData =
      v1::Tensor::descriptor()->FindFieldByNumber(v1::Tensor::kDataFieldNumber);
  static const FieldDescriptor* const kRawInputContents =
      inference::ModelInferRequest::descriptor()->FindFieldByNumber(
          inference::ModelInferRequest::kRawInputContentsFieldNumber);
  return field != nullptr && (field == kTensorData || field == kRawInputContents);
}

bool Rewrite(Cursor& in, uint64_t size, const Descriptor* type, std::string* out,
             Extraction* extracted, int depth);

// The length-delimited field `number` of a message of `type` (its tag, as sent, in `tag`),
// from its length prefix on, for Rewrite. `end` is where the enclosing message ends.
bool RewriteDelimited(Cursor& in, uint64_t end, const Descriptor* type, uint32_t number,
                      const std::string& tag, std::string* out, Extraction* extracted, int depth) {
  std::string prefix;
  uint64_t n = 0;
  if (!in.ReadVarint(kMaxSizeBytes, &n, &prefix) || n > kMaxDelimitedBytes || in.position() > end ||
      n > end - in.position()) {
    return false;
  }
  const FieldDescriptor* field = type != nullptr ? type->FindFieldByNumber(number) : nullptr;
  if (IsExtracted(field)) {
    Extraction::Bytes& item = extracted->items.emplace_back();
    if (extracted->allocator != nullptr) {
      item.buffer = extracted->allocator->TryAllocate(static_cast<size_t>(n));
    }
    if (item.buffer != nullptr) {
      if (!in.Copy(n, static_cast<char*>(item.buffer->data()))) return false;
    } else {
      ReserveLarge(&item.bytes, static_cast<size_t>(n));
      if (!in.Append(n, &item.bytes)) return false;
    }
    PutVarint(uint64_t{kMarkerField} << 3, out);
    PutVarint(extracted->items.size() - 1, out);
    return true;
  }
  if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE) {
    std::string sub;
    if (!Rewrite(in, n, field->message_type(), &sub, extracted, depth + 1)) return false;
    out->append(tag);
    PutVarint(sub.size(), out);
    out->append(sub);
    return true;
  }
  out->append(tag);
  out->append(prefix);
  return in.Append(n, out);
}

// Copies the `size` bytes of one message of `type` from `in` to `out`. Every Tensor.data (and
// raw_input_contents entry) goes to `extracted` instead, whatever its size, and a marker field
// holding its index takes its place, so that the markers of a message keep the wire order of
// its data fields (Restore keeps the last, as protobuf does; RestoreAll of a ModelInferRequest
// appends each, in order). Submessages of known message fields are rewritten the
// same way (their length prefixes change); everything else is copied byte for byte. False
// for anything protobuf's parser might read differently (then the caller parses as gRPC does).
bool Rewrite(Cursor& in, uint64_t size, const Descriptor* type, std::string* out,
             Extraction* extracted, int depth) {
  if (depth > kMaxDepth) return false;
  const uint64_t end = in.position() + size;
  while (in.position() < end) {
    std::string tag;  // as sent
    uint32_t number = 0;
    int wire_type = 0;
    if (!ReadTag(in, &number, &wire_type, &tag)) return false;
    uint64_t value = 0;
    switch (wire_type) {
      case 0:  // varint
        out->append(tag);
        if (!in.ReadVarint(kMaxVarintBytes, &value, out)) return false;
        break;
      case 1:  // fixed64
      case 5:  // fixed32
        out->append(tag);
        if (!in.Append(wire_type == 1 ? 8 : 4, out)) return false;
        break;
      case 2:  // length-delimited
        if (!RewriteDelimited(in, end, type, number, tag, out, extracted, depth)) return false;
        break;
      default:  // groups: not used by kernelserve.v1
        return false;
    }
  }
  return in.position() == end;
}

// Puts back into `tensor` the bytes of its last marker (its last data field on the wire, which
// protobuf keeps), or lists the tensor in `e.buffers` when a buffer holds them, and drops the
// markers. False for a marker that is malformed, out of range or used twice.
bool Restore(v1::Tensor& tensor, Extraction& e, std::vector<bool>& used) {
  const UnknownFieldSet& unknown = tensor.GetReflection()->GetUnknownFields(tensor);
  if (unknown.empty()) return true;
  const size_t count = e.items.size();
  size_t last = count;  // none yet
  for (int i = 0; i < unknown.field_count(); ++i) {
    const UnknownField& field = unknown.field(i);
    if (field.number() != static_cast<int>(kMarkerField)) continue;
    if (field.type() != UnknownField::TYPE_VARINT || field.varint() >= count ||
        used[field.varint()]) {
      return false;
    }
    used[field.varint()] = true;
    last = static_cast<size_t>(field.varint());
  }
  if (last < count) {
    Extraction::Bytes& item = e.items[last];
    if (item.buffer != nullptr) {
      tensor.clear_data();
      e.buffers[&tensor] = std::move(item.buffer);
    } else {
      tensor.mutable_data()->swap(item.bytes);
    }
  }
  tensor.GetReflection()->MutableUnknownFields(&tensor)->DeleteByNumber(kMarkerField);
  return true;
}

template <typename Map>
bool RestoreMap(Map& tensors, Extraction& e, std::vector<bool>& used) {
  for (auto& [name, tensor] : tensors) {
    if (!Restore(tensor, e, used)) return false;
  }
  return true;
}

// Every Tensor of each message type, for Restore.
bool RestoreAll(v1::ExecuteRequest& m, Extraction& e, std::vector<bool>& u) {
  return RestoreMap(*m.mutable_inputs(), e, u);
}
bool RestoreAll(v1::ExecuteResponse& m, Extraction& e, std::vector<bool>& u) {
  return RestoreMap(*m.mutable_outputs(), e, u);
}
bool RestoreAll(v1::AutotuneRequest& m, Extraction& e, std::vector<bool>& u) {
  return RestoreMap(*m.mutable_inputs(), e, u);
}
bool RestoreAll(v1::PutConfigRequest& m, Extraction& e, std::vector<bool>& u) {
  return RestoreMap(*m.mutable_inputs(), e, u);
}
// A message's one Tensor field (mutable_* would make an absent one present).
bool RestoreAll(v1::CreateTensorRequest& m, Extraction& e, std::vector<bool>& u) {
  return !m.has_contents() || Restore(*m.mutable_contents(), e, u);
}
bool RestoreAll(v1::WriteTensorRequest& m, Extraction& e, std::vector<bool>& u) {
  return !m.has_contents() || Restore(*m.mutable_contents(), e, u);
}
bool RestoreAll(v1::ReadTensorResponse& m, Extraction& e, std::vector<bool>& u) {
  return !m.has_tensor() || Restore(*m.mutable_tensor(), e, u);
}
// Appends to `m`'s raw_input_contents (which Rewrite left empty) the entry of each of its
// markers, in wire order (protobuf keeps unknown fields in that order), those in buffers as
// empty entries with their buffer in e.raw_buffers, and drops the markers. False as Restore.
bool RestoreAll(inference::ModelInferRequest& m, Extraction& e, std::vector<bool>& used) {
  if (m.raw_input_contents_size() != 0) return false;
  const UnknownFieldSet& unknown = m.GetReflection()->GetUnknownFields(m);
  const size_t count = e.items.size();
  bool any_buffer = false;
  for (int i = 0; i < unknown.field_count(); ++i) {
    const UnknownField& field = unknown.field(i);
    if (field.number() != static_cast<int>(kMarkerField)) continue;
    if (field.type() != UnknownField::TYPE_VARINT || field.varint() >= count ||
        used[field.varint()]) {
      return false;
    }
    used[field.varint()] = true;
    Extraction::Bytes& item = e.items[field.varint()];
    std::string* raw = m.add_raw_input_contents();
    e.raw_buffers.push_back(std::move(item.buffer));
    if (e.raw_buffers.back() != nullptr) {
      any_buffer = true;
    } else {
      raw->swap(item.bytes);
    }
  }
  if (!any_buffer) e.raw_buffers.clear();
  if (!unknown.empty()) {
    m.GetReflection()->MutableUnknownFields(&m)->DeleteByNumber(kMarkerField);
  }
  return true;
}
bool RestoreAll(v1::ExecuteBatchRequest& m, Extraction& e, std::vector<bool>& u) {
  for (v1::ExecuteRequest& item : *m.mutable_items()) {
    if (!RestoreAll(item, e, u)) return false;
  }
  return true;
}
bool RestoreAll(v1::ExecuteBatchResponse& m, Extraction& e, std::vector<bool>& u) {
  for (v1::ExecuteResponse& item : *m.mutable_items()) {
    if (!RestoreAll(item, e, u)) return false;
  }
  return true;
}

void MoveBuffers(Extraction& e, TensorBuffers* out) { *out = std::move(e.buffers); }
void MoveBuffers(Extraction& e, RawBuffers* out) { *out = std::move(e.raw_buffers); }

// The extracting parse; false when it cannot be used (then the caller parses as gRPC does).
// Tensor bytes that `allocator` (nullable; ignored without `buffers`) gives buffers for go
// into them, listed in `buffers` (left empty when false).
template <typename Message, typename Buffers = TensorBuffers>
bool ParseLarge(grpc::ByteBuffer* buffer, Message* message, HostAllocator* allocator = nullptr,
                Buffers* buffers = nullptr) {
  if (buffers == nullptr) allocator = nullptr;  // the bytes must land in the message then
  grpc::ProtoBufferReader reader(buffer);
  if (!reader.status().ok()) return false;
  Cursor in(&reader);
  std::string rest;
  Extraction extracted;
  extracted.allocator = allocator;
  if (!Rewrite(in, buffer->Length(), Message::descriptor(), &rest, &extracted, 0)) return false;
  message->Clear();
  if (!message->ParseFromString(rest)) return false;
  std::vector<bool> used(extracted.items.size(), false);
  if (!RestoreAll(*message, extracted, used)) return false;
  for (bool u : used) {
    // Bytes of a map entry protobuf replaced by a later one of the same key, or of a Tensor
    // RestoreAll does not visit: rare enough to leave to protobuf's own parse.
    if (!u) return false;
  }
  if (buffers != nullptr) MoveBuffers(extracted, buffers);
  return true;
}

template <typename Message, typename Buffers = TensorBuffers>
grpc::Status DeserializeMessage(grpc::ByteBuffer* buffer, Message* message,
                                HostAllocator* allocator = nullptr, Buffers* buffers = nullptr) {
  if (buffers != nullptr) buffers->clear();
  if (buffer == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, "No payload");
  if (buffer->Length() >= kLargeMessageBytes && ParseLarge(buffer, message, allocator, buffers)) {
    buffer->Clear();
    return grpc::Status::OK;
  }
  return grpc::GenericDeserialize<grpc::ProtoBufferReader, Message>(buffer, message);
}

// A ZeroCopyOutputStream into grpc::Slices. WriteAliasedRaw (which protobuf calls for bytes
// fields when aliasing is on) appends a slice that points at the bytes and holds a reference
// to `owner`, instead of copying them.
class AliasingWriter : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  explicit AliasingWriter(std::shared_ptr<const void> owner) : owner_(std::move(owner)) {}

  bool Next(void** data, int* size) override {
    Commit();
    current_ = grpc::Slice(kBlockBytes);
    used_ = kBlockBytes;
    count_ += kBlockBytes;
    *data = const_cast<uint8_t*>(current_.begin());
    *size = static_cast<int>(kBlockBytes);
    return true;
  }
  void BackUp(int count) override {
    used_ -= static_cast<size_t>(count);
    count_ -= count;
  }
  int64_t ByteCount() const override { return count_; }
  bool AllowsAliasing() const override { return true; }
  bool WriteAliasedRaw(const void* data, int size) override {
    Commit();
    auto* ref = new std::shared_ptr<const void>(owner_);
    slices_.emplace_back(
        grpc_slice_new_with_user_data(
            const_cast<void*>(data), static_cast<size_t>(size),
            [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, ref),
        grpc::Slice::STEAL_REF);
    count_ += size;
    return true;
  }

  // The slices written, as one buffer. REQUIRES: the CodedOutputStream over this is gone.
  void Finish(grpc::ByteBuffer* buffer) {
    Commit();
    grpc::ByteBuffer result(slices_.data(), slices_.size());
    buffer->Swap(&result);
  }

 private:
  static constexpr size_t kBlockBytes = 16 << 10;

  void Commit() {
    if (used_ > 0) slices_.push_back(used_ == current_.size() ? current_ : current_.sub(0, used_));
    current_ = grpc::Slice();
    used_ = 0;
  }

  std::shared_ptr<const void> owner_;
  std::vector<grpc::Slice> slices_;
  grpc::Slice current_;
  size_t used_ = 0;
  int64_t count_ = 0;
};

template <typename Message>
grpc::Status SerializeResponseMessage(Message& message, grpc::ByteBuffer* buffer,
                                      bool* own_buffer) {
  if (message.ByteSizeLong() < kLargeMessageBytes) {
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, Message>(message, buffer, own_buffer);
  }
  auto shared = std::make_shared<Message>();
  shared->Swap(&message);
  *own_buffer = true;
  return SerializeShared(std::move(shared), buffer);
}

}  // namespace

grpc::Status SerializeShared(std::shared_ptr<const google::protobuf::MessageLite> message,
                             grpc::ByteBuffer* buffer) {
  const size_t size = message->ByteSizeLong();
  if (size > INT_MAX) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "message over 2 GiB: protobuf cannot serialize it");
  }
  const google::protobuf::MessageLite& m = *message;
  if (size < kLargeMessageBytes) {  // one exactly sized slice; nothing worth aliasing
    bool own_buffer = true;
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::MessageLite>(
        m, buffer, &own_buffer);
  }
  AliasingWriter writer(std::move(message));
  {
    google::protobuf::io::CodedOutputStream out(&writer);
    out.EnableAliasing(true);
    m.SerializeWithCachedSizes(&out);
    if (out.HadError()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "Failed to serialize message");
    }
  }
  writer.Finish(buffer);
  return grpc::Status::OK;
}

grpc::Status SerializeResponse(v1::ExecuteResponse& message, grpc::ByteBuffer* buffer,
                               bool* own_buffer) {
  return SerializeResponseMessage(message, buffer, own_buffer);
}

grpc::Status SerializeResponse(v1::ExecuteBatchResponse& message, grpc::ByteBuffer* buffer,
                               bool* own_buffer) {
  return SerializeResponseMessage(message, buffer, own_buffer);
}

grpc::Status SerializeResponse(v1::ReadTensorResponse& message, grpc::ByteBuffer* buffer,
                               bool* own_buffer) {
  return SerializeResponseMessage(message, buffer, own_buffer);
}

bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message) {
  return ParseLarge(buffer, message);
}
void SetScatterCopy(ScatterCopy copy) { ScatterCopier() = std::move(copy); }

bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message,
                     HostAllocator* allocator, TensorBuffers* buffers) {
  buffers->clear();
  return ParseLarge(buffer, message, allocator, buffers);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteResponse* message) {
  return ParseLarge(buffer, message);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteBatchRequest* message) {
  return ParseLarge(buffer, message);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ExecuteBatchResponse* message) {
  return ParseLarge(buffer, message);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::AutotuneRequest* message) {
  return ParseLarge(buffer, message);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::PutConfigRequest* message) {
  return ParseLarge(buffer, message);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::CreateTensorRequest* message) {
  return ParseLarge(buffer, message);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::WriteTensorRequest* message) {
  return ParseLarge(buffer, message);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, v1::ReadTensorResponse* message) {
  return ParseLarge(buffer, message);
}

grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteRequest* message,
                         HostAllocator* allocator, TensorBuffers* buffers) {
  return DeserializeMessage(buffer, message, allocator, buffers);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteResponse* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteBatchRequest* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ExecuteBatchResponse* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::AutotuneRequest* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::PutConfigRequest* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::CreateTensorRequest* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::CreateTensorRequest* message,
                         HostAllocator* allocator, TensorBuffers* buffers) {
  return DeserializeMessage(buffer, message, allocator, buffers);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::WriteTensorRequest* message) {
  return DeserializeMessage(buffer, message);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::WriteTensorRequest* message,
                         HostAllocator* allocator, TensorBuffers* buffers) {
  return DeserializeMessage(buffer, message, allocator, buffers);
}
grpc::Status Deserialize(grpc::ByteBuffer* buffer, v1::ReadTensorResponse* message) {
  return DeserializeMessage(buffer, message);
}

grpc::Status Deserialize(grpc::ByteBuffer* buffer, inference::ModelInferRequest* message,
                         HostAllocator* allocator, RawBuffers* buffers) {
  return DeserializeMessage(buffer, message, allocator, buffers);
}
bool ParseExtracting(grpc::ByteBuffer* buffer, inference::ModelInferRequest* message,
                     HostAllocator* allocator, RawBuffers* buffers) {
  if (buffers != nullptr) buffers->clear();
  return ParseLarge(buffer, message, allocator, buffers);
}

}  // namespace kernelserve::wire
