#include "server/kserve_service.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/kserve_convert.h"
#include "proto/parse.h"
#include "server/build_info.h"
#include "server/pipeline.h"
#include "server/status.h"
#include "server/unary_call.h"

namespace kernelserve::server {
namespace {

// Answered with the ModelInferResponse's bytes (kserve::ToInferResponse writes them).
using ModelInferCall = UnaryCall<inference::ModelInferRequest, grpc::ByteBuffer>;

std::vector<std::string> ModelNames(const Executor& executor) {
  std::vector<std::string> names;
  for (const Kernel* kernel : executor.registry().kernels()) names.push_back(kernel->name());
  return names;
}

// `timeout_us` from now; time_point::max() (no deadline) for a timeout of a century or more,
// which the clock's arithmetic could not add.
std::chrono::system_clock::time_point DeadlineAfter(int64_t timeout_us) {
  constexpr int64_t kCenturyUs = int64_t{100} * 365 * 24 * 3600 * 1000000;
  if (timeout_us >= kCenturyUs) return std::chrono::system_clock::time_point::max();
  return std::chrono::system_clock::now() + std::chrono::microseconds(timeout_us);
}

}  // namespace

absl::StatusOr<const Kernel*> FindModel(const Executor& executor, std::string_view name,
                                        std::string_view version) {
  absl::StatusOr<const Kernel*> kernel = executor.registry().Find(name);
  // A kernel's "name@v1" form is the native API's; a model is named by the bare name.
  if (!kernel.ok() || (*kernel)->name() != name) {
    return absl::NotFoundError(absl::StrCat("unknown model '", Sv(name.substr(0, 64)),
                                            "'; the models are ",
                                            absl::StrJoin(ModelNames(executor), ", ")));
  }
  KS_RETURN_IF_ERROR(kserve::CheckVersion(name, version));
  return *kernel;
}

absl::Status PrepareInfer(const CallDeps& deps, const Caller& caller,
                          inference::ModelInferRequest* request,
                          const wire::RawBuffers* raw_buffers, CallRequest* call,
                          InferReply* reply) {
  reply->id = request->id();
  reply->model = request->model_name();
  KS_ASSIGN_OR_RETURN(const Kernel* kernel,
                      FindModel(*deps.executor, request->model_name(), request->model_version()));
  reply->schema = &kernel->schema();
  KS_ASSIGN_OR_RETURN(kserve::InferCall infer,
                      kserve::FromInferRequest(request, *reply->schema, raw_buffers));
  reply->outputs = std::move(infer.outputs);
  reply->output_regions = infer.output_regions;
  if (infer.timeout_us.has_value()) reply->deadline = DeadlineAfter(*infer.timeout_us);
  *call->request = std::move(infer.request);
  if (!infer.input_buffers.empty()) {
    if (call->buffers == nullptr) return absl::InternalError("input buffers without a place");
    for (auto& [name, buffer] : infer.input_buffers) {
      (*call->buffers)[&call->request->inputs().at(name)] = std::move(buffer);
    }
  }
  call->regions.inputs = std::move(infer.input_regions);
  call->regions.outputs = std::move(infer.output_regions);
  call->outputs = reply->outputs;
  if (std::optional<int> gpu =
          RegionsGpu(deps.shared_memory, caller, call->regions.inputs, call->regions.outputs)) {
    call->request->set_device(*gpu);  // a call runs where its CUDA regions are
  }
  return absl::OkStatus();
}

absl::StatusOr<kserve::WireMessage> AnswerInfer(v1::ExecuteResponse* answer,
                                                const InferReply& reply,
                                                const wire::TensorBuffers* buffers) {
  return kserve::ToInferResponse(answer, *reply.schema, reply.outputs, reply.id,
                                 reply.output_regions, buffers);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Answer(
    Context* context, const char* method, const std::function<absl::Status(const Caller&)>& body) {
  Reactor* reactor = context->DefaultReactor();
  absl::StatusOr<Admitted> admitted = Admit(deps_, *context);
  absl::Status status = admitted.status();
  if (status.ok()) status = RunGuarded([&] { return body(admitted->caller); });
  deps_.metrics->InferenceProtocolCall(method, absl::StatusCodeToString(status.code()));
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerLive(
    Context* context, const inference::ServerLiveRequest* /*request*/,
    inference::ServerLiveResponse* response) {
  return Answer(context, "ServerLive", [&](const Caller& /*caller*/) {
    response->set_live(true);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerReady(
    Context* context, const inference::ServerReadyRequest* /*request*/,
    inference::ServerReadyResponse* response) {
  return Answer(context, "ServerReady", [&](const Caller& /*caller*/) {
    response->set_ready(deps_.draining == nullptr || !deps_.draining->load());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelReady(
    Context* context, const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  return Answer(context, "ModelReady", [&](const Caller& /*caller*/) {
    // As Triton answers: a model or version the server does not have is not ready (OK,
    // ready false), not an error; is_model_ready() of Triton's clients returns False for it.
    const bool known = FindModel(*deps_.executor, request->name(), request->version()).ok();
    response->set_ready(known && (deps_.draining == nullptr || !deps_.draining->load()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ServerMetadata(
    Context* context, const inference::ServerMetadataRequest* /*request*/,
    inference::ServerMetadataResponse* response) {
  return Answer(context, "ServerMetadata", [&](const Caller& /*caller*/) {
    response->set_name("kernelserve");
    response->set_version(GetBuildInfo().version);
    // The extensions served in full.
    for (const char* extension : {"model_configuration", "parameters", "statistics"}) {
      response->add_extensions(extension);
    }
    if (deps_.shared_memory != nullptr && deps_.shared_memory->system()) {
      response->add_extensions("system_shared_memory");
    }
    if (deps_.shared_memory != nullptr && deps_.shared_memory->cuda()) {
      response->add_extensions("cuda_shared_memory");
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelMetadata(
    Context* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Answer(context, "ModelMetadata", [&](const Caller& /*caller*/) -> absl::Status {
    KS_ASSIGN_OR_RETURN(const Kernel* kernel,
                        FindModel(*deps_.executor, request->name(), request->version()));
    return kserve::ToModelMetadata(kernel->schema(), response);
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelConfig(
    Context* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Answer(context, "ModelConfig", [&](const Caller& /*caller*/) -> absl::Status {
    KS_ASSIGN_OR_RETURN(const Kernel* kernel,
                        FindModel(*deps_.executor, request->name(), request->version()));
    return kserve::ToModelConfig(kernel->schema(), response->mutable_config());
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelStatistics(
    Context* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Answer(context, "ModelStatistics", [&](const Caller& /*caller*/) -> absl::Status {
    std::vector<std::string> names;
    if (request->name().empty()) {
      names = ModelNames(*deps_.executor);
    } else {
      KS_ASSIGN_OR_RETURN(const Kernel* kernel,
                          FindModel(*deps_.executor, request->name(), request->version()));
      names.push_back(kernel->name());
    }
    for (const std::string& name : names) {
      *response->add_model_stats() =
          deps_.stats != nullptr ? deps_.stats->Get(name) : ModelStats().Get(name);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::RepositoryIndex(
    Context* context, const inference::RepositoryIndexRequest* /*request*/,
    inference::RepositoryIndexResponse* response) {
  return Answer(context, "RepositoryIndex", [&](const Caller& /*caller*/) {
    // Every kernel is loaded for the server's life: each is READY.
    for (const std::string& name : ModelNames(*deps_.executor)) {
      inference::RepositoryIndexResponse::ModelIndex* model = response->add_models();
      model->set_name(name);
      model->set_version(std::string(kserve::kModelVersion));
      model->set_state("READY");
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* InferenceServiceImpl::ModelInfer(Context* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  auto* call = new ModelInferCall(deps_.budget, deps_.metrics, context, request, response,
                                  /*record=*/true);
  Reactor* reactor = call->reactor();
  auto finish = [this](ModelInferCall* done, const absl::Status& status) {
    deps_.metrics->InferenceProtocolCall(
        "ModelInfer", absl::StatusCodeToString(done->tracker().Outcome(status).code()));
    done->Finish(status);
  };
  absl::Status status = RunGuarded([&]() -> absl::Status {
    KS_RETURN_IF_ERROR(AdmitAndParse(deps_, deps_, *call));
    v1::ExecuteRequest native;
    wire::TensorBuffers buffers;  // the raw inputs' parse buffers, under `native`'s tensors
    CallRequest parsed{.request = &native, .buffers = &buffers, .regions = {}, .outputs = {}};
    InferReply reply;
    KS_RETURN_IF_ERROR(PrepareInfer(deps_, call->tracker().caller(), &call->request(),
                                    &call->raw_input_buffers(), &parsed, &reply));
    call->raw_input_buffers().clear();  // the inputs hold them now
    KS_ASSIGN_OR_RETURN(PreparedCall prepared, Prepare(deps_, parsed, call->tracker()));
    const bool may_run_inline = MayRunInline(prepared);
    const int worker = prepared.plan.ordinal();
    const auto deadline = reply.deadline;
    return Dispatch(
        *deps_.pool, context, worker,
        [this, call, finish, reply = std::move(reply), prepared = std::move(prepared)](
            absl::Status status, int64_t queue_us) {
          v1::ExecuteResponse answer;
          wire::TensorBuffers outputs;  // outputs left in host buffers, sent from them
          status = Run(deps_, prepared, std::move(status), {queue_us, call->recv_us()},
                       call->tracker(), &answer, &outputs);
          if (status.ok()) {
            absl::StatusOr<kserve::WireMessage> bytes = AnswerInfer(&answer, reply, &outputs);
            status = bytes.status();
            if (status.ok()) call->response() = bytes->ToByteBuffer();
          }
          finish(call, status);
        },
        may_run_inline, deadline);
  });
  if (!status.ok()) finish(call, status);
  return reactor;
}

}  // namespace kernelserve::server
