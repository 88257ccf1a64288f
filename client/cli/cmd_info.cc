// health, info, kernels.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace kernelserve::cli {
namespace {

std::string Bytes(int64_t bytes) {
  if (bytes <= 0) return "-";
  return absl::StrCat(bytes >> 20, " MiB");
}

// "x" or "cu_seqlens?" (a '?' marks an optional argument).
std::string ArgName(const std::string& name, bool required) { return required ? name : name + "?"; }

// "f32|f16|bf16".
std::string DTypes(const google::protobuf::RepeatedField<int>& dtypes) {
  std::vector<std::string> names;
  for (int dtype : dtypes) {
    absl::StatusOr<DType> d = FromProto(static_cast<v1::DType>(dtype), "dtype");
    names.push_back(d.ok() ? std::string(DTypeName(*d)) : absl::StrCat("dtype ", dtype));
  }
  return names.empty() ? "any" : absl::StrJoin(names, "|");
}

// "[B,S,D]"; "rank 2|3" when the schema gives no shape.
std::string InputShape(const v1::InputInfo& input) {
  if (input.shape_only()) return absl::StrCat(input.shape(), " (shape only)");
  if (!input.shape().empty()) return input.shape();
  if (input.ranks().empty()) return "-";
  return absl::StrCat("rank ", absl::StrJoin(input.ranks(), "|"));
}

// "int = 64", "bool = false", "float" (no default).
std::string ParamType(const v1::ParamInfo& param) {
  const v1::ParamValue& v = param.default_value();
  switch (v.value_case()) {
    case v1::ParamValue::kBoolValue:
      return absl::StrCat(param.type(), " = ", v.bool_value() ? "true" : "false");
    case v1::ParamValue::kInt64Value:
      return absl::StrCat(param.type(), " = ", v.int64_value());
    case v1::ParamValue::kDoubleValue:
      return absl::StrCat(param.type(), " = ", absl::StrFormat("%g", v.double_value()));
    case v1::ParamValue::kStringValue:
      return absl::StrCat(param.type(), " = '", v.string_value(), "'");
    case v1::ParamValue::VALUE_NOT_SET:
      break;
  }
  return param.type();
}

// "1..4096", ">= 0", "<= 1", or "-".
std::string ParamRange(const v1::ParamInfo& param) {
  if (param.has_min() && param.has_max()) {
    return absl::StrFormat("%g..%g", param.min(), param.max());
  }
  if (param.has_min()) return absl::StrFormat(">= %g", param.min());
  if (param.has_max()) return absl::StrFormat("<= %g", param.max());
  return "-";
}

// "0..1024" for an int config field, "wgmma|(empty)" for a choice.
std::string ConfigRange(const v1::ConfigFieldInfo& field) {
  if (field.kind() == "choice")
    return absl::StrCat(absl::StrJoin(field.choices(), "|"), "|(empty)");
  return absl::StrCat(field.min(), "..", field.max());
}

// One row per input, output and param: its name, kind, dtypes or type, shape or range; one per
// config field of each platform (kind "config PLATFORM"); then the kernel's VJP kernel or the
// forward it differentiates (kinds "vjp", "vjp of"). The first row names the kernel.
void AddKernelRows(const v1::KernelInfo& k, Table* table) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::InputInfo& in : k.input_schema()) {
    rows.push_back(
        {ArgName(in.name(), in.required()), "input", DTypes(in.dtypes()), InputShape(in)});
  }
  for (const v1::OutputInfo& out : k.output_schema()) {
    rows.push_back({out.name(), "output", out.dtype(), out.shape().empty() ? "-" : out.shape()});
  }
  for (const v1::ParamInfo& param : k.param_schema()) {
    rows.push_back({param.name(), "param", ParamType(param), ParamRange(param)});
  }
  for (const v1::PlatformConfigInfo& platform : k.config_schemas()) {
    for (const v1::ConfigFieldInfo& field : platform.fields()) {
      rows.push_back({field.name(), absl::StrCat("config ", platform.platform()), field.kind(),
                      ConfigRange(field)});
    }
  }
  if (!k.vjp().empty()) rows.push_back({k.vjp(), "vjp", "-", "-"});
  if (!k.vjp_of().empty()) rows.push_back({k.vjp_of(), "vjp of", "-", "-"});
  if (rows.empty()) rows.push_back({"-", "", "", ""});
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<std::string> row = {"", "", ""};
    if (i == 0) row = {k.name(), absl::StrCat(k.version()), absl::StrJoin(k.platforms(), ",")};
    row.insert(row.end(), rows[i].begin(), rows[i].end());
    table->AddRow(std::move(row));
  }
}

}  // namespace

absl::Status CmdHealth(const CommandContext& ctx) {
  if (ctx.args->positional.size() > 2) {
    return absl::InvalidArgumentError("health takes at most one service name");
  }
  const std::string service = ctx.args->positional.size() == 2 ? ctx.args->positional[1] : "";
  absl::StatusOr<HealthStatus> health = ctx.client->Health(service);
  if (absl::IsNotFound(health.status())) {  // grpc.health.v1: a service the server does not know
    return absl::NotFoundError(absl::StrCat("health: the server knows no service '", service, "' (",
                                            health.status().message(),
                                            "); leave SERVICE out for the whole server, or name ",
                                            v1::KernelService::service_full_name()));
  }
  KS_RETURN_IF_ERROR(health.status());
  const HealthStatus status = *health;
  const std::string name(HealthStatusName(status));
  if (ctx.json) {
    *ctx.out << nlohmann::json{{"service", service}, {"status", name}}.dump() << "\n";
  } else {
    *ctx.out << name << "\n";
  }
  if (status != HealthStatus::kServing) {
    return absl::UnavailableError(absl::StrCat("health of '", service, "': ", name));
  }
  return absl::OkStatus();
}

absl::Status CmdInfo(const CommandContext& ctx) {
  KS_ASSIGN_OR_RETURN(v1::ServerInfo info, ctx.client->ServerInfo());
  if (ctx.json) {
    *ctx.out << MessageJson(info).dump(2) << "\n";
    return absl::OkStatus();
  }
  Table summary({"field", "value"});
  summary.AddRow({"version", absl::StrCat(info.version(), " (git ", info.git(), ")")});
  summary.AddRow({"host", info.host()});
  summary.AddRow({"built with CUDA", info.built_with_cuda() ? info.cuda_version() : "no"});
  summary.AddRow({"cuDNN", info.cudnn_version().empty() ? "none" : info.cudnn_version()});
  summary.AddRow({"cache tiers", absl::StrJoin(info.cache_tiers(), " > ")});
  summary.AddRow({"store", info.store()});
  summary.AddRow({"policy", absl::StrCat("autotune=", info.allow_autotune(), " heuristics=",
                                         info.allow_heuristics(), " persist=", info.persist())});
  summary.AddRow(
      {"autotune budget", info.autotune_budget_ms() > 0
                              ? absl::FormatDuration(absl::Milliseconds(info.autotune_budget_ms()))
                              : std::string("no limit")});
  summary.AddRow({"max message", Bytes(info.max_message_bytes())});
  summary.AddRow({"max queue", absl::StrCat(info.max_queue())});
  summary.AddRow({"max in-flight", Bytes(info.max_inflight_bytes())});
  summary.AddRow({"shared memory", info.shared_memory().empty()
                                       ? std::string("off (or an older server)")
                                       : absl::StrJoin(info.shared_memory(), " ")});
  summary.AddRow({"resident tensors",
                  absl::StrCat(info.resident_tensors(), " holding ", info.resident_bytes(),
                               " bytes, of at most ", Bytes(info.max_resident_bytes()), "; ",
                               info.quota_resident_bytes() > 0 ? Bytes(info.quota_resident_bytes())
                                                               : std::string("no quota"),
                               " per identity")});
  summary.AddRow(
      {"resident ttl",
       absl::StrCat(absl::FormatDuration(absl::Seconds(info.resident_ttl_seconds())),
                    " idle (at most ",
                    absl::FormatDuration(absl::Seconds(info.max_resident_ttl_seconds())), ")")});
  summary.AddRow({"started", info.started_unix_ms() > 0
                                 ? absl::FormatTime("%Y-%m-%d %H:%M:%SZ",
                                                    absl::FromUnixMillis(info.started_unix_ms()),
                                                    absl::UTCTimeZone())
                                 : "-"});
  Table devices(
      {"device", "platform", "name", "fingerprint", "memory used", "memory total", "queue"});
  for (const v1::DeviceStatus& d : info.devices()) {
    devices.AddRow({d.device() < 0 ? "cpu" : absl::StrCat(d.device()), d.platform(), d.name(),
                    d.fingerprint(), Bytes(d.memory_used_bytes()), Bytes(d.memory_total_bytes()),
                    absl::StrCat(d.queue_depth())});
  }
  *ctx.out << summary.ToString() << "\n" << devices.ToString();
  return absl::OkStatus();
}

absl::Status CmdKernels(const CommandContext& ctx) {
  KS_ASSIGN_OR_RETURN(v1::ListKernelsResponse kernels, ctx.client->ListKernels());
  if (ctx.json) {
    *ctx.out << MessageJson(kernels).dump(2) << "\n";
    return absl::OkStatus();
  }
  Table table({"kernel", "version", "platforms", "arg", "kind", "dtype / type", "shape / range"});
  for (const v1::KernelInfo& k : kernels.kernels()) AddKernelRows(k, &table);
  *ctx.out << table.ToString();
  return absl::OkStatus();
}

}  // namespace kernelserve::cli
