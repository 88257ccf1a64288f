// kernelserve._native: the Python client's transport for calls with large tensors, over gRPC's
// C++ library (the one the server is built with).
//
// grpcio takes a request as one bytes object and copies it again into its own buffers; here a
// request is a list of buffers (kernelserve.wire's pieces: protobuf's bytes of the small parts,
// the arrays' own memory for the tensors), each handed to gRPC as a slice that points at it, so
// no byte of a tensor is copied before the socket. A small answer comes back as one bytes object
// (a tiny call's, for protobuf to parse); a larger one is kept as gRPC's slices until Python asks
// for it: `head` for the first bytes (where the answer's first tensor starts) and
// `take` for the whole message in one 64-byte-aligned block, copied once, at an offset that
// Python chooses so that the first tensor's bytes are aligned.
//
// The GIL is released while a call is in flight and while an answer is copied, so other Python
// threads (and asyncio, through an executor) run meanwhile. Channel is thread-safe, as gRPC's
// channels are; an Answer is used by one thread at a time.
#include <Python.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace {

// The Python buffers that a request's slices point into. gRPC may hold a slice past the end of
// the call (a write still queued when the server answers early), so each slice holds a
// reference; the last one to go releases the buffers, taking the GIL to do so.
class HeldBuffers {
 public:
  explicit HeldBuffers(size_t count) : views_(new Py_buffer[count]), refs_(1) {}
  HeldBuffers(const HeldBuffers&) = delete;
  HeldBuffers& operator=(const HeldBuffers&) = delete;

  // Takes a read-only view of `object` (REQUIRES: the GIL; fewer than `count` views so far).
  // False, with the Python error set, for an object that is not a contiguous buffer.
  bool Hold(PyObject* object) {
    if (PyObject_GetBuffer(object, &views_[held_], PyBUF_SIMPLE) != 0) return false;
    ++held_;
    return true;
  }
  const Py_buffer& view(size_t i) const { return views_[i]; }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (Py_IsInitialized()) {
      nb::gil_scoped_acquire gil;
      for (size_t i = 0; i < held_; ++i) PyBuffer_Release(&views_[i]);
    }
    delete this;
  }
  static void UnrefSlice(void* self) { static_cast<HeldBuffers*>(self)->Unref(); }

 private:
  ~HeldBuffers() = default;
  std::unique_ptr<Py_buffer[]> views_;
  size_t held_ = 0;
  std::atomic<int> refs_;
};

void FreeAligned(void* p) noexcept { std::free(p); }

// The longest deadline a call gets (a year): longer ones would overflow the clock's ticks.
constexpr double kLongestTimeoutSeconds = 365.0 * 24 * 3600;

// A received message, as gRPC's slices.
class Answer {
 public:
  explicit Answer(grpc::ByteBuffer buffer) { buffer.Swap(&buffer_); }

  size_t size() const { return buffer_.Length(); }

  // The first min(n, size()) bytes.
  nb::bytes Head(size_t n) const {
    std::vector<grpc::Slice> slices;
    (void)buffer_.Dump(&slices);
    std::string head;
    for (const grpc::Slice& slice : slices) {
      if (head.size() >= n) break;
      head.append(reinterpret_cast<const char*>(slice.begin()),
                  std::min(slice.size(), n - head.size()));
    }
    return nb::bytes(head.data(), head.size());
  }

  // The message as a uint8 array of pad + size() bytes whose memory starts 64-byte aligned,
  // the message from byte `pad` on (REQUIRES: pad < 64). Copies with the GIL released.
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> Take(size_t pad) const {
    if (pad >= 64) throw nb::value_error("pad must be below 64");
    const size_t total = pad + buffer_.Length();
    const size_t rounded = (std::max<size_t>(total, 1) + 63) / 64 * 64;
    void* memory = std::aligned_alloc(64, rounded);
    if (memory == nullptr) throw std::bad_alloc();
    nb::capsule owner(memory, FreeAligned);
    {
      nb::gil_scoped_release unlocked;
      std::vector<grpc::Slice> slices;
      (void)buffer_.Dump(&slices);
      auto* out = static_cast<uint8_t*>(memory) + pad;
      for (const grpc::Slice& slice : slices) {
        std::memcpy(out, slice.begin(), slice.size());
        out += slice.size();
      }
    }
    return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(memory, {total}, owner);
  }

 private:
  grpc::ByteBuffer buffer_;
};

// A channel to one server (insecure: TLS calls take grpcio's path).
class Channel {
 public:
  Channel(const std::string& target, int64_t max_message_bytes) {
    grpc::ChannelArguments args;
    const int limit = static_cast<int>(std::min<int64_t>(max_message_bytes, INT32_MAX));
    args.SetMaxSendMessageSize(limit);
    args.SetMaxReceiveMessageSize(limit);
    std::atomic_store(&channel_, grpc::CreateCustomChannel(
                                     target, grpc::InsecureChannelCredentials(), args));
  }

  // One unary call of `method` ("/package.Service/Method") whose request is the pieces (bytes,
  // memoryviews, contiguous arrays) concatenated; they must not change until it returns.
  // timeout: seconds, None = none. Returns (status code, message, the answer or None); an
  // answer of fewer than `bytes_below` bytes comes as bytes (one copy, no Answer to ask).
  nb::tuple Call(const std::string& method, const nb::list& pieces, std::optional<double> timeout,
                 const std::vector<std::pair<std::string, std::string>>& metadata,
                 size_t bytes_below) {
    std::shared_ptr<grpc::Channel> channel = std::atomic_load(&channel_);
    if (channel == nullptr) return nb::make_tuple(14, "the client is closed", nb::none());
    auto* held = new HeldBuffers(nb::len(pieces));
    std::vector<grpc::Slice> slices;
    for (nb::handle piece : pieces) {
      if (!held->Hold(piece.ptr())) {
        held->Unref();
        throw nb::python_error();
      }
      const Py_buffer& view = held->view(slices.size());
      held->Ref();
      slices.emplace_back(view.buf, static_cast<size_t>(view.len), &HeldBuffers::UnrefSlice,
                          held);
    }
    grpc::Status status;
    std::optional<grpc::ByteBuffer> answer;
    {
      nb::gil_scoped_release unlocked;
      grpc::ByteBuffer request(slices.data(), slices.size());
      slices.clear();
      grpc::ClientContext context;
      if (timeout.has_value()) {  // clamped: a year and more is as good as none, and fits
        const double seconds = std::clamp(*timeout, 0.0, kLongestTimeoutSeconds);
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                 std::chrono::duration<double>(seconds)));
      }
      for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
      const grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
      grpc::ByteBuffer response;
      status = grpc::internal::BlockingUnaryCall(channel.get(), rpc, &context, request,
                                                 &response);
      if (status.ok()) answer.emplace(std::move(response));
    }
    held->Unref();
    nb::object result = nb::none();
    if (answer.has_value() && answer->Length() < bytes_below) {
      result = BytesOf(*answer);
    } else if (answer.has_value()) {
      result = nb::cast(Answer(std::move(*answer)));
    }
    return nb::make_tuple(static_cast<int>(status.error_code()), status.error_message(), result);
  }

  // The message as one bytes object (REQUIRES: the GIL).
  static nb::object BytesOf(const grpc::ByteBuffer& buffer) {
    std::vector<grpc::Slice> slices;
    (void)buffer.Dump(&slices);
    PyObject* bytes = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(buffer.Length()));
    if (bytes == nullptr) throw nb::python_error();
    char* out = PyBytes_AS_STRING(bytes);
    for (const grpc::Slice& slice : slices) {
      std::memcpy(out, slice.begin(), slice.size());
      out += slice.size();
    }
    return nb::steal(bytes);
  }

  // Lets go of the channel: its connection closes once calls in flight end (a server that
  // stops waits for the connections of its clients). Calls after it are UNAVAILABLE.
  void Close() { std::atomic_store(&channel_, std::shared_ptr<grpc::Channel>()); }

 private:
  std::shared_ptr<grpc::Channel> channel_;  // null once closed; read and written atomically
};

// Reads the varint at `p` (before `end`) into `value`, moving `p` past it; false when it runs
// past `end` or is longer than 10 bytes.
bool ReadVarint(const uint8_t*& p, const uint8_t* end, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 70 && p < end; shift += 7) {
    const uint8_t byte = *p++;
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) return true;
  }
  return false;
}

// Whether the serialized message `message` has the top-level field `number`, read from its tags
// alone (a tiny call's answer is parsed only when it carries an in-band status). True also for
// bytes that are not well formed at the top level: the caller's parse then says what is wrong.
bool HasField(const nb::bytes& message, uint32_t number) {
  const auto* p = reinterpret_cast<const uint8_t*>(message.c_str());
  const uint8_t* end = p + message.size();
  while (p < end) {
    uint64_t tag = 0;
    uint64_t size = 0;
    if (!ReadVarint(p, end, tag) || (tag >> 3) == 0 || (tag >> 3) == number) return true;
    switch (tag & 7) {
      case 0:  // varint
        if (!ReadVarint(p, end, size)) return true;
        break;
      case 1:  // 64-bit
        size = 8;
        break;
      case 2:  // length-delimited
        if (!ReadVarint(p, end, size)) return true;
        break;
      case 5:  // 32-bit
        size = 4;
        break;
      default:  // groups: not in these messages
        return true;
    }
    if ((tag & 7) != 0) {
      if (size > static_cast<uint64_t>(end - p)) return true;
      p += size;
    }
  }
  return false;
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "The kernelserve Python client's transport over gRPC's C++ library.";
  // Clients left open at exit (module globals, an interpreter that ends mid-call) are not
  // leaks worth a report.
  nb::set_leak_warnings(false);
  nb::class_<Answer>(m, "Answer")
      .def_prop_ro("size", &Answer::size)
      .def("head", &Answer::Head, nb::arg("n"))
      .def("take", &Answer::Take, nb::arg("pad") = 0);
  nb::class_<Channel>(m, "Channel")
      .def(nb::init<const std::string&, int64_t>(), nb::arg("target"),
           nb::arg("max_message_bytes"))
      .def("call", &Channel::Call, nb::arg("method"), nb::arg("pieces"), nb::arg("timeout").none(),
           nb::arg("metadata"), nb::arg("bytes_below") = 0)
      .def("close", &Channel::Close);
  m.def("has_field", &HasField, nb::arg("message"), nb::arg("number"));
  m.attr("GRPC_VERSION") = grpc::Version();
}
