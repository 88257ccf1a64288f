#include "client/cli/bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace kernelserve::cli {
namespace {

// What every worker adds up, merged under a mutex when it ends.
struct Totals {
  std::vector<double> latencies_us;
  std::array<double, kPhaseNames.size()> server_us{};
  std::map<std::string, int64_t> failures;
  int64_t errors = 0;
  absl::Status first_error;
  absl::Status fatal;
};

void AddServerTimings(const ServerTimings& t, std::array<double, kPhaseNames.size()>* sums) {
  const std::array<int64_t, kPhaseNames.size()> phases = {
      t.recv_us, t.queue_us, t.select_us, t.h2d_us, t.launch_us, t.kernel_us, t.d2h_us, t.total_us};
  for (size_t i = 0; i < phases.size(); ++i) (*sums)[i] += static_cast<double>(phases[i]);
}

void DrawProgress(std::ostream& out, absl::Duration elapsed, const BenchOptions& options,
                  int64_t ok, int64_t errors) {
  const double fraction = absl::FDivDuration(elapsed, options.duration);
  out << "\r" << ProgressBar(fraction, 30)
      << absl::StrFormat(" %.1fs  %d ok  %d errors", absl::ToDoubleSeconds(elapsed), ok, errors)
      << std::flush;
}

}  // namespace

bool IsRetryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kDeadlineExceeded;
}

bool EndsTheRun(absl::StatusCode code) {
  return !IsRetryable(code) || code == absl::StatusCode::kUnavailable;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, double(sorted.size()))) - 1;
  return sorted[index];
}

std::string ProgressBar(double fraction, int width) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int filled = static_cast<int>(fraction * width + 0.5);
  return absl::StrFormat("[%s%s] %3d%%", std::string(filled, '#'), std::string(width - filled, '.'),
                         static_cast<int>(fraction * 100));
}

BenchReport RunBench(const Client& client, std::shared_ptr<const v1::ExecuteRequest> request,
                     const BenchOptions& options) {
  return RunBench(
      [&client, request]() -> absl::StatusOr<ServerTimings> {
        absl::StatusOr<RunResult> result = client.Execute(request);
        if (!result.ok()) return result.status();
        return result->timings;
      },
      options);
}

BenchReport RunBench(const BenchCall& call, const BenchOptions& options) {
  std::atomic<int64_t> started{0}, ok{0}, errors{0};
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  Totals totals;  // guarded by mu
  const absl::Time start = absl::Now();
  const absl::Time end = start + options.duration;
  auto worker = [&] {
    Totals mine;
    bool first = true;
    while (!stop.load() && absl::Now() < end &&
           (options.max_requests == 0 || started.fetch_add(1) < options.max_requests)) {
      if (!std::exchange(first, false) && options.pause > absl::ZeroDuration()) {
        absl::SleepFor(options.pause);
      }
      const absl::Time t0 = absl::Now();
      absl::StatusOr<ServerTimings> result = call();
      const double us = absl::ToDoubleMicroseconds(absl::Now() - t0);
      if (result.ok()) {
        mine.latencies_us.push_back(us);
        AddServerTimings(*result, &mine.server_us);
        ok.fetch_add(1);
      } else {
        if (mine.errors++ == 0) mine.first_error = result.status();
        ++mine.failures[absl::StrCat(absl::StatusCodeToString(result.status().code()), ": ",
                                     result.status().message())];
        errors.fetch_add(1);
        if (EndsTheRun(result.status().code())) {
          mine.fatal = result.status();
          stop.store(true);
        }
      }
    }
    absl::MutexLock lock(&mu);
    totals.latencies_us.insert(totals.latencies_us.end(), mine.latencies_us.begin(),
                               mine.latencies_us.end());
    for (size_t i = 0; i < mine.server_us.size(); ++i) totals.server_us[i] += mine.server_us[i];
    for (const auto& [key, count] : mine.failures) totals.failures[key] += count;
    totals.errors += mine.errors;
    if (totals.first_error.ok()) totals.first_error = mine.first_error;
    if (totals.fatal.ok()) totals.fatal = mine.fatal;
  };
  absl::Notification done;
  std::thread progress([&] {
    if (options.progress == nullptr) return;
    while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      DrawProgress(*options.progress, absl::Now() - start, options, ok.load(), errors.load());
    }
    *options.progress << "\r" << std::string(72, ' ') << "\r" << std::flush;
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < options.concurrency; ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  done.Notify();
  progress.join();

  BenchReport report;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double>& lat = totals.latencies_us;
  std::sort(lat.begin(), lat.end());
  report.ok = static_cast<int64_t>(lat.size());
  report.errors = totals.errors;
  report.failures = std::move(totals.failures);
  report.first_error = totals.first_error;
  report.fatal = totals.fatal;
  report.throughput = report.seconds > 0 ? report.ok / report.seconds : 0;
  if (!lat.empty()) {
    double sum = 0;
    for (double v : lat) sum += v;
    report.mean_us = sum / lat.size();
    report.p50_us = Percentile(lat, 50);
    report.p90_us = Percentile(lat, 90);
    report.p99_us = Percentile(lat, 99);
    report.max_us = lat.back();
    for (size_t i = 0; i < totals.server_us.size(); ++i) {
      report.server_mean_us[i] = totals.server_us[i] / lat.size();
    }
  }
  return report;
}

}  // namespace kernelserve::cli
