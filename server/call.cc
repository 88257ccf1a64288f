#include "server/call.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"

namespace kernelserve::server {
absl::StatusOr<std::optional<absl::Duration>> TimeBudgetOf(int64_t time_budget_ms) {
  if (time_budget_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_budget_ms=", time_budget_ms,
                     ": expected >= 0 (milliseconds; 0 = the server's --autotune-budget)"));
  }
  if (time_budget_ms == 0) return std::nullopt;
  return absl::Milliseconds(time_budget_ms);
}

int64_t BudgetMillis(const AutotunePolicy& policy) {
  return policy.time_budget == absl::InfiniteDuration()
             ? 0
             : absl::ToInt64Milliseconds(policy.time_budget);
}

absl::StatusOr<CallPlan> PlanCall(const Executor& executor, const WorkerPool& pool,
                                  const CallParams& params, ExecuteOptions options) {
  options.platform = params.platform;
  options.device = params.device;
  options.policy = params.policy;
  options.place = [&pool](const std::vector<int>& gpus) { return pool.Place(gpus); };
  KS_ASSIGN_OR_RETURN(CallPlan plan,
                      executor.Plan(params.kernel, params.specs, params.params, options));
  if (!pool.Owns(plan.ordinal())) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", plan.ordinal(), " is not a GPU this server serves"));
  }
  return plan;
}

std::string DeviceLabel(int device) {
  return device < 0 ? std::string("cpu") : absl::StrCat("cuda:", device);
}

int64_t TensorBytes(const TensorMap& tensors) {
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) bytes += static_cast<int64_t>(tensor.nbytes());
  return bytes;
}

int64_t OutputBytes(const CallPlan& plan) { return AnsweredOutputBytes(plan, nullptr); }

int64_t AnsweredOutputBytes(const CallPlan& plan, const OutputSpans* spans,
                            const std::vector<std::string>& asked) {
  TensorSpecMap answered = plan.kernel->OutputSpecs(*plan.problem);
  std::erase_if(answered, [&](const auto& output) {
    const std::string& name = output.first;
    return (spans != nullptr && spans->contains(name)) ||
           (!asked.empty() && std::find(asked.begin(), asked.end(), name) == asked.end());
  });
  return SpecsBytes(answered);
}

absl::Status CheckAnswerFits(const ServerOptions& options, int64_t output_bytes,
                             std::string_view what, int64_t answers) {
  int64_t fields = 0;
  int64_t total = 0;
  if (__builtin_mul_overflow(answers, kAnswerFieldsBytes, &fields) ||
      __builtin_add_overflow(output_bytes, fields, &total)) {
    total = INT64_MAX;
  }
  if (total <= options.max_message_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      Sv(what), ": ", output_bytes, " bytes of outputs (and up to ", fields,
      " bytes of other fields) would pass --max-message-bytes=", options.max_message_bytes,
      ", the largest message the server sends; ask for smaller outputs or fewer items, or have "
      "the outputs written into a shared-memory region"));
}

void FillResponse(ExecuteResult result, v1::ExecuteResponse* response, wire::TensorBuffers* buffers,
                  const OutputSpans* spans) {
  for (auto& [name, tensor] : result.outputs) {
    v1::Tensor* proto = &(*response->mutable_outputs())[name];
    auto span = spans != nullptr ? spans->find(name) : OutputSpans::const_iterator();
    if (spans != nullptr && span != spans->end()) {
      // OutputSpansOf checked the room against the plan's output specs. An output of
      // OutputPlaces is there already.
      if (tensor.data() != span->second.data) {
        std::memcpy(span->second.data, tensor.data(),
                    std::min<size_t>(tensor.nbytes(), span->second.byte_size));
      }
      proto->set_dtype(ToProto(tensor.dtype()));
      for (int64_t d : tensor.shape()) proto->add_shape(d);
      continue;
    }
    if (buffers != nullptr) {
      PutTensor(std::move(tensor), proto, buffers);
    } else {
      PutTensor(std::move(tensor), proto);
    }
  }
  *response->mutable_config() = ToProto(result.config);
  response->set_config_source(ToProto(result.source));
  response->set_platform(std::string(PlatformName(result.platform)));
  response->set_device(result.device);
  response->set_device_fingerprint(std::move(result.device_fingerprint));
  response->set_cache_key(std::move(result.cache_key));
  ToProto(result.timings, response->mutable_timing());
  for (std::string& warning : result.warnings) response->add_warnings(std::move(warning));
}

void RecordInference(ModelStats* stats, const std::string& kernel, const absl::Status& status,
                     const v1::Timing& timing, double seconds, int64_t inferences) {
  if (stats != nullptr) stats->Record(kernel, status, timing, seconds, inferences);
}

void RecordSelection(Metrics& metrics, const std::string& kernel, ConfigSource source,
                     double select_seconds) {
  metrics.ConfigSelection(kernel, ConfigSourceName(source));
  if (source == ConfigSource::kAutotune) metrics.AutotuneRun(kernel, "ok", select_seconds);
}

absl::Status RunCall(const CallDeps& deps, const CallPlan& plan, const TensorMap& inputs,
                     v1::ExecuteResponse* response, wire::TensorBuffers* buffers,
                     const OutputSpans* spans, const CallRegions* regions) {
  const TensorMap places = spans != nullptr ? OutputPlaces(plan, *spans) : TensorMap();
  KS_ASSIGN_OR_RETURN(ExecuteResult result, deps.executor->Run(plan, inputs, places));
  const std::string& kernel = plan.kernel->name();
  deps.metrics->KernelRun(kernel, PlatformName(result.platform), DeviceLabel(result.device),
                          static_cast<double>(result.timings.kernel_us) * 1e-6);
  RecordSelection(*deps.metrics, kernel, result.source,
                  static_cast<double>(result.timings.select_us) * 1e-6);
  FillResponse(std::move(result), response, buffers, spans);
  // Last: FillResponse writes outputs into their regions.
  return regions != nullptr ? regions->CheckIntact() : absl::OkStatus();
}

}  // namespace kernelserve::server
