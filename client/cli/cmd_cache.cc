// cache ls|get|put|rm.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/call_spec.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace kernelserve::cli {
namespace {

void PrintEntries(const std::vector<const v1::ConfigEntry*>& entries, std::ostream& out) {
  Table table({"kernel", "cache key", "device", "config", "origin", "measured", "tier", "host"});
  for (const v1::ConfigEntry* e : entries) {
    table.AddRow({e->kernel(), e->cache_key(), e->device_fingerprint(), ConfigString(e->config()),
                  e->origin(), e->measured_us() > 0 ? FormatMicros(e->measured_us()) : "-",
                  e->tier(), e->host()});
  }
  out << table.ToString();
}

absl::Status Show(const CommandContext& ctx, const v1::ListConfigsResponse& list,
                  const std::string& key_prefix) {
  std::vector<const v1::ConfigEntry*> entries;
  nlohmann::json json = nlohmann::json::array();
  for (const v1::ConfigEntry& e : list.entries()) {
    if (!absl::StartsWith(e.cache_key(), key_prefix)) continue;
    entries.push_back(&e);
    json.push_back(MessageJson(e));
  }
  if (!key_prefix.empty() && entries.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no cached config has a key starting with '", key_prefix, "'"));
  }
  if (ctx.json) {
    *ctx.out << json.dump(2) << "\n";
  } else {
    PrintEntries(entries, *ctx.out);
  }
  return absl::OkStatus();
}

absl::Status Put(const CommandContext& ctx) {
  Args args = *ctx.args;
  args.positional.erase(args.positional.begin());  // "put KERNEL"
  KS_ASSIGN_OR_RETURN(CallSpec spec, CallSpecFromArgs(args));
  if (!spec.config) {
    return absl::InvalidArgumentError("cache put needs --config KEY=VALUE,... to pin");
  }
  v1::PutConfigRequest request;
  KS_RETURN_IF_ERROR(FillRequest(spec, *ctx.client, /*with_data=*/false, &request));
  *request.mutable_config() = ToProto(*spec.config);
  KS_ASSIGN_OR_RETURN(v1::PutConfigResponse response, ctx.client->PutConfig(request));
  if (ctx.json) {
    *ctx.out << MessageJson(response).dump(2) << "\n";
  } else {
    *ctx.out << "pinned " << spec.config->DebugString() << "\ncache key: " << response.cache_key()
             << "\ndevice: " << response.device_fingerprint() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CmdCache(const CommandContext& ctx) {
  const std::vector<std::string>& pos = ctx.args->positional;
  const std::string verb = pos.size() > 1 ? pos[1] : "";
  auto arity = [&](size_t lo, size_t hi, const char* usage) -> absl::Status {
    if (pos.size() >= lo && pos.size() <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("usage: kernelserve cache ", usage));
  };
  if (verb == "ls") {
    KS_RETURN_IF_ERROR(arity(2, 3, "ls [KERNEL]"));
    KS_ASSIGN_OR_RETURN(v1::ListConfigsResponse list,
                        ctx.client->ListConfigs(pos.size() == 3 ? pos[2] : ""));
    return Show(ctx, list, "");
  }
  if (verb == "get") {
    KS_RETURN_IF_ERROR(arity(3, 3, "get CACHE_KEY (or a prefix of it)"));
    KS_ASSIGN_OR_RETURN(v1::ListConfigsResponse list, ctx.client->ListConfigs());
    return Show(ctx, list, pos[2]);
  }
  if (verb == "put") return Put(ctx);
  if (verb == "rm") {
    KS_RETURN_IF_ERROR(arity(3, 3, "rm CACHE_KEY [--fingerprint F]"));
    KS_RETURN_IF_ERROR(ctx.client->DeleteConfig(pos[2], ctx.args->Get("fingerprint")));
    if (ctx.json) {
      *ctx.out << nlohmann::json{{"deleted", pos[2]}}.dump() << "\n";
    } else {
      *ctx.out << "deleted " << pos[2] << "\n";
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cache: unknown verb '", verb, "': expected ls, get, put or rm"));
}

}  // namespace kernelserve::cli
