#include "core/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace kernelserve {

absl::StatusOr<double> Benchmark(const std::function<absl::StatusOr<double>()>& launch, int warmup,
                                 int iters) {
  for (int i = 0; i < warmup; ++i) {
    KS_RETURN_IF_ERROR(launch().status());
  }
  std::vector<double> times;
  times.reserve(static_cast<size_t>(std::max(iters, 1)));
  for (int i = 0; i < std::max(iters, 1); ++i) {
    KS_ASSIGN_OR_RETURN(double seconds, launch());
    times.push_back(seconds);
  }
  const size_t mid = times.size() / 2;
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(mid), times.end());
  return times[mid];
}

double MatchTolerance(DType dtype) {
  // A different tile order changes the fp32 accumulation order only; what differs afterwards
  // is the final rounding to the output type, so the bound follows its precision.
  switch (dtype) {
    case DType::kF32:
      return 1e-4;
    case DType::kF16:
      return 5e-3;
    case DType::kBF16:
      return 2e-2;
    case DType::kF8E4M3:  // 3 mantissa bits
      return 1.25e-1;
    case DType::kF8E5M2:  // 2 mantissa bits
      return 2.5e-1;
    case DType::kI32:
    case DType::kI64:
    case DType::kBool:
      return 0.0;  // integer outputs must match exactly
  }
  return 0.0;
}

namespace {

// Element i of `t` as ToDoubles gives it, read in place: outputs of hundreds of MiB are compared
// without a copy of each as doubles.
double ValueAt(const Tensor& t, int64_t i) {
  return HoldsFloats(t.dtype()) ? static_cast<double>(t.GetFloat(i))
                                : static_cast<double>(t.GetInt(i));
}

}  // namespace

double OutputsRelativeError(const TensorMap& actual, const TensorMap& reference) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (actual.size() != reference.size()) return kInf;
  double diff2 = 0.0;
  double ref2 = 0.0;
  for (const auto& [name, ref] : reference) {
    auto it = actual.find(name);
    if (it == actual.end() || it->second.numel() != ref.numel()) return kInf;
    const Tensor& out = it->second;
    const int64_t n = ref.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double a = ValueAt(out, i);
      const double r = ValueAt(ref, i);
      if (std::isnan(a)) return kInf;
      // Equal infinities (lse of a fully masked row) match; anything else infinite does not.
      if (std::isinf(r) || std::isinf(a)) {
        if (a != r) return kInf;
        continue;
      }
      diff2 += (a - r) * (a - r);
      ref2 += r * r;
    }
  }
  if (ref2 == 0.0) return diff2 == 0.0 ? 0.0 : kInf;
  return std::sqrt(diff2 / ref2);
}

namespace {

DType FirstFloatDType(const TensorMap& outputs) {
  DType dtype = DType::kF32;
  for (const auto& [name, t] : outputs) {
    if (HoldsFloats(t.dtype())) {
      // The narrowest float output bounds the tolerance.
      if (MatchTolerance(t.dtype()) > MatchTolerance(dtype)) dtype = t.dtype();
    }
  }
  return dtype;
}

bool Better(const CandidateResult& a, const CandidateResult* best) {
  if (best == nullptr) return true;
  if (a.median_seconds != best->median_seconds) return a.median_seconds < best->median_seconds;
  return a.config.priority > best->config.priority;
}

// Times `config` on `run` (warmup + iters launches of `launch`) and checks its output against
// `reference`: OK with *median_seconds set, or why the candidate is rejected.
template <typename Launch>
absl::Status TimeCandidate(PreparedRun& run, const KernelConfig& config, const TensorMap& reference,
                           double tolerance, const TuneOptions& options, const Launch& launch,
                           double* median_seconds) {
  absl::StatusOr<double> seconds =
      Benchmark([&] { return launch(config); }, options.warmup, options.iters);
  if (!seconds.ok()) return seconds.status();
  absl::StatusOr<TensorMap> out = run.Fetch();
  if (!out.ok()) return out.status();
  const double err = OutputsRelativeError(*out, reference);
  if (!(err <= tolerance)) {
    return absl::InternalError(absl::StrFormat(
        "output differs from the heuristic config's: relative error %g > %g", err, tolerance));
  }
  *median_seconds = *seconds;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TuneReport> Autotune(PreparedRun& run, const KernelConfig& heuristic,
                                    const std::vector<KernelConfig>& candidates,
                                    const TuneOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto interrupted = [&options]() -> absl::Status {
    return options.interrupt ? options.interrupt() : absl::OkStatus();
  };
  // Every launch first checks the interrupt; a launch stopped part way fails with it too. A
  // candidate's time is what a call waits for: the kernel and the host's queuing of it
  // (PreparedRun::launch_seconds; a cuDNN plan's execute takes tens of microseconds of it).
  const auto launch = [&](const KernelConfig& config) -> absl::StatusOr<double> {
    KS_RETURN_IF_ERROR(interrupted());
    KS_ASSIGN_OR_RETURN(const double kernel_seconds, run.Launch(config));
    return kernel_seconds + run.launch_seconds();
  };
  KS_RETURN_IF_ERROR(launch(heuristic).status());
  KS_ASSIGN_OR_RETURN(TensorMap reference, run.Fetch());
  const double tolerance = MatchTolerance(FirstFloatDType(reference));
  const double budget = absl::ToDoubleSeconds(options.time_budget);

  TuneReport report;
  const CandidateResult* best = nullptr;
  report.candidates.reserve(candidates.size());
  const auto report_progress = [&] {
    if (!options.progress) return;
    options.progress(TuneProgress{report.candidates_run, static_cast<int>(candidates.size()),
                                  best == nullptr ? 0.0 : best->median_seconds, elapsed()});
  };
  report_progress();
  for (const KernelConfig& config : candidates) {
    CandidateResult& result = report.candidates.emplace_back();
    result.config = config;
    if (report.budget_reached || elapsed() > budget) {
      report.budget_reached = true;
      result.status = absl::DeadlineExceededError("skipped: tuning time budget spent");
      continue;
    }
    ++report.candidates_run;
    result.status =
        TimeCandidate(run, config, reference, tolerance, options, launch, &result.median_seconds);
    if (!result.status.ok()) {
      KS_RETURN_IF_ERROR(interrupted());  // the caller is gone: no report, no winner
    }
    if (result.status.ok() && Better(result, best)) best = &result;
    report_progress();
  }
  report.elapsed_seconds = elapsed();
  if (best == nullptr) {
    report.all_failed = true;
    report.best = heuristic;
  } else {
    report.best = best->config;
    report.best_seconds = best->median_seconds;
  }
  return report;
}

}  // namespace kernelserve
