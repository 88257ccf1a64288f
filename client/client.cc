#include "client/client.h"

#include <climits>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/shared_memory.h"
#include "client/status_convert.h"
#include "core/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/security/credentials.h"
#include "proto/convert.h"
#include "proto/kserve_request_wire.h"

namespace kernelserve {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& what) {
  if (path.empty()) return std::string();
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat(what, " '", path, "' cannot be read"));
  }
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const ClientOptions& options) {
  if (!options.use_tls) return grpc::InsecureChannelCredentials();
  const TlsOptions& tls = options.tls;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS: a client certificate needs its key and a key needs its certificate (mTLS); got "
        "only one of them");
  }
  grpc::SslCredentialsOptions ssl;
  KS_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(tls.ca_file, "TLS CA file"));
  KS_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(tls.cert_file, "TLS certificate file"));
  KS_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(tls.key_file, "TLS key file"));
  return grpc::SslCredentials(ssl);
}

// Where `tensor` lies in one of `regions`; nullopt when in none.
std::optional<v1::TensorRef> FindRef(const Tensor& tensor,
                                     const std::vector<const SharedMemoryRegion*>& regions) {
  for (const SharedMemoryRegion* region : regions) {
    if (std::optional<v1::TensorRef> ref = region->RefOf(tensor)) return ref;
  }
  return std::nullopt;
}

// Names in `request` the resident tensors run.resident_outputs go into. InvalidArgument for an
// output also in run.outputs.
absl::Status PutResidentOutputs(const RunOptions& run, v1::ExecuteRequest* request) {
  for (const auto& [output, tensor] : run.resident_outputs) {
    if (run.outputs.count(output) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", output, "' is in both RunOptions::outputs and resident_outputs: name one"));
    }
    (*request->mutable_output_regions())[output].set_tensor(tensor);
  }
  return absl::OkStatus();
}

// Drops from `response` the outputs written into run.resident_outputs (dtype and shape only).
void DropResidentOutputs(const RunOptions& run, v1::ExecuteResponse* response) {
  for (const auto& [output, tensor] : run.resident_outputs) {
    response->mutable_outputs()->erase(output);
  }
}

// The contents of CreateTensor or WriteTensor: a reference where `tensor` lies in one of
// `regions`, else its bytes (moved). `with_shape` false sends dtype and bytes only.
void PutContents(Tensor tensor, const std::vector<const SharedMemoryRegion*>& regions,
                 bool with_shape, v1::Tensor* proto) {
  if (std::optional<v1::TensorRef> ref = FindRef(tensor, regions)) {
    proto->set_dtype(ToProto(tensor.dtype()));
    if (with_shape) proto->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
    *proto->mutable_ref() = *std::move(ref);
    return;
  }
  PutTensor(std::move(tensor), proto);
  if (!with_shape) proto->clear_shape();
}

// Names in `request` where run.outputs go. InvalidArgument for a view in none of run.regions.
absl::Status PutOutputRegions(const RunOptions& run, v1::ExecuteRequest* request) {
  KS_RETURN_IF_ERROR(PutResidentOutputs(run, request));
  for (const auto& [name, view] : run.outputs) {
    std::optional<v1::TensorRef> ref = FindRef(view, run.regions);
    if (!ref) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", name,
                       "': RunOptions::outputs takes views of a region in "
                       "RunOptions::regions (SharedMemoryRegion::View)"));
    }
    (*request->mutable_output_regions())[name] = *std::move(ref);
  }
  return absl::OkStatus();
}

// Takes the outputs the server wrote into run.outputs out of `response`: each becomes a view
// of its bytes, with the dtype and shape the server gives.
absl::StatusOr<TensorMap> TakeRegionOutputs(const RunOptions& run, v1::ExecuteResponse* response) {
  TensorMap outputs;
  if (run.outputs.empty() || response->status().code() != 0) return outputs;
  for (const auto& [name, view] : run.outputs) {
    auto found = response->mutable_outputs()->find(name);
    if (found == response->mutable_outputs()->end()) continue;
    const std::string what = absl::StrCat("output '", name, "'");
    KS_ASSIGN_OR_RETURN(TensorSpec spec, SpecFromProto(found->second, what));
    for (const SharedMemoryRegion* region : run.regions) {
      std::optional<v1::TensorRef> ref = region->RefOf(view);
      if (!ref) continue;
      KS_ASSIGN_OR_RETURN(outputs[name], region->View(ref->offset(), spec.dtype, spec.shape));
      break;
    }
    response->mutable_outputs()->erase(found);
  }
  return outputs;
}

// Drops from `response` the outputs `request` had written into regions (they carry no bytes).
void DropRegionOutputs(const v1::ExecuteRequest& request, v1::ExecuteResponse* response) {
  for (const auto& [name, ref] : request.output_regions()) response->mutable_outputs()->erase(name);
}

}  // namespace

absl::Status Client::PutInputs(TensorMap inputs, const RunOptions& run,
                               v1::ExecuteRequest* request) {
  for (const auto& [name, tensor_name] : run.resident_inputs) {
    auto given = inputs.find(name);
    if (given != inputs.end()) {
      if (given->second.nbytes() > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", name, "' comes from resident tensor '", tensor_name,
            "' (RunOptions::resident_inputs) and is also given a tensor: pass Tensor() for it"));
      }
      inputs.erase(given);
    }
    (*request->mutable_inputs())[name].mutable_ref()->set_tensor(tensor_name);
  }
  for (auto& [name, tensor] : inputs) {
    v1::Tensor* proto = &(*request->mutable_inputs())[name];
    if (std::optional<v1::TensorRef> ref = FindRef(tensor, run.regions)) {
      proto->set_dtype(ToProto(tensor.dtype()));
      proto->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
      *proto->mutable_ref() = *std::move(ref);
    } else {
      PutTensor(std::move(tensor), proto);
    }
  }
  return absl::OkStatus();
}

namespace {}  // namespace

std::optional<ConfigSource> SourceFromProto(v1::ConfigSource source) {
  switch (source) {
    case v1::CONFIG_SOURCE_OVERRIDE:
      return ConfigSource::kOverride;
    case v1::CONFIG_SOURCE_OVERLAY:
      return ConfigSource::kOverlay;
    case v1::CONFIG_SOURCE_MEMORY:
      return ConfigSource::kMemory;
    case v1::CONFIG_SOURCE_FILE:
      return ConfigSource::kFile;
    case v1::CONFIG_SOURCE_REDIS:
      return ConfigSource::kRedis;
    case v1::CONFIG_SOURCE_AUTOTUNE:
      return ConfigSource::kAutotune;
    case v1::CONFIG_SOURCE_HEURISTIC:
      return ConfigSource::kHeuristic;
    default:
      return std::nullopt;
  }
}

absl::StatusOr<RunResult> TakeRunResult(v1::ExecuteResponse* response) {
  KS_RETURN_IF_ERROR(FromRpcStatus(response->status()));
  RunResult result;
  for (auto& [name, proto] : *response->mutable_outputs()) {
    KS_ASSIGN_OR_RETURN(result.outputs[name],
                        TakeTensor(&proto, absl::StrCat("output '", name, "'")));
  }
  result.config = FromProto(response->config());
  result.source = SourceFromProto(response->config_source());
  result.platform = response->platform();
  result.device = response->device();
  result.device_fingerprint = response->device_fingerprint();
  result.cache_key = response->cache_key();
  const v1::Timing& t = response->timing();
  result.timings = {t.queue_us(), t.select_us(), t.h2d_us(),  t.kernel_us(),
                    t.d2h_us(),   t.total_us(),  t.recv_us(), t.launch_us()};
  result.request_id = response->request_id();
  result.warnings.assign(response->warnings().begin(), response->warnings().end());
  return result;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("client: target is empty: expected host:port");
  }
  if (options.max_message_bytes < 1 || options.max_message_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("client: max_message_bytes ",
                                                   options.max_message_bytes,
                                                   " is out of range: expected 1..", INT_MAX));
  }
  KS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                      MakeCredentials(options));
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.target, credentials, args);
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      authorization_(options_.token.empty() ? "" : absl::StrCat("Bearer ", options_.token)),
      channel_(std::move(channel)),
      stub_(v1::KernelService::NewStub(channel_)),
      v2_stub_(inference::GRPCInferenceService::NewStub(channel_)),
      execute_method_("/kernelserve.v1.KernelService/Execute",
                      grpc::internal::RpcMethod::NORMAL_RPC, channel_),
      execute_batch_method_("/kernelserve.v1.KernelService/ExecuteBatch",
                            grpc::internal::RpcMethod::NORMAL_RPC, channel_),
      model_infer_method_("/inference.GRPCInferenceService/ModelInfer",
                          grpc::internal::RpcMethod::NORMAL_RPC, channel_) {}

absl::StatusOr<inference::ModelInferResponse> Client::ModelInfer(
    const inference::ModelInferRequest& request) const {
  inference::ModelInferResponse response;
  KS_RETURN_IF_ERROR(ModelInfer(request, &response));
  return response;
}

absl::Status Client::ModelInfer(const inference::ModelInferRequest& request,
                                inference::ModelInferResponse* response) const {
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  return FromGrpcStatus(v2_stub_->ModelInfer(&context, request, response));
}

absl::Status Client::ModelInfer(std::shared_ptr<const inference::ModelInferRequest> request,
                                inference::ModelInferResponse* response) const {
  grpc::ByteBuffer buffer;
  KS_RETURN_IF_ERROR(FromGrpcStatus(wire::SerializeInferRequest(std::move(request), &buffer)));
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  return FromGrpcStatus(grpc::internal::BlockingUnaryCall(channel_.get(), model_infer_method_,
                                                          &context, buffer, response));
}

void Client::Prepare(grpc::ClientContext* context, absl::Duration deadline) const {
  if (deadline == absl::ZeroDuration()) deadline = options_.deadline;
  if (deadline != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  }
  if (!authorization_.empty()) context->AddMetadata("authorization", authorization_);
}

absl::StatusOr<RunResult> Client::Run(v1::ExecuteRequest& request, const RunOptions& run) const {
  if (run.config.has_value()) *request.mutable_config() = ToProto(*run.config);
  request.set_platform(run.platform);
  if (run.device.has_value()) request.set_device(*run.device);
  v1::TuningPolicy* policy = request.mutable_policy();
  if (run.policy.allow_autotune) policy->set_allow_autotune(*run.policy.allow_autotune);
  if (run.policy.allow_heuristics) policy->set_allow_heuristics(*run.policy.allow_heuristics);
  if (run.policy.persist) policy->set_persist(*run.policy.persist);
  request.set_request_id(run.request_id);
  KS_RETURN_IF_ERROR(PutOutputRegions(run, &request));
  // The request is ours: its tensor bytes go out without a copy (wire::SerializeShared).
  grpc::ByteBuffer buffer;
  KS_RETURN_IF_ERROR(FromGrpcStatus(wire::SerializeShared(
      std::make_shared<const v1::ExecuteRequest>(std::move(request)), &buffer)));
  grpc::ClientContext context;
  Prepare(&context, run.deadline);
  v1::ExecuteResponse response;
  KS_RETURN_IF_ERROR(FromGrpcStatus(grpc::internal::BlockingUnaryCall(
      channel_.get(), execute_method_, &context, buffer, &response)));
  DropResidentOutputs(run, &response);
  KS_ASSIGN_OR_RETURN(TensorMap in_regions, TakeRegionOutputs(run, &response));
  KS_ASSIGN_OR_RETURN(RunResult result, TakeRunResult(&response));
  for (auto& [name, view] : in_regions) result.outputs[name] = std::move(view);
  return result;
}

absl::StatusOr<RunResult> Client::Call(const std::string& kernel, TensorMap inputs,
                                       const Attributes& params, RunOptions run) const {
  v1::ExecuteRequest request;
  request.set_kernel(kernel);
  KS_RETURN_IF_ERROR(PutInputs(std::move(inputs), run, &request));
  for (const auto& [name, value] : params) (*request.mutable_parameters())[name] = ToProto(value);
  return Run(request, run);
}

absl::StatusOr<RunResult> Client::MeanPooling(Tensor x, MeanPoolingOptions options) const {
  v1::ExecuteRequest request;
  request.set_kernel("mean_pooling");
  TensorMap inputs;
  inputs["x"] = std::move(x);
  if (options.cu_seqlens) inputs["cu_seqlens"] = std::move(*options.cu_seqlens);
  if (options.mask) inputs["mask"] = std::move(*options.mask);
  KS_RETURN_IF_ERROR(PutInputs(std::move(inputs), options.run, &request));
  request.mutable_mean_pooling()->set_chunk_size(options.chunk_size);
  return Run(request, options.run);
}

absl::StatusOr<RunResult> Client::FlashAttention(Tensor q, Tensor k, Tensor v,
                                                 FlashAttentionOptions options) const {
  v1::ExecuteRequest request;
  request.set_kernel("flash_attention");
  TensorMap inputs = std::move(options.extra_inputs);
  inputs["q"] = std::move(q);
  inputs["k"] = std::move(k);
  inputs["v"] = std::move(v);
  KS_RETURN_IF_ERROR(PutInputs(std::move(inputs), options.run, &request));
  v1::FlashAttentionParams* params = request.mutable_flash_attention();
  params->set_causal(options.causal);
  params->set_softmax_scale(options.softmax_scale);
  if (options.window_left) params->set_window_left(*options.window_left);
  if (options.window_right) params->set_window_right(*options.window_right);
  params->set_logits_soft_cap(options.logits_soft_cap);
  params->set_return_lse(options.return_lse);
  return Run(request, options.run);
}

absl::StatusOr<RunResult> Client::Execute(const v1::ExecuteRequest& request) const {
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  v1::ExecuteResponse response;
  KS_RETURN_IF_ERROR(FromGrpcStatus(grpc::internal::BlockingUnaryCall(
      channel_.get(), execute_method_, &context, request, &response)));
  DropRegionOutputs(request, &response);
  return TakeRunResult(&response);
}

absl::StatusOr<RunResult> Client::Execute(std::shared_ptr<const v1::ExecuteRequest> request) const {
  grpc::ByteBuffer buffer;
  KS_RETURN_IF_ERROR(FromGrpcStatus(wire::SerializeShared(request, &buffer)));
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  v1::ExecuteResponse response;
  KS_RETURN_IF_ERROR(FromGrpcStatus(grpc::internal::BlockingUnaryCall(
      channel_.get(), execute_method_, &context, buffer, &response)));
  DropRegionOutputs(*request, &response);
  return TakeRunResult(&response);
}

absl::StatusOr<BatchResult> Client::ExecuteBatch(const v1::ExecuteBatchRequest& request) const {
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  v1::ExecuteBatchResponse response;
  KS_RETURN_IF_ERROR(FromGrpcStatus(grpc::internal::BlockingUnaryCall(
      channel_.get(), execute_batch_method_, &context, request, &response)));
  BatchResult result;
  for (v1::ExecuteResponse& item : *response.mutable_items()) {
    result.items.push_back(TakeRunResult(&item));
  }
  result.config = FromProto(response.config());
  result.source = SourceFromProto(response.config_source());
  return result;
}

template <typename Request, typename Response>
absl::StatusOr<Response> Client::Unary(UnaryMethod<Request, Response> method,
                                       const Request& request) const {
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  Response response;
  KS_RETURN_IF_ERROR(FromGrpcStatus((stub_.get()->*method)(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::AutotuneResponse> Client::Autotune(const v1::AutotuneRequest& request) const {
  return Unary(&v1::KernelService::Stub::Autotune, request);
}

absl::StatusOr<v1::AutotuneResponse> Client::Autotune(
    const v1::AutotuneRequest& request,
    const std::function<void(const v1::AutotuneProgress&)>& progress) const {
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  std::unique_ptr<grpc::ClientReader<v1::AutotuneProgress>> stream =
      stub_->AutotuneStream(&context, request);
  std::optional<v1::AutotuneResponse> result;
  for (v1::AutotuneProgress message; stream->Read(&message);) {
    if (message.has_result()) {
      result = std::move(*message.mutable_result());
    } else if (progress) {
      progress(message);
    }
  }
  const grpc::Status status = stream->Finish();
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && !result.has_value()) {
    return Autotune(request);  // a server from before AutotuneStream
  }
  KS_RETURN_IF_ERROR(FromGrpcStatus(status));
  if (!result.has_value()) {
    return absl::InternalError("AutotuneStream ended without its result");
  }
  return *std::move(result);
}

absl::StatusOr<v1::ListKernelsResponse> Client::ListKernels() const {
  return Unary(&v1::KernelService::Stub::ListKernels, v1::ListKernelsRequest());
}

absl::StatusOr<v1::ServerInfo> Client::ServerInfo() const {
  return Unary(&v1::KernelService::Stub::GetServerInfo, v1::GetServerInfoRequest());
}

absl::StatusOr<v1::ListConfigsResponse> Client::ListConfigs(const std::string& kernel) const {
  v1::ListConfigsRequest request;
  request.set_kernel(kernel);
  return Unary(&v1::KernelService::Stub::ListConfigs, request);
}

absl::StatusOr<v1::PutConfigResponse> Client::PutConfig(const v1::PutConfigRequest& request) const {
  return Unary(&v1::KernelService::Stub::PutConfig, request);
}

absl::Status Client::DeleteConfig(const std::string& cache_key,
                                  const std::string& device_fingerprint) const {
  v1::DeleteConfigRequest request;
  request.set_cache_key(cache_key);
  request.set_device_fingerprint(device_fingerprint);
  return Unary(&v1::KernelService::Stub::DeleteConfig, request).status();
}

absl::Status Client::RegisterSystemSharedMemory(const std::string& name, const std::string& key,
                                                uint64_t offset, uint64_t byte_size) const {
  v1::RegisterSystemSharedMemoryRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  return Unary(&v1::KernelService::Stub::RegisterSystemSharedMemory, request).status();
}

absl::Status Client::RegisterCudaSharedMemory(const std::string& name,
                                              const std::string& raw_handle, int device,
                                              uint64_t byte_size) const {
  v1::RegisterCudaSharedMemoryRequest request;
  request.set_name(name);
  request.set_raw_handle(raw_handle);
  request.set_device(device);
  request.set_byte_size(byte_size);
  return Unary(&v1::KernelService::Stub::RegisterCudaSharedMemory, request).status();
}

absl::Status Client::UnregisterSharedMemory(const std::string& name) const {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  return Unary(&v1::KernelService::Stub::UnregisterSharedMemory, request).status();
}

absl::StatusOr<v1::SharedMemoryStatusResponse> Client::SharedMemoryStatus(
    const std::string& name) const {
  v1::SharedMemoryStatusRequest request;
  request.set_name(name);
  return Unary(&v1::KernelService::Stub::SharedMemoryStatus, request);
}

absl::StatusOr<v1::CreateTensorResponse> Client::CreateTensor(
    const std::string& name, const TensorSpec& spec, const CreateTensorOptions& options) const {
  v1::CreateTensorRequest request;
  request.set_name(name);
  request.set_dtype(ToProto(spec.dtype));
  request.mutable_shape()->Assign(spec.shape.begin(), spec.shape.end());
  if (options.device.has_value()) request.set_device(*options.device);
  request.set_ttl_seconds(options.ttl_seconds);
  return Unary(&v1::KernelService::Stub::CreateTensor, request);
}

absl::StatusOr<v1::CreateTensorResponse> Client::CreateTensor(
    const std::string& name, Tensor contents, const CreateTensorOptions& options) const {
  v1::CreateTensorRequest request;
  request.set_name(name);
  request.set_dtype(ToProto(contents.dtype()));
  request.mutable_shape()->Assign(contents.shape().begin(), contents.shape().end());
  if (options.device.has_value()) request.set_device(*options.device);
  request.set_ttl_seconds(options.ttl_seconds);
  PutContents(std::move(contents), options.regions, /*with_shape=*/true,
              request.mutable_contents());
  return Unary(&v1::KernelService::Stub::CreateTensor, request);
}

absl::StatusOr<v1::ResidentTensorInfo> Client::WriteTensor(
    const std::string& name, Tensor contents, const WriteTensorOptions& options) const {
  v1::WriteTensorRequest request;
  request.set_name(name);
  if (options.byte_offset.has_value()) {
    request.set_byte_offset(*options.byte_offset);
  } else {
    request.set_row_offset(options.row);
  }
  PutContents(std::move(contents), options.regions,
              /*with_shape=*/!options.byte_offset.has_value(), request.mutable_contents());
  KS_ASSIGN_OR_RETURN(v1::WriteTensorResponse response,
                      Unary(&v1::KernelService::Stub::WriteTensor, request));
  return std::move(*response.mutable_tensor());
}

absl::StatusOr<Tensor> Client::ReadTensor(const std::string& name, int64_t row,
                                          std::optional<int64_t> rows) const {
  v1::ReadTensorRequest request;
  request.set_name(name);
  request.set_row_offset(row);
  if (rows.has_value()) request.set_rows(*rows);
  KS_ASSIGN_OR_RETURN(v1::ReadTensorResponse response,
                      Unary(&v1::KernelService::Stub::ReadTensor, request));
  return TakeTensor(response.mutable_tensor(), absl::StrCat("resident tensor '", name, "'"));
}

absl::StatusOr<int> Client::DeleteTensor(const std::string& name, const std::string& owner) const {
  v1::DeleteTensorRequest request;
  request.set_name(name);
  request.set_owner(owner);
  KS_ASSIGN_OR_RETURN(v1::DeleteTensorResponse response,
                      Unary(&v1::KernelService::Stub::DeleteTensor, request));
  return response.deleted();
}

absl::StatusOr<v1::ListTensorsResponse> Client::ListTensors(const std::string& name,
                                                            const std::string& owner) const {
  v1::ListTensorsRequest request;
  request.set_name(name);
  request.set_owner(owner);
  return Unary(&v1::KernelService::Stub::ListTensors, request);
}

}  // namespace kernelserve
