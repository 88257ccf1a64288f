// health, info, kernels.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

std::string Bytes(int64_t bytes) {
  if (bytes <= 0) return "-";
  return absl::StrCat(bytes >> 20, " MiB");
}

// "x, cu_seqlens?" (a '?' marks optional args).
std::string ArgList(const google::protobuf::RepeatedPtrField<v1::ArgInfo>& args) {
  std::vector<std::string> names;
  for (const v1::ArgInfo& arg : args) names.push_back(arg.name() + (arg.required() ? "" : "?"));
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status CmdHealth(const CommandContext& ctx) {
  if (ctx.args->positional.size() > 2) {
    return absl::InvalidArgumentError("health takes at most one service name");
  }
  const std::string service = ctx.args->positional.size() == 2 ? ctx.args->positional[1] : "";
  KS_ASSIGN_OR_RETURN(HealthStatus status, ctx.client->Health(service));
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
  summary.AddRow({"cache tiers", absl::StrJoin(info.cache_tiers(), " > ")});
  summary.AddRow({"store", info.store()});
  summary.AddRow({"policy", absl::StrCat("autotune=", info.allow_autotune(), " heuristics=",
                                         info.allow_heuristics(), " persist=", info.persist())});
  summary.AddRow({"max message", Bytes(info.max_message_bytes())});
  summary.AddRow({"max queue", absl::StrCat(info.max_queue())});
  summary.AddRow({"max in-flight", Bytes(info.max_inflight_bytes())});
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
  Table table({"kernel", "version", "platforms", "inputs", "outputs", "params"});
  for (const v1::KernelInfo& k : kernels.kernels()) {
    table.AddRow({k.name(), absl::StrCat(k.version()), absl::StrJoin(k.platforms(), ","),
                  ArgList(k.inputs()), ArgList(k.outputs()), ArgList(k.params())});
  }
  *ctx.out << table.ToString();
  return absl::OkStatus();
}

}  // namespace kernelserve::cli
