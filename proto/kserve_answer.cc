// The answer side of the Open Inference Protocol mapping: the native ExecuteResponse written
// straight into the wire bytes of a ModelInferResponse. A tiny call's answer carries fourteen
// parameters; building them as a protobuf map (entries allocated, keys hashed, then walked to
// serialize) cost more than the kernel, so they are written as the map's wire form instead:
// one buffer, sized as it goes. Large output bytes are sent from the string they are in.
#include <grpc/slice.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"
#include "proto/kserve_convert.h"

namespace kernelserve::kserve {
namespace {

using inference::InferParameter;
using Response = inference::ModelInferResponse;
using OutputTensor = inference::ModelInferResponse::InferOutputTensor;

// Output bytes up to this size are copied into the answer's buffer; larger ones get a slice of
// their own (no copy).
constexpr size_t kCopiedOutputBytes = 16 << 10;

enum WireType : uint32_t { kDelimited = 2 };

// The longest parameter key written here (keys are this file's own names).
constexpr size_t kMaxKey = 64;

size_t VarintSize(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

// Writes `value` as a varint at `p` (room for 10 bytes); returns the end.
char* Varint(uint64_t value, char* p) {
  while (value >= 0x80) {
    *p++ = static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  *p++ = static_cast<char>(value);
  return p;
}

char* DelimitedHead(uint32_t number, size_t size, char* p) {
  return Varint(size, Varint((uint64_t{number} << 3) | kDelimited, p));
}

// The bytes of a length-delimited field `number` of `size` bytes.
size_t DelimitedSize(uint32_t number, size_t size) {
  return VarintSize(uint64_t{number} << 3) + VarintSize(size) + size;
}

void PutDelimitedHead(uint32_t number, size_t size, std::string* out) {
  char head[20];
  out->append(head, DelimitedHead(number, size, head) - head);
}

void PutBytes(uint32_t number, std::string_view bytes, std::string* out) {
  PutDelimitedHead(number, bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

// Writes at `p` the head of one entry of the map<string, InferParameter> field `field` (key = 1,
// value = 2) up to the value's `param_size` bytes, which the caller writes next; returns the
// end. Entries are built on the stack and appended at once: fourteen per answer.
// REQUIRES: key.size() <= kMaxKey; room for kMaxKey + 40 bytes at `p`.
char* EntryHead(uint32_t field, std::string_view key, size_t param_size, char* p) {
  p = DelimitedHead(field, DelimitedSize(1, key.size()) + DelimitedSize(2, param_size), p);
  p = DelimitedHead(1, key.size(), p);
  p = std::copy(key.begin(), key.end(), p);
  return DelimitedHead(2, param_size, p);
}

void PutInt64(uint32_t field, std::string_view key, int64_t value, std::string* out) {
  const auto bits = static_cast<uint64_t>(value);  // negative: ten bytes, as protobuf writes
  // Wire type 0 (varint): the tag is the field number shifted.
  constexpr uint64_t kTag = uint64_t{InferParameter::kInt64ParamFieldNumber} << 3;
  char entry[kMaxKey + 64];
  char* p = EntryHead(field, key, VarintSize(kTag) + VarintSize(bits), entry);
  p = Varint(bits, Varint(kTag, p));
  out->append(entry, p - entry);
}

void PutString(uint32_t field, std::string_view key, std::string_view value, std::string* out) {
  constexpr uint32_t kNumber = InferParameter::kStringParamFieldNumber;
  char entry[kMaxKey + 64];
  char* p = EntryHead(field, key, DelimitedSize(kNumber, value.size()), entry);
  p = DelimitedHead(kNumber, value.size(), p);
  out->append(entry, p - entry);
  out->append(value.data(), value.size());
}

// "autotune" for CONFIG_SOURCE_AUTOTUNE; the names are made once.
std::string_view SourceName(v1::ConfigSource source) {
  static const std::vector<std::string>* const kNames = [] {
    auto* names = new std::vector<std::string>();
    for (int i = 0; i <= v1::ConfigSource_MAX; ++i) {
      std::string name = v1::ConfigSource_Name(static_cast<v1::ConfigSource>(i));
      constexpr std::string_view kPrefix = "CONFIG_SOURCE_";
      if (absl::StartsWith(name, Sv(kPrefix))) name = name.substr(kPrefix.size());
      names->push_back(absl::AsciiStrToLower(name));
    }
    return names;
  }();
  const auto i = static_cast<size_t>(source);
  return i < kNames->size() ? std::string_view((*kNames)[i]) : std::string_view();
}

// The JSON of `config`, remembered per thread for the last config seen: a server answers most
// calls with the config it answered the previous one with, and the JSON is the costliest
// parameter to make.
const std::string& ConfigJson(const v1::KernelConfig& proto) {
  thread_local KernelConfig last;
  thread_local std::string json;
  KernelConfig config = FromProto(proto);
  if (json.empty() || !(config == last)) {
    json = config.ToJson();
    last = std::move(config);
  }
  return json;
}

void PutParameters(const v1::ExecuteResponse& response, std::string* out) {
  constexpr uint32_t kField = Response::kParametersFieldNumber;
  PutString(kField, "config_source", SourceName(response.config_source()), out);
  PutString(kField, "cache_key", response.cache_key(), out);
  PutString(kField, "platform", response.platform(), out);
  PutInt64(kField, "device", response.device(), out);
  PutString(kField, "device_fingerprint", response.device_fingerprint(), out);
  PutString(kField, "config", ConfigJson(response.config()), out);
  const v1::Timing& t = response.timing();
  PutInt64(kField, "queue_us", t.queue_us(), out);
  PutInt64(kField, "select_us", t.select_us(), out);
  PutInt64(kField, "h2d_us", t.h2d_us(), out);
  PutInt64(kField, "launch_us", t.launch_us(), out);
  PutInt64(kField, "kernel_us", t.kernel_us(), out);
  PutInt64(kField, "d2h_us", t.d2h_us(), out);
  PutInt64(kField, "total_us", t.total_us(), out);
  PutInt64(kField, "recv_us", t.recv_us(), out);
  if (!response.warnings().empty()) {
    PutString(kField, "warnings", absl::StrJoin(response.warnings(), "\n"), out);
  }
}

// One InferOutputTensor: name, datatype, shape (packed) and, for an output written to shared
// memory, its region, offset and byte size as parameters.
// Unimplemented for an fp8 output, which the protocol has no datatype for.
absl::StatusOr<std::string> OutputMessage(const std::string& name, DType dtype,
                                          const v1::Tensor& tensor, const RegionRef* region) {
  KS_ASSIGN_OR_RETURN(const std::string_view datatype,
                      DatatypeName(dtype, absl::StrCat("output '", name, "'")));
  std::string out;
  PutBytes(OutputTensor::kNameFieldNumber, name, &out);
  PutBytes(OutputTensor::kDatatypeFieldNumber, datatype, &out);
  if (!tensor.shape().empty()) {
    const size_t packed = std::accumulate(
        tensor.shape().begin(), tensor.shape().end(), size_t{0},
        [](size_t n, int64_t d) { return n + VarintSize(static_cast<uint64_t>(d)); });
    PutDelimitedHead(OutputTensor::kShapeFieldNumber, packed, &out);
    for (int64_t d : tensor.shape()) {
      char bytes[10];
      out.append(bytes, Varint(static_cast<uint64_t>(d), bytes) - bytes);
    }
  }
  if (region != nullptr) {
    constexpr uint32_t kField = OutputTensor::kParametersFieldNumber;
    const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
    PutString(kField, "shared_memory_region", region->region, &out);
    PutInt64(kField, "shared_memory_offset", static_cast<int64_t>(region->offset), &out);
    PutInt64(kField, "shared_memory_byte_size",
             NumElements(shape).value_or(0) * static_cast<int64_t>(ItemSize(dtype)), &out);
  }
  return out;
}

// A slice that owns `bytes` until gRPC lets go of it.
grpc::Slice OwningSlice(std::string bytes) {
  auto* held = new std::string(std::move(bytes));
  return grpc::Slice(
      grpc_slice_new_with_user_data(
          held->data(), held->size(), [](void* p) { delete static_cast<std::string*>(p); }, held),
      grpc::Slice::STEAL_REF);
}

// Copies the bytes of `head` into a slice at the end of `message` and empties `head`.
void Flush(std::string* head, WireMessage* message) {
  if (head->empty()) return;
  message->bytes += head->size();
  message->slices.emplace_back(*head);
  head->clear();
}

// The buffer holding `tensor`'s bytes in `buffers` (nullable), or null.
const std::shared_ptr<HostBuffer>* HeldBuffer(const wire::TensorBuffers* buffers,
                                              const v1::Tensor* tensor) {
  if (buffers == nullptr || !tensor->data().empty()) return nullptr;
  auto it = buffers->find(tensor);
  return it != buffers->end() && it->second != nullptr ? &it->second : nullptr;
}

// One raw_output_contents entry of bytes `held` holds: a small one copied into `head`, a large
// one sent from the buffer (a slice of its own that holds it).
void PutHeld(const std::shared_ptr<HostBuffer>& held, std::string* head, WireMessage* message) {
  PutDelimitedHead(Response::kRawOutputContentsFieldNumber, held->size(), head);
  if (held->size() <= kCopiedOutputBytes) {
    head->append(static_cast<const char*>(held->data()), held->size());
    return;
  }
  Flush(head, message);
  message->bytes += held->size();
  message->slices.push_back(wire::BufferSlice(held));
}

}  // namespace

absl::StatusOr<WireMessage> ToInferResponse(v1::ExecuteResponse* response,
                                            const KernelSchema& schema,
                                            const std::vector<std::string>& outputs,
                                            std::string_view id, const RegionRefs& output_regions,
                                            const wire::TensorBuffers* buffers) {
  for (const std::string& name : outputs) {
    if (!response->outputs().contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", name, "' was asked for but this call does not produce it"));
    }
  }
  std::string head;
  head.reserve(1024);
  PutBytes(Response::kModelNameFieldNumber, schema.name, &head);
  PutBytes(Response::kModelVersionFieldNumber, kModelVersion, &head);
  if (!id.empty()) PutBytes(Response::kIdFieldNumber, id, &head);
  PutParameters(*response, &head);
  // The outputs sent, in the schema's order; raw contents follow in the same order.
  absl::InlinedVector<v1::Tensor*, 4> sent;
  for (const OutputSchema& output : schema.outputs) {
    auto it = response->mutable_outputs()->find(output.name);
    if (it == response->mutable_outputs()->end()) continue;
    if (!outputs.empty() &&
        std::find(outputs.begin(), outputs.end(), output.name) == outputs.end()) {
      continue;
    }
    v1::Tensor& tensor = it->second;
    KS_ASSIGN_OR_RETURN(const DType dtype, FromProto(tensor.dtype(), output.name));
    auto region = output_regions.find(output.name);
    const bool in_region = region != output_regions.end();
    if (in_region) tensor.clear_data();  // its bytes are in the region already
    KS_ASSIGN_OR_RETURN(
        const std::string output_message,
        OutputMessage(output.name, dtype, tensor, in_region ? &region->second : nullptr));
    PutBytes(Response::kOutputsFieldNumber, output_message, &head);
    sent.push_back(&tensor);
  }
  WireMessage message;
  for (v1::Tensor* tensor : sent) {
    if (const std::shared_ptr<HostBuffer>* held = HeldBuffer(buffers, tensor)) {
      PutHeld(*held, &head, &message);
      continue;
    }
    std::string& data = *tensor->mutable_data();
    PutDelimitedHead(Response::kRawOutputContentsFieldNumber, data.size(), &head);
    if (data.size() <= kCopiedOutputBytes) {
      head += data;
      continue;
    }
    Flush(&head, &message);
    message.bytes += data.size();
    message.slices.push_back(OwningSlice(std::move(data)));
  }
  Flush(&head, &message);
  if (message.bytes > INT_MAX) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the answer is ", message.bytes, " bytes, over the 2 GiB a protobuf message ",
                     "can hold: ask for fewer outputs or split the call"));
  }
  return message;
}

void NestAs(uint32_t number, WireMessage* message) {
  std::string head;
  PutDelimitedHead(number, message->bytes, &head);
  message->bytes += head.size();
  message->slices.insert(message->slices.begin(), grpc::Slice(head));
}

}  // namespace kernelserve::kserve
