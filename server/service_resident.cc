// The service's resident-tensor calls over the server's ResidentTensors: they answer on gRPC's
// thread like the shared-memory calls. Each acts on the caller's own tensors unless an admin
// names another owner (List, Delete).
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"
#include "server/service.h"

namespace kernelserve::server {
namespace {

absl::Status NoRegistry() {
  return absl::UnimplementedError("this server keeps no resident tensors");
}

void ToProto(const ResidentTensors& registry, const ResidentTensor& tensor,
             v1::ResidentTensorInfo* out) {
  out->set_name(tensor.name());
  out->set_dtype(ToProto(tensor.spec().dtype));
  for (int64_t d : tensor.spec().shape) out->add_shape(d);
  out->set_device(tensor.device());
  out->set_byte_size(tensor.byte_size());
  out->set_owner(tensor.owner());
  out->set_created_unix_ms(absl::ToUnixMillis(tensor.created()));
  out->set_last_used_unix_ms(absl::ToUnixMillis(registry.LastUsed(tensor)));
  out->set_calls(tensor.calls());
  out->set_ttl_seconds(static_cast<uint32_t>(absl::ToInt64Seconds(tensor.ttl())));
}

// The bytes a create or write brings (its contents: inline data, the pool buffer the data was
// parsed into, or a span of one of the caller's regions), held while they are copied. A value
// type.
struct Contents {
  const char* data = nullptr;
  uint64_t size = 0;
  bool on_gpu = false;  // a CUDA region's bytes
  bool given = false;   // false: the message brings none
  RegionSpan span;      // holds a region's mapping
};

absl::StatusOr<Contents> ContentsOf(const SharedMemoryRegistry* regions, const Caller& caller,
                                    const v1::Tensor& contents, const wire::TensorBuffers& buffers,
                                    const std::string& what) {
  Contents out;
  if (contents.has_ref()) {
    const v1::TensorRef& ref = contents.ref();
    if (!contents.data().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data and ref both set; send the bytes one way"));
    }
    if (!ref.tensor().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what,
          ": contents from another resident tensor are not taken; name a shared-memory "
          "region (ref.region) or send the data"));
    }
    if (regions == nullptr) return absl::UnimplementedError("this server keeps no regions");
    KS_ASSIGN_OR_RETURN(out.span,
                        regions->Span(caller, ref.region(), ref.offset(), ref.byte_size(), what));
    out.data = out.span.data;
    out.size = out.span.byte_size;
    out.on_gpu = out.span.region->device() >= 0;
    out.given = true;
    return out;
  }
  if (auto buffer = buffers.find(&contents); buffer != buffers.end() && buffer->second) {
    out.data = static_cast<const char*>(buffer->second->data());
    out.size = buffer->second->size();
  } else {
    out.data = contents.data().data();
    out.size = contents.data().size();
  }
  out.given = out.size > 0;
  return out;
}

// InvalidArgument naming `what` when `contents` states a dtype other than `dtype`.
absl::Status CheckDType(const v1::Tensor& contents, DType dtype, const std::string& what) {
  if (contents.dtype() == v1::DTYPE_UNSPECIFIED) return absl::OkStatus();
  KS_ASSIGN_OR_RETURN(const DType stated, FromProto(contents.dtype(), what));
  if (stated == dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": contents are ", Sv(DTypeName(stated)),
                                                 "; the tensor is ", Sv(DTypeName(dtype))));
}

// Sets a Timing field to `elapsed` in microseconds.
void SetMicros(absl::Duration elapsed, v1::Timing* timing, void (v1::Timing::*set)(int64_t)) {
  (timing->*set)(absl::ToInt64Microseconds(elapsed));
}

// The deadline of a call's waits for a lease.
absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto until = context.deadline();
  return until == std::chrono::system_clock::time_point::max() ? absl::InfiniteFuture()
                                                               : absl::FromChrono(until);
}

absl::Status Take(ResidentLease& lease, const grpc::CallbackServerContext& context) {
  if (lease.Acquire(DeadlineOf(context))) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("the call's deadline passed while calls held resident tensor ", lease.Names()));
}

// The bytes of one row (of dimension 0) of `spec`: all of them for a scalar.
int64_t RowBytes(const TensorSpec& spec, int64_t byte_size) {
  if (spec.shape.empty() || spec.shape[0] == 0) return byte_size;
  return byte_size / spec.shape[0];
}

// The device a create that names none goes to: the least busy GPU, the host without GPUs.
int PlaceTensor(const ServiceDeps& deps) {
  std::vector<int> gpus;
  for (const DeviceInfo& gpu : deps.executor->gpus()) {
    if (deps.pool->Owns(gpu.ordinal)) gpus.push_back(gpu.ordinal);
  }
  if (gpus.empty() || deps.resident->gpu() == nullptr) return -1;
  return deps.pool->Place(gpus);
}

absl::Status CheckDevice(const ServiceDeps& deps, int device) {
  if (device == -1 || (device >= 0 && deps.pool->Owns(device) && deps.resident->gpu() != nullptr)) {
    return absl::OkStatus();
  }
  std::vector<int> gpus;
  for (int owned : deps.pool->devices()) {
    if (owned >= 0) gpus.push_back(owned);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "device ", device, ": expected -1 (host memory)",
      gpus.empty() ? std::string(" (this server has no GPUs)")
                   : absl::StrCat(" or a GPU this server serves: ", absl::StrJoin(gpus, ", "))));
}

}  // namespace

grpc::ServerUnaryReactor* KernelServiceImpl::CreateTensor(grpc::CallbackServerContext* context,
                                                          const Raw* raw_request,
                                                          Raw* raw_response) {
  using Call = UnaryCall<v1::CreateTensorRequest, v1::CreateTensorResponse>;
  return Unary<v1::CreateTensorRequest, v1::CreateTensorResponse>(
      context, raw_request, raw_response, [this](Call& call) -> absl::Status {
        if (deps_.resident == nullptr) return NoRegistry();
        const v1::CreateTensorRequest& request = call.request();
        const Caller& caller = call.tracker().caller();
        const std::string what = absl::StrCat("tensor '", request.name(), "'");
        ResidentCreate create;
        create.name = request.name();
        KS_ASSIGN_OR_RETURN(create.spec.dtype, FromProto(request.dtype(), what + ": dtype"));
        create.spec.shape.assign(request.shape().begin(), request.shape().end());
        create.any_device = !request.has_device();
        create.device = request.has_device() ? request.device() : PlaceTensor(deps_);
        KS_RETURN_IF_ERROR(CheckDevice(deps_, create.device));
        create.ttl = absl::Seconds(request.ttl_seconds());
        KS_ASSIGN_OR_RETURN(Contents contents,
                            ContentsOf(deps_.shared_memory, caller, request.contents(),
                                       call.request_buffers(), what + ": contents"));
        KS_RETURN_IF_ERROR(CheckDType(request.contents(), create.spec.dtype, what));
        if (request.contents().shape_size() > 0 &&
            !std::equal(request.contents().shape().begin(), request.contents().shape().end(),
                        create.spec.shape.begin(), create.spec.shape.end())) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": contents' shape is not the tensor's shape"));
        }
        const int64_t bytes = SpecBytes(create.spec).value_or(-1);
        if (contents.given && static_cast<int64_t>(contents.size) != bytes) {
          return absl::InvalidArgumentError(absl::StrCat(what, ": contents hold ", contents.size,
                                                         " bytes; ", create.spec.DebugString(),
                                                         " is ", bytes));
        }
        const absl::Time started = absl::Now();
        bool created = false;
        KS_ASSIGN_OR_RETURN(std::shared_ptr<ResidentTensor> tensor,
                            deps_.resident->Create(caller, create, &created));
        if (created) deps_.metrics->ResidentCreated();
        if (created && contents.given) {
          ResidentLease lease(deps_.resident);
          lease.Add(tensor, /*write=*/true);
          absl::Status copied = Take(lease, *call.context());
          const absl::Time copying = absl::Now();
          if (copied.ok()) {
            copied =
                deps_.resident->CopyIn(*tensor, 0, contents.data, contents.size, contents.on_gpu);
          }
          SetMicros(absl::Now() - copying, call.response().mutable_timing(),
                    &v1::Timing::set_h2d_us);
          if (!copied.ok()) {
            (void)deps_.resident->Delete(caller, "", create.name);  // not left half made
            return copied;
          }
        }
        ToProto(*deps_.resident, *tensor, call.response().mutable_tensor());
        call.response().set_created(created);
        call.response().mutable_timing()->set_recv_us(call.recv_us());
        SetMicros(absl::Now() - started, call.response().mutable_timing(),
                  &v1::Timing::set_total_us);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::WriteTensor(grpc::CallbackServerContext* context,
                                                         const Raw* raw_request,
                                                         Raw* raw_response) {
  using Call = UnaryCall<v1::WriteTensorRequest, v1::WriteTensorResponse>;
  return Unary<v1::WriteTensorRequest, v1::WriteTensorResponse>(
      context, raw_request, raw_response, [this](Call& call) -> absl::Status {
        if (deps_.resident == nullptr) return NoRegistry();
        const v1::WriteTensorRequest& request = call.request();
        const Caller& caller = call.tracker().caller();
        KS_ASSIGN_OR_RETURN(std::shared_ptr<ResidentTensor> tensor,
                            deps_.resident->Find(caller, request.name()));
        const std::string what = absl::StrCat("tensor '", request.name(), "'");
        KS_RETURN_IF_ERROR(CheckDType(request.contents(), tensor->spec().dtype, what));
        KS_ASSIGN_OR_RETURN(Contents contents,
                            ContentsOf(deps_.shared_memory, caller, request.contents(),
                                       call.request_buffers(), what + ": contents"));
        const auto size = static_cast<int64_t>(tensor->byte_size());
        const int64_t row = RowBytes(tensor->spec(), size);
        int64_t offset = 0;
        if (request.has_byte_offset()) {
          if (request.row_offset() != 0) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": row_offset and byte_offset both set; set one"));
          }
          offset = request.byte_offset() > static_cast<uint64_t>(size)
                       ? size + 1
                       : static_cast<int64_t>(request.byte_offset());
        } else {
          if (request.row_offset() < 0 || static_cast<int64_t>(contents.size) % row != 0) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": row_offset ", request.row_offset(), " with ", contents.size,
                             " bytes: expected row_offset >= 0 and whole rows of ", row, " bytes"));
          }
          offset = request.row_offset() > size / row ? size + 1 : request.row_offset() * row;
        }
        if (!contents.given || offset > size ||
            static_cast<int64_t>(contents.size) > size - offset) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": ", contents.size, " bytes at byte ", offset, " do not fit its ",
                           size, " bytes (", tensor->spec().DebugString(), ")",
                           contents.given ? "" : "; send the bytes to write in contents"));
        }
        const absl::Time started = absl::Now();
        ResidentLease lease(deps_.resident);
        lease.Add(tensor, /*write=*/true);
        KS_RETURN_IF_ERROR(Take(lease, *call.context()));
        const absl::Time copying = absl::Now();
        KS_RETURN_IF_ERROR(deps_.resident->CopyIn(*tensor, static_cast<uint64_t>(offset),
                                                  contents.data, contents.size, contents.on_gpu));
        v1::Timing* timing = call.response().mutable_timing();
        SetMicros(absl::Now() - copying, timing, &v1::Timing::set_h2d_us);
        ToProto(*deps_.resident, *tensor, call.response().mutable_tensor());
        timing->set_recv_us(call.recv_us());
        SetMicros(absl::Now() - started, timing, &v1::Timing::set_total_us);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::ReadTensor(grpc::CallbackServerContext* context,
                                                        const Raw* raw_request, Raw* raw_response) {
  using Call = UnaryCall<v1::ReadTensorRequest, v1::ReadTensorResponse>;
  return Unary<v1::ReadTensorRequest, v1::ReadTensorResponse>(
      context, raw_request, raw_response, [this](Call& call) -> absl::Status {
        if (deps_.resident == nullptr) return NoRegistry();
        const v1::ReadTensorRequest& request = call.request();
        KS_ASSIGN_OR_RETURN(std::shared_ptr<ResidentTensor> tensor,
                            deps_.resident->Find(call.tracker().caller(), request.name()));
        const std::string what = absl::StrCat("tensor '", request.name(), "'");
        const TensorSpec& spec = tensor->spec();
        const int64_t rows_in = spec.shape.empty() ? 1 : spec.shape[0];
        const int64_t first = request.row_offset();
        const int64_t rows = request.has_rows() ? request.rows() : rows_in - first;
        if (first < 0 || rows < 0 || first > rows_in || rows > rows_in - first) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": rows [", first, ", ", first + rows, ") are not within its ",
                           rows_in, " rows (", spec.DebugString(), ")"));
        }
        const int64_t row = RowBytes(spec, static_cast<int64_t>(tensor->byte_size()));
        const int64_t bytes = rows * row;
        KS_RETURN_IF_ERROR(CheckAnswerFits(*deps_.options, bytes, "the read", 1));
        KS_RETURN_IF_ERROR(call.tracker().Hold(bytes, "the read"));
        ResidentLease lease(deps_.resident);
        lease.Add(tensor, /*write=*/false);
        KS_RETURN_IF_ERROR(Take(lease, *call.context()));
        v1::Tensor* out = call.response().mutable_tensor();
        std::string* data = out->mutable_data();
        data->resize(static_cast<size_t>(bytes));
        KS_RETURN_IF_ERROR(deps_.resident->CopyOut(*tensor, static_cast<uint64_t>(first * row),
                                                   data->data(), data->size()));
        out->set_dtype(ToProto(spec.dtype));
        if (!spec.shape.empty()) {
          out->add_shape(rows);
          for (size_t d = 1; d < spec.shape.size(); ++d) out->add_shape(spec.shape[d]);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::DeleteTensor(grpc::CallbackServerContext* context,
                                                          const Raw* raw_request,
                                                          Raw* raw_response) {
  using Request = v1::DeleteTensorRequest;
  using Response = v1::DeleteTensorResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [this](const Caller& caller, const Request& request, Response* response) -> absl::Status {
        if (deps_.resident == nullptr) return NoRegistry();
        KS_ASSIGN_OR_RETURN(const int deleted,
                            deps_.resident->Delete(caller, request.owner(), request.name()));
        response->set_deleted(deleted);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KernelServiceImpl::ListTensors(grpc::CallbackServerContext* context,
                                                         const Raw* raw_request,
                                                         Raw* raw_response) {
  using Request = v1::ListTensorsRequest;
  using Response = v1::ListTensorsResponse;
  return Admin<Request, Response>(
      context, raw_request, raw_response,
      [this](const Caller& caller, const Request& request, Response* response) -> absl::Status {
        if (deps_.resident == nullptr) return NoRegistry();
        KS_ASSIGN_OR_RETURN(auto tensors,
                            deps_.resident->List(caller, request.owner(), request.name()));
        for (const auto& tensor : tensors) {
          ToProto(*deps_.resident, *tensor, response->add_tensors());
        }
        response->set_server_started_unix_ms(absl::ToUnixMillis(deps_.started));
        response->set_resident_bytes(static_cast<uint64_t>(deps_.resident->bytes()));
        response->set_max_resident_bytes(
            static_cast<uint64_t>(deps_.resident->options().max_bytes));
        response->set_quota_bytes(static_cast<uint64_t>(deps_.resident->options().quota_bytes));
        response->set_owner_bytes(
            static_cast<uint64_t>(deps_.resident->OwnerBytes(caller.identity)));
        return absl::OkStatus();
      });
}

}  // namespace kernelserve::server
