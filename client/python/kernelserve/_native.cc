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
// threads run meanwhile. For asyncio, `start` begins a call and returns at once; gRPC's own
// thread puts the finished call on a list and makes a pipe readable, and the event loop,
// which watches that fd, collects it with `completed` (one wake-up of the loop per answer, no
// thread of an executor in between). Channel is thread-safe, as gRPC's channels are; an Answer
// is used by one thread at a time.
#include <Python.h>
#include <fcntl.h>
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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
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

using Metadata = std::vector<std::pair<std::string, std::string>>;

// A call begun by Channel::Start, from its start until the event loop collects it. Made and
// destroyed with the GIL held (it holds the caller's token and the request's views); gRPC's
// thread writes `status` and `response` before handing it over.
struct StartedCall {
  std::shared_ptr<grpc::Channel> channel;  // null: the client was closed; kept to the end
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Status status;
  nb::object token;
  size_t bytes_below = 0;
};

// The started calls of one Channel, in flight and finished, and the pipe that tells the event
// loop that finished ones wait. Thread-safe. Shared by the Channel and the callbacks of
// its calls in flight, so that either may go first.
class Completions {
 public:
  static std::shared_ptr<Completions> Make() {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    for (const int fd : fds) {
      (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    return std::shared_ptr<Completions>(new Completions(fds[0], fds[1]));
  }
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;
  ~Completions() {
    if (!finished_.empty() && Py_IsInitialized()) {  // never collected: tokens need the GIL
      nb::gil_scoped_acquire gil;
      finished_.clear();
    }
    close(read_fd_);
    close(write_fd_);
  }

  int fd() const { return read_fd_; }

  // Takes a call about to start; returns its id.
  uint64_t Register(std::unique_ptr<StartedCall> call) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = ++last_id_;
    in_flight_.emplace(id, std::move(call));
    return id;
  }

  // Call `id` ended with `status` (any thread): it goes on the finished list and fd() becomes
  // readable.
  void Finish(uint64_t id, grpc::Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = in_flight_.find(id);
      if (it == in_flight_.end()) return;
      it->second->status = std::move(status);
      finished_.push_back(std::move(it->second));
      in_flight_.erase(it);
      if (in_flight_.empty()) idle_.notify_all();
    }
    const char one = 1;  // a full pipe (EAGAIN) is readable already
    while (write(write_fd_, &one, 1) < 0 && errno == EINTR) {
    }
  }

  // The finished calls, oldest first; fd() is not readable after it until the next one.
  std::deque<std::unique_ptr<StartedCall>> Take() {
    char bytes[256];
    for (;;) {
      const ssize_t n = read(read_fd_, bytes, sizeof(bytes));
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;  // empty (EAGAIN)
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<std::unique_ptr<StartedCall>> out;
    out.swap(finished_);
    return out;
  }

  // Blocks until no call is in flight (gRPC's threads need neither the GIL nor this thread to
  // finish them, so the caller may hold the GIL).
  void WaitInFlight() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return in_flight_.empty(); });
  }

  void Cancel(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(id);
    if (it != in_flight_.end()) it->second->context.TryCancel();
  }
  void CancelAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, call] : in_flight_) call->context.TryCancel();
  }

 private:
  Completions(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}

  const int read_fd_;
  const int write_fd_;
  std::mutex mu_;
  std::condition_variable idle_;  // notified when in_flight_ becomes empty
  // Guarded by mu_: the last id given, the calls in flight by id, the finished ones in order.
  uint64_t last_id_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<StartedCall>> in_flight_;
  std::deque<std::unique_ptr<StartedCall>> finished_;
};

// A channel to one server (insecure: TLS calls take grpcio's path).
class Channel {
 public:
  Channel(const std::string& target, int64_t max_message_bytes) {
    grpc::ChannelArguments args;
    const int limit = static_cast<int>(std::min<int64_t>(max_message_bytes, INT32_MAX));
    args.SetMaxSendMessageSize(limit);
    args.SetMaxReceiveMessageSize(limit);
    std::atomic_store(&channel_,
                      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  }

  // Calls started here and not yet collected end first (cancelled), and are freed here, with
  // the GIL, not by gRPC's threads (a client dropped without close(), a loop closed with calls
  // in flight).
  ~Channel() {
    completions_->CancelAll();
    {
      nb::gil_scoped_release unlocked;
      completions_->WaitInFlight();
    }
    (void)completions_->Take();
  }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // One unary call of `method` ("/package.Service/Method") whose request is the pieces (bytes,
  // memoryviews, contiguous arrays) concatenated; they must not change until it returns.
  // timeout: seconds, None = none. Returns (status code, message, the answer or None); an
  // answer of fewer than `bytes_below` bytes comes as bytes (one copy, no Answer to ask).
  nb::tuple Call(const std::string& method, const nb::list& pieces, std::optional<double> timeout,
                 const Metadata& metadata, size_t bytes_below) {
    std::shared_ptr<grpc::Channel> channel = std::atomic_load(&channel_);
    if (channel == nullptr) return nb::make_tuple(14, "the client is closed", nb::none());
    grpc::ByteBuffer request = RequestOf(pieces);
    grpc::Status status;
    std::optional<grpc::ByteBuffer> answer;
    {
      nb::gil_scoped_release unlocked;
      grpc::ClientContext context;
      Prepare(&context, timeout, metadata);
      const grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
      grpc::ByteBuffer response;
      status = grpc::internal::BlockingUnaryCall(channel.get(), rpc, &context, request, &response);
      if (status.ok()) answer.emplace(std::move(response));
    }
    return nb::make_tuple(static_cast<int>(status.error_code()), status.error_message(),
                          ResultOf(answer, bytes_below));
  }

  // Starts the call Call() makes and returns its id at once; the pieces must not change until
  // it is collected. `token` (any object; a number keeps the garbage collector's view whole,
  // as this holds it unseen) comes back with its outcome from Completed() once gRPC has
  // finished the call, which makes completion_fd readable.
  uint64_t Start(const std::string& method, const nb::list& pieces, std::optional<double> timeout,
                 const Metadata& metadata, size_t bytes_below, nb::object token) {
    auto call = std::make_unique<StartedCall>();
    call->request = RequestOf(pieces);
    call->token = std::move(token);
    call->bytes_below = bytes_below;
    call->channel = std::atomic_load(&channel_);
    Prepare(&call->context, timeout, metadata);
    StartedCall* started = call.get();
    const uint64_t id = completions_->Register(std::move(call));
    if (started->channel == nullptr) {
      completions_->Finish(id, grpc::Status(grpc::StatusCode::UNAVAILABLE, "the client is closed"));
      return id;
    }
    nb::gil_scoped_release unlocked;
    grpc::GenericStub stub(started->channel);
    stub.UnaryCall(&started->context, method, grpc::StubOptions(), &started->request,
                   &started->response, [completions = completions_, id](grpc::Status status) {
                     completions->Finish(id, std::move(status));
                   });
    return id;
  }

  // The calls finished since the last time, as (token, status code, message, answer or None),
  // the answer as Call() gives it (REQUIRES: the GIL, as every method here).
  nb::list Completed() {
    nb::list out;
    for (std::unique_ptr<StartedCall>& call : completions_->Take()) {
      std::optional<grpc::ByteBuffer> answer;
      if (call->status.ok()) answer.emplace(std::move(call->response));
      out.append(nb::make_tuple(call->token, static_cast<int>(call->status.error_code()),
                                call->status.error_message(), ResultOf(answer, call->bytes_below)));
    }
    return out;
  }

  // Cancels started call `id` if it is still in flight (it then finishes as CANCELLED); ids of
  // calls already finished are ignored. cancel_all: every call in flight.
  void Cancel(uint64_t id) { completions_->Cancel(id); }
  void CancelAll() { completions_->CancelAll(); }

  // The pipe's end that is readable while finished calls wait to be collected.
  int CompletionFd() const { return completions_->fd(); }

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
  // The request of `pieces` as slices over their memory, each holding the views (REQUIRES: the
  // GIL). Throws what Python raises for a piece that is not a contiguous buffer.
  static grpc::ByteBuffer RequestOf(const nb::list& pieces) {
    auto* held = new HeldBuffers(nb::len(pieces));
    std::vector<grpc::Slice> slices;
    for (nb::handle piece : pieces) {
      if (!held->Hold(piece.ptr())) {
        held->Unref();
        throw nb::python_error();
      }
      const Py_buffer& view = held->view(slices.size());
      held->Ref();
      slices.emplace_back(view.buf, static_cast<size_t>(view.len), &HeldBuffers::UnrefSlice, held);
    }
    grpc::ByteBuffer request(slices.data(), slices.size());
    slices.clear();
    held->Unref();
    return request;
  }

  // The deadline (seconds from now, clamped: a year and more is as good as none, and fits) and
  // metadata of a call.
  static void Prepare(grpc::ClientContext* context, std::optional<double> timeout,
                      const Metadata& metadata) {
    if (timeout.has_value()) {
      const double seconds = std::clamp(*timeout, 0.0, kLongestTimeoutSeconds);
      context->set_deadline(std::chrono::system_clock::now() +
                            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                std::chrono::duration<double>(seconds)));
    }
    for (const auto& [key, value] : metadata) context->AddMetadata(key, value);
  }

  // A received answer as Python gets it: None, bytes below `bytes_below`, an Answer otherwise
  // (REQUIRES: the GIL).
  static nb::object ResultOf(std::optional<grpc::ByteBuffer>& answer, size_t bytes_below) {
    if (!answer.has_value()) return nb::none();
    if (answer->Length() < bytes_below) return BytesOf(*answer);
    return nb::cast(Answer(std::move(*answer)));
  }

  std::shared_ptr<grpc::Channel> channel_;  // null once closed; read and written atomically
  const std::shared_ptr<Completions> completions_ = Completions::Make();
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
      .def(nb::init<const std::string&, int64_t>(), nb::arg("target"), nb::arg("max_message_bytes"))
      .def("call", &Channel::Call, nb::arg("method"), nb::arg("pieces"), nb::arg("timeout").none(),
           nb::arg("metadata"), nb::arg("bytes_below") = 0)
      .def("start", &Channel::Start, nb::arg("method"), nb::arg("pieces"),
           nb::arg("timeout").none(), nb::arg("metadata"), nb::arg("bytes_below"), nb::arg("token"))
      .def("completed", &Channel::Completed)
      .def("cancel", &Channel::Cancel, nb::arg("id"))
      .def("cancel_all", &Channel::CancelAll)
      .def_prop_ro("completion_fd", &Channel::CompletionFd)
      .def("close", &Channel::Close);
  m.def("has_field", &HasField, nb::arg("message"), nb::arg("number"));
  m.attr("GRPC_VERSION") = grpc::Version();
}
