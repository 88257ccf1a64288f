// run and tune.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/auto_shm.h"
#include "client/cli/call_spec.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "client/cli/npy.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace kernelserve::cli {
namespace {

absl::Status NeedInputs(const CallSpec& spec, const std::string& command) {
  if (!spec.shapes.empty() || !spec.values.empty() || !spec.resident_inputs.empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(command, " ", spec.kernel,
                   ": no inputs: give --shape NAME=DTYPE:DIMS, --input NAME=FILE,"
                   " --values NAME=DTYPE:V,... or --tensor NAME=@TENSOR"));
}

// Writes every output to DIR/NAME.npy; returns NAME -> path.
absl::StatusOr<std::map<std::string, std::string>> WriteOutputs(const TensorMap& outputs,
                                                                const std::string& dir,
                                                                std::ostream& err) {
  std::map<std::string, std::string> files;
  if (dir.empty()) return files;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("--output-dir '", dir, "': ", error.message()));
  }
  for (const auto& [name, tensor] : outputs) {
    const std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
    KS_RETURN_IF_ERROR(npy::Write(path, tensor));
    if (std::string note = npy::BitsNote(path, tensor.dtype()); !note.empty()) err << note;
    files[name] = path;
  }
  return files;
}

nlohmann::json TimingsJson(const ServerTimings& t) {
  return {{"recv_us", t.recv_us}, {"queue_us", t.queue_us},   {"select_us", t.select_us},
          {"h2d_us", t.h2d_us},   {"launch_us", t.launch_us}, {"kernel_us", t.kernel_us},
          {"d2h_us", t.d2h_us},   {"total_us", t.total_us}};
}

void PrintRunResult(const RunResult& r, const std::map<std::string, std::string>& files,
                    std::ostream& out) {
  Table outputs({"output", "dtype", "shape", "min", "max", "mean", "file"});
  for (const auto& [name, tensor] : r.outputs) {
    const nlohmann::json s = TensorSummary(tensor);
    auto stat = [&](const char* key) {
      return s.contains(key) ? absl::StrFormat("%.6g", s[key].get<double>()) : "-";
    };
    outputs.AddRow({name, std::string(DTypeName(tensor.dtype())), ShapeString(tensor.shape()),
                    stat("min"), stat("max"), stat("mean"),
                    files.count(name) ? files.at(name) : "-"});
  }
  Table meta({"config", "source", "platform", "device", "cache key"});
  meta.AddRow({ConfigString(ToProto(r.config)),
               r.source ? std::string(ConfigSourceName(*r.source)) : "unspecified", r.platform,
               r.device < 0 ? "cpu" : absl::StrCat(r.device), r.cache_key});
  const ServerTimings& t = r.timings;
  Table timings({"recv", "queue", "select", "h2d", "launch", "kernel", "d2h", "total"});
  timings.AddRow({FormatMicros(t.recv_us), FormatMicros(t.queue_us), FormatMicros(t.select_us),
                  FormatMicros(t.h2d_us), FormatMicros(t.launch_us), FormatMicros(t.kernel_us),
                  FormatMicros(t.d2h_us), FormatMicros(t.total_us)});
  out << outputs.ToString() << "\n" << meta.ToString() << "\n" << timings.ToString();
  for (const std::string& w : r.warnings) out << "warning: " << w << "\n";
}

}  // namespace

absl::Status CmdRun(const CommandContext& ctx) {
  KS_ASSIGN_OR_RETURN(const SharedMemoryMode mode,
                      SharedMemoryModeFromArgs(*ctx.args, /*cuda_allowed=*/false));
  KS_ASSIGN_OR_RETURN(CallSpec spec, CallSpecFromArgs(*ctx.args));
  KS_RETURN_IF_ERROR(NeedInputs(spec, "run"));
  v1::ExecuteRequest request;
  KS_RETURN_IF_ERROR(FillRequest(spec, *ctx.client, /*with_data=*/true, &request));
  PutResident(spec, &request);
  if (spec.config) *request.mutable_config() = ToProto(*spec.config);
  KS_ASSIGN_OR_RETURN(bool autotune, ctx.args->GetBool("autotune"));
  if (autotune) request.mutable_policy()->set_allow_autotune(true);
  // The inputs' region, when they go through one: registered until this returns (the outputs
  // come back in the answer, so nothing read after the call views it).
  std::unique_ptr<SharedMemoryRegion> region;
  if (mode == SharedMemoryMode::kSystem ||
      (mode == SharedMemoryMode::kAuto &&
       AutoWantsSharedMemory(*ctx.client, ctx.target, request))) {
    absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> moved =
        MoveInputsIntoSharedMemory(*ctx.client, absl::StrCat("run-", getpid()), &request);
    if (moved.ok()) {
      region = std::move(*moved);
    } else if (mode == SharedMemoryMode::kAuto) {
      NoteSharedMemoryFallback(moved.status(), *ctx.err);
    } else {
      return moved.status();
    }
  }
  KS_ASSIGN_OR_RETURN(RunResult result, ctx.client->Execute(request));
  KS_ASSIGN_OR_RETURN(auto files,
                      WriteOutputs(result.outputs, ctx.args->Get("output-dir"), *ctx.err));
  if (!ctx.json) {
    PrintRunResult(result, files, *ctx.out);
    for (const auto& [output, tensor] : spec.resident_outputs) {
      *ctx.out << "output " << output << " is in resident tensor " << tensor
               << " (kernelserve tensor read " << tensor << ")\n";
    }
    return absl::OkStatus();
  }
  nlohmann::json outputs = nlohmann::json::object();
  for (const auto& [name, tensor] : result.outputs) {
    outputs[name] = TensorSummary(tensor);
    if (files.count(name)) outputs[name]["file"] = files.at(name);
  }
  for (const auto& [output, tensor] : spec.resident_outputs) {
    outputs[output] = {{"resident_tensor", tensor}};
  }
  const nlohmann::json j = {
      {"kernel", spec.kernel},
      {"outputs", outputs},
      {"config", MessageJson(ToProto(result.config))},
      {"source", result.source ? std::string(ConfigSourceName(*result.source)) : ""},
      {"platform", result.platform},
      {"device", result.device},
      {"device_fingerprint", result.device_fingerprint},
      {"cache_key", result.cache_key},
      {"timings", TimingsJson(result.timings)},
      {"warnings", result.warnings},
      {"shared_memory", region != nullptr ? "system" : "none"}};
  *ctx.out << j.dump(2) << "\n";
  return absl::OkStatus();
}

absl::Status CmdTune(const CommandContext& ctx) {
  KS_ASSIGN_OR_RETURN(CallSpec spec, CallSpecFromArgs(*ctx.args));
  KS_RETURN_IF_ERROR(NeedInputs(spec, "tune"));
  KS_ASSIGN_OR_RETURN(const absl::Duration budget,
                      ctx.args->GetDuration("budget", absl::ZeroDuration()));
  v1::AutotuneRequest request;
  KS_RETURN_IF_ERROR(FillRequest(spec, *ctx.client, /*with_data=*/false, &request));
  request.set_time_budget_ms(TimeBudgetMillis(budget));
  absl::StatusOr<v1::AutotuneResponse> tuned;
  if (ctx.err_is_tty) {
    // One line on the terminal, redrawn as candidates are timed, then cleared.
    tuned = ctx.client->Autotune(request, [&ctx](const v1::AutotuneProgress& progress) {
      *ctx.err << "\r" << TuneProgressLine(progress) << "\x1b[K" << std::flush;
    });
    *ctx.err << "\r\x1b[K" << std::flush;
  } else {
    tuned = ctx.client->Autotune(request);
  }
  KS_ASSIGN_OR_RETURN(v1::AutotuneResponse response, std::move(tuned));
  if (ctx.json) {
    *ctx.out << MessageJson(response).dump(2) << "\n";
    return absl::OkStatus();
  }
  std::vector<const v1::CandidateResult*> candidates;
  for (const v1::CandidateResult& c : response.candidates()) candidates.push_back(&c);
  // Timed candidates fastest first, then the failed ones.
  std::stable_sort(candidates.begin(), candidates.end(), [](auto* a, auto* b) {
    const bool a_ok = a->status().code() == 0, b_ok = b->status().code() == 0;
    if (a_ok != b_ok) return a_ok;
    return a_ok && a->median_us() < b->median_us();
  });
  Table table({"#", "config", "median", "status"});
  for (size_t i = 0; i < candidates.size(); ++i) {
    const v1::CandidateResult& c = *candidates[i];
    const bool ok = c.status().code() == 0;
    table.AddRow(
        {absl::StrCat(i + 1), ConfigString(c.config()), ok ? FormatMicros(c.median_us()) : "-",
         ok ? "ok"
            : absl::StrCat(
                  absl::StatusCodeToString(static_cast<absl::StatusCode>(c.status().code())), ": ",
                  c.status().message())});
  }
  *ctx.out << table.ToString() << "\nwinner: " << ConfigString(response.best()) << " ("
           << FormatMicros(response.best_us()) << ", " << SourceName(response.config_source())
           << ")\ncache key: " << response.cache_key()
           << "\ndevice: " << (response.device() < 0 ? "cpu" : absl::StrCat(response.device()))
           << " " << response.platform() << " " << response.device_fingerprint() << "\n";
  if (response.budget_reached()) {
    *ctx.out << "timed " << response.candidates_timed() << " of " << response.candidates_total()
             << " candidates (budget reached)\n";
  }
  for (const std::string& w : response.warnings()) *ctx.out << "warning: " << w << "\n";
  return absl::OkStatus();
}

}  // namespace kernelserve::cli
