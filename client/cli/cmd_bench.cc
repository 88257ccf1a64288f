// bench.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/auto_shm.h"
#include "client/cli/bench.h"
#include "client/cli/bench_shm.h"
#include "client/cli/bench_v2.h"
#include "client/cli/call_spec.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace kernelserve::cli {
namespace {

// shared_memory: "system", "cuda" or "none": where the bench's tensors went.
nlohmann::json ReportJson(const BenchReport& r, const BenchOptions& options,
                          const std::string& shared_memory) {
  nlohmann::json server = nlohmann::json::object();
  for (size_t i = 0; i < kPhaseNames.size(); ++i) {
    server[absl::StrCat(kPhaseNames[i], "_us")] = r.server_mean_us[i];
  }
  return {{"concurrency", options.concurrency},
          {"ok", r.ok},
          {"errors", r.errors},
          {"failures", r.failures},
          {"seconds", r.seconds},
          {"throughput_rps", r.throughput},
          {"latency_us",
           {{"mean", r.mean_us},
            {"p50", r.p50_us},
            {"p90", r.p90_us},
            {"p99", r.p99_us},
            {"max", r.max_us}}},
          {"server_mean", server},
          {"shared_memory", shared_memory}};
}

void PrintReport(const BenchReport& r, const BenchOptions& options, std::ostream& out) {
  Table load({"concurrency", "ok", "errors", "seconds", "throughput"});
  load.AddRow({absl::StrCat(options.concurrency), absl::StrCat(r.ok), absl::StrCat(r.errors),
               absl::StrFormat("%.2f", r.seconds), absl::StrFormat("%.0f req/s", r.throughput)});
  Table latency({"latency", "mean", "p50", "p90", "p99", "max"});
  latency.AddRow({"client", FormatMicros(r.mean_us), FormatMicros(r.p50_us), FormatMicros(r.p90_us),
                  FormatMicros(r.p99_us), FormatMicros(r.max_us)});
  std::vector<std::string> header = {"server (mean)"};
  std::vector<std::string> row = {"per call"};
  for (size_t i = 0; i < kPhaseNames.size(); ++i) {
    header.push_back(kPhaseNames[i]);
    row.push_back(FormatMicros(r.server_mean_us[i]));
  }
  Table server(header);
  server.AddRow(row);
  out << load.ToString() << "\n" << latency.ToString() << "\n" << server.ToString();
  for (const auto& [failure, count] : r.failures) {
    out << "failed " << count << "x: " << failure << "\n";
  }
}

// --protocol: "native" or "v2"; InvalidArgument for anything else.
absl::StatusOr<std::string> ProtocolFromArgs(const Args& args) {
  std::string protocol = args.Get("protocol", "native");
  if (protocol == "native" || protocol == "v2") return protocol;
  return absl::InvalidArgumentError(
      absl::StrCat("--protocol=", protocol, ": expected native or v2"));
}

// --shared-memory (see auto_shm.h); the native protocol alone has regions: auto means none
// with --protocol=v2, system and cuda are refused there.
absl::StatusOr<SharedMemoryMode> SharedMemoryFromArgs(const Args& args,
                                                      const std::string& protocol) {
  KS_ASSIGN_OR_RETURN(SharedMemoryMode mode, SharedMemoryModeFromArgs(args, /*cuda_allowed=*/true));
  if (protocol == "native") return mode;
  if (mode == SharedMemoryMode::kSystem || mode == SharedMemoryMode::kCuda) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shared-memory=", args.Get("shared-memory"),
                     " is not taken with --protocol=v2; use --protocol=native"));
  }
  return SharedMemoryMode::kNone;
}

// --tensor and --output-to name resident tensors, which the native protocol alone knows.
absl::Status ResidentWithProtocol(const Args& args, const std::string& protocol) {
  if (protocol == "native") return absl::OkStatus();
  for (const char* flag : {"tensor", "output-to"}) {
    if (args.Has(flag)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag,
                       " is not taken with --protocol=v2 (resident tensors are kernelserve.v1's); "
                       "use --protocol=native"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchOptions> OptionsFromArgs(const CommandContext& ctx) {
  BenchOptions options;
  KS_ASSIGN_OR_RETURN(int64_t concurrency, ctx.args->GetInt("concurrency", 1));
  if (concurrency < 1 || concurrency > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--concurrency=", concurrency, ": expected 1..4096"));
  }
  options.concurrency = static_cast<int>(concurrency);
  KS_ASSIGN_OR_RETURN(options.duration, ctx.args->GetDuration("duration", absl::Seconds(5)));
  KS_ASSIGN_OR_RETURN(options.max_requests, ctx.args->GetInt("requests", 0));
  if (options.max_requests < 0) {
    return absl::InvalidArgumentError("--requests: expected a count >= 0 (0 = no limit)");
  }
  KS_ASSIGN_OR_RETURN(options.pause, ctx.args->GetDuration("pause", absl::ZeroDuration()));
  if (options.pause < absl::ZeroDuration() || options.pause > absl::Hours(1)) {
    return absl::InvalidArgumentError("--pause: expected a duration of 0 to 1h");
  }
  if (ctx.err_is_tty) options.progress = ctx.err;
  return options;
}

// The request every call of the bench sends: the call flags, --config and --autotune.
absl::StatusOr<v1::ExecuteRequest> RequestFromArgs(const CommandContext& ctx) {
  KS_ASSIGN_OR_RETURN(CallSpec spec, CallSpecFromArgs(*ctx.args));
  v1::ExecuteRequest request;
  KS_RETURN_IF_ERROR(FillRequest(spec, *ctx.client, /*with_data=*/true, &request));
  PutResident(spec, &request);  // named, not sent: each call carries the other inputs only
  if (spec.config) *request.mutable_config() = ToProto(*spec.config);
  KS_ASSIGN_OR_RETURN(bool autotune, ctx.args->GetBool("autotune"));
  if (autotune) request.mutable_policy()->set_allow_autotune(true);
  return request;
}

absl::Status PrintOrFail(const BenchReport& report, const BenchOptions& options,
                         const std::string& shared_memory, const CommandContext& ctx) {
  if (!report.fatal.ok()) {  // every further call would fail the same way: no table
    const bool gone = report.fatal.code() == absl::StatusCode::kUnavailable;
    return absl::Status(report.fatal.code(),
                        absl::StrCat("bench stopped at the first ",
                                     gone ? "UNAVAILABLE call (the server is down or went away; "
                                          : "call that retrying cannot cure (",
                                     report.ok, " ok before it): ", report.fatal.message()));
  }
  if (ctx.json) {
    *ctx.out << ReportJson(report, options, shared_memory).dump(2) << "\n";
  } else {
    PrintReport(report, options, *ctx.out);
  }
  // Every call failed: report the server's status rather than an empty benchmark.
  if (report.ok == 0 && report.errors > 0) return report.first_error;
  return absl::OkStatus();
}

}  // namespace

absl::Status CmdBench(const CommandContext& ctx) {
  KS_ASSIGN_OR_RETURN(const std::string protocol, ProtocolFromArgs(*ctx.args));
  KS_ASSIGN_OR_RETURN(const SharedMemoryMode mode, SharedMemoryFromArgs(*ctx.args, protocol));
  KS_RETURN_IF_ERROR(ResidentWithProtocol(*ctx.args, protocol));
  KS_ASSIGN_OR_RETURN(const BenchOptions options, OptionsFromArgs(ctx));
  KS_ASSIGN_OR_RETURN(v1::ExecuteRequest request, RequestFromArgs(ctx));
  BenchRegion region;  // registered while the bench runs, unregistered when this returns
  const bool cuda = mode == SharedMemoryMode::kCuda;
  if (mode == SharedMemoryMode::kSystem || cuda ||
      (mode == SharedMemoryMode::kAuto &&
       AutoWantsSharedMemory(*ctx.client, ctx.target, request))) {
    // One call with the bytes inline learns the outputs' sizes.
    KS_ASSIGN_OR_RETURN(const RunResult probe, ctx.client->Execute(request));
    const int device = request.has_device() && request.device() >= 0 ? request.device() : 0;
    absl::StatusOr<BenchRegion> moved =
        MoveIntoSharedMemory(*ctx.client, probe, &request, cuda, device);
    if (moved.ok()) {
      region = std::move(*moved);
    } else if (mode == SharedMemoryMode::kAuto) {
      NoteSharedMemoryFallback(moved.status(), *ctx.err);
    } else {
      return moved.status();
    }
  }
  const std::string shared_memory =
      region.region == nullptr ? "none" : (region.region->device() >= 0 ? "cuda" : "system");
  BenchReport report;
  if (protocol == "v2") {
    KS_ASSIGN_OR_RETURN(report, RunBenchV2(*ctx.client, request, options));
  } else {
    report = RunBench(*ctx.client, std::make_shared<const v1::ExecuteRequest>(std::move(request)),
                      options);
  }
  return PrintOrFail(report, options, shared_memory, ctx);
}

}  // namespace kernelserve::cli
