// CLI tests that need no server: exit codes of bad command lines, client options from flags,
// bench statistics and output helpers.
#include "client/cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "client/cli/bench.h"
#include "client/cli/explain.h"
#include "client/cli/format.h"
#include "client/cli/parser.h"
#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

CliRun RunTool(const std::vector<std::string>& argv) {
  std::ostringstream out, err;
  CliRun run;
  run.code = RunCli(argv, out, err, /*err_is_tty=*/false);
  run.out = out.str();
  run.err = err.str();
  return run;
}

TEST(RunCliTest, HelpVersionAndBadCommandLines) {
  CliRun help = RunTool({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: kernelserve"), std::string::npos);
  CliRun run_help = RunTool({"help", "run"});
  EXPECT_EQ(run_help.code, 0);
  EXPECT_NE(run_help.out.find("usage: kernelserve run KERNEL"), std::string::npos);
  CliRun version = RunTool({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.out.rfind("kernelserve ", 0), 0u) << version.out;
  // A command line that does not parse exits 2 and says what is wrong.
  EXPECT_EQ(RunTool({}).code, kUsageExitCode);
  CliRun unknown = RunTool({"frobnicate"});
  EXPECT_EQ(unknown.code, kUsageExitCode);
  EXPECT_NE(unknown.err.find("kernelserve: unknown command 'frobnicate'"), std::string::npos)
      << unknown.err;
  CliRun typo = RunTool({"kernles"});
  EXPECT_EQ(typo.code, kUsageExitCode);
  EXPECT_NE(typo.err.find("did you mean 'kernels'?"), std::string::npos) << typo.err;
  CliRun bad_flag = RunTool({"info", "--shape=x=f32:1"});
  EXPECT_EQ(bad_flag.code, kUsageExitCode);
  EXPECT_NE(bad_flag.err.find("--shape"), std::string::npos);
  EXPECT_EQ(RunTool({"run", "mean_pooling", "--concurrency=2"}).code, kUsageExitCode);
  // A bad value is INVALID_ARGUMENT; an unreadable token file NOT_FOUND.
  const int invalid = static_cast<int>(absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunTool({"info", "--deadline=soon"}).code, invalid);
  EXPECT_EQ(RunTool({"health", "--token-file=/nonexistent/token"}).code,
            static_cast<int>(absl::StatusCode::kNotFound));
}

TEST(RunCliTest, NoServerSaysWhereAndHowToStartOne) {
  const CliRun run = RunTool({"--target=127.0.0.1:1", "health"});  // nothing listens on port 1
  EXPECT_EQ(run.code, static_cast<int>(absl::StatusCode::kUnavailable)) << run.err;
  for (const char* part :
       {"kernelserve: UNAVAILABLE: ", "no kernelserve server answers at 127.0.0.1:1", "`make run`",
        "`kernelserve-server --listen 127.0.0.1:1`"}) {
    EXPECT_NE(run.err.find(part), std::string::npos) << part << " in " << run.err;
  }
}

TEST(ExplainTest, ConnectionFailuresAndDeadlinesGetAHint) {
  ClientOptions options;
  options.target = "gpu-host:50051";
  options.deadline = absl::Milliseconds(250);
  const absl::Status refused = absl::UnavailableError(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.7:50051: Failed to "
      "connect to remote host: Connection refused");
  const absl::Status explained = ExplainFailure(refused, options);
  EXPECT_EQ(explained.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(explained.message(), refused.message())) << explained;
  EXPECT_TRUE(
      absl::StrContains(explained.message(), "no kernelserve server answers at gpu-host:50051"))
      << explained;
  EXPECT_TRUE(absl::StrContains(explained.message(), "kernelserve-server --listen gpu-host:50051"))
      << explained;
  EXPECT_TRUE(IsConnectionFailure(absl::UnavailableError("Socket closed")));  // lost mid-call
  // An UNAVAILABLE the server sent names no missing server.
  for (const absl::Status& sent : {absl::UnavailableError("the server is shutting down"),
                                   absl::UnavailableError("redis 127.0.0.1:6379 unavailable "
                                                          "(Connection reset by peer)")}) {
    EXPECT_FALSE(IsConnectionFailure(sent)) << sent;
    EXPECT_EQ(ExplainFailure(sent, options), sent);
  }
  const absl::Status late =
      ExplainFailure(absl::DeadlineExceededError("Deadline Exceeded"), options);
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(late.message(), "the deadline was 250ms per call: --deadline"))
      << late;
  options.deadline = absl::InfiniteDuration();  // none set: the server's own deadline
  EXPECT_EQ(ExplainFailure(absl::DeadlineExceededError("queue timeout"), options),
            absl::DeadlineExceededError("queue timeout"));
  EXPECT_EQ(ExplainFailure(absl::InvalidArgumentError("rank"), options),
            absl::InvalidArgumentError("rank"));
}

TEST(ClientOptionsTest, FromFlags) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("cli_test_token_" + std::to_string(getpid())))
          .string();
  std::ofstream(path) << "  s3cret\n";
  Args args = ParseCommandLine({"--target=h:7", "--token-file", path, "info", "--tls-ca=/ca.pem",
                                "--deadline=2s"})
                  .value()
                  .args;
  absl::StatusOr<ClientOptions> options = ClientOptionsFromArgs(args);
  std::remove(path.c_str());
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->target, "h:7");
  EXPECT_EQ(options->token, "s3cret");
  EXPECT_TRUE(options->use_tls);
  EXPECT_EQ(options->tls.ca_file, "/ca.pem");
  EXPECT_EQ(options->deadline, absl::Seconds(2));

  ClientOptions defaults = ClientOptionsFromArgs(Args{}).value();
  EXPECT_EQ(defaults.target, "127.0.0.1:50051");
  EXPECT_FALSE(defaults.use_tls);
  EXPECT_TRUE(defaults.token.empty());
  Args no_deadline = ParseCommandLine({"info", "--deadline=0"}).value().args;
  EXPECT_EQ(ClientOptionsFromArgs(no_deadline)->deadline, absl::InfiniteDuration());
}

TEST(BenchStatsTest, PercentileByNearestRank) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(i * 10.0);
  std::sort(values.begin(), values.end());
  EXPECT_EQ(Percentile(values, 50), 500.0);
  EXPECT_EQ(Percentile(values, 90), 900.0);
  EXPECT_EQ(Percentile(values, 99), 990.0);
  EXPECT_EQ(Percentile(values, 100), 1000.0);
  EXPECT_EQ(Percentile({42.0}, 99), 42.0);
  EXPECT_EQ(Percentile({1.0, 2.0, 3.0}, 50), 2.0);
  EXPECT_EQ(Percentile({}, 50), 0.0);
}

TEST(BenchTest, OnlyLoadFailuresAreRetryable) {
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kNotFound));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kUnauthenticated));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kInternal));
}

TEST(BenchTest, UnavailableAndWhatRetryingCannotCureEndTheRun) {
  EXPECT_TRUE(EndsTheRun(absl::StatusCode::kUnavailable));  // the server is down or gone
  EXPECT_TRUE(EndsTheRun(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(EndsTheRun(absl::StatusCode::kUnauthenticated));
  EXPECT_FALSE(EndsTheRun(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(EndsTheRun(absl::StatusCode::kDeadlineExceeded));
}

TEST(BenchTest, StopsAtTheFirstUnavailable) {
  std::atomic<int64_t> calls{0};
  BenchOptions options;
  options.concurrency = 4;
  options.duration = absl::Seconds(60);
  options.max_requests = 100000;
  const BenchReport report = RunBench(
      [&]() -> absl::StatusOr<ServerTimings> {
        if (calls.fetch_add(1) < 20) return ServerTimings{};
        return absl::UnavailableError("failed to connect to all addresses");  // the server died
      },
      options);
  EXPECT_EQ(report.fatal.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(report.ok, 20);
  EXPECT_GE(report.errors, 1);
  EXPECT_LE(report.errors, options.concurrency);  // the calls in flight, no more
  EXPECT_LT(report.seconds, 30);
}

TEST(BenchTest, PauseWaitsBetweenEachThreadsCalls) {
  std::vector<absl::Time> starts;  // one thread: no lock needed
  BenchOptions options;
  options.max_requests = 3;
  options.duration = absl::Seconds(30);
  options.pause = absl::Milliseconds(60);
  const BenchReport report = RunBench(
      [&]() -> absl::StatusOr<ServerTimings> {
        starts.push_back(absl::Now());
        return ServerTimings{.launch_us = 7};
      },
      options);
  EXPECT_EQ(report.ok, 3);
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_GE(starts[1] - starts[0], absl::Milliseconds(60));
  EXPECT_GE(starts[2] - starts[1], absl::Milliseconds(60));
  // The server's launch phase is reported among the others.
  const auto launch = std::find(kPhaseNames.begin(), kPhaseNames.end(), std::string_view("launch"));
  ASSERT_NE(launch, kPhaseNames.end());
  EXPECT_EQ(report.server_mean_us[launch - kPhaseNames.begin()], 7.0);
}

TEST(BenchStatsTest, ProgressBar) {
  EXPECT_EQ(ProgressBar(0.5, 10), "[#####.....]  50%");
  EXPECT_EQ(ProgressBar(0.0, 4), "[....]   0%");
  EXPECT_EQ(ProgressBar(2.0, 4), "[####] 100%");
}

TEST(FormatTest, TableAlignsColumns) {
  Table table({"name", "n"});
  table.AddRow({"mean_pooling", "1"});
  table.AddRow({"fa", "22"});
  EXPECT_EQ(table.ToString(),
            "name          n\n"
            "------------  --\n"
            "mean_pooling  1\n"
            "fa            22\n");
}

TEST(FormatTest, SourcesConfigsAndTimes) {
  EXPECT_EQ(SourceName(v1::CONFIG_SOURCE_MEMORY), "memory");
  EXPECT_EQ(SourceName(v1::CONFIG_SOURCE_HEURISTIC), "heuristic");
  EXPECT_EQ(SourceName(v1::CONFIG_SOURCE_UNSPECIFIED), "unspecified");
  v1::KernelConfig config;
  EXPECT_EQ(ConfigString(config), "(default)");
  config.set_block_size(64);
  EXPECT_NE(ConfigString(config).find("block_size=64"), std::string::npos);
  EXPECT_EQ(FormatMicros(850), "850 us");
  EXPECT_EQ(FormatMicros(12300), "12.3 ms");
  EXPECT_EQ(FormatMicros(1.5e6), "1.50 s");
}

TEST(FormatTest, TuneProgressLineAndBudget) {
  v1::AutotuneProgress progress;
  EXPECT_EQ(TuneProgressLine(progress), "tuning: 0/? candidates, best -, 0.0 s");
  progress.set_candidates_done(3);
  progress.set_candidates_total(12);
  progress.set_best_us(850);
  progress.set_elapsed_seconds(1.25);
  EXPECT_EQ(TuneProgressLine(progress), "tuning: 3/12 candidates, best 850 us, 1.2 s");
  EXPECT_EQ(TimeBudgetMillis(absl::ZeroDuration()), 0);  // the server's budget
  EXPECT_EQ(TimeBudgetMillis(absl::Seconds(30)), 30000);
  EXPECT_EQ(TimeBudgetMillis(absl::Microseconds(200)), 1);  // never 0 = none
}

TEST(RunCliTest, TuneBudgetMustBeADuration) {
  for (const std::string value : {"soon", "-1s"}) {
    const CliRun run = RunTool({"--target=127.0.0.1:1", "tune", "mean_pooling",
                                "--shape=x=f32:2,8,4", "--budget=" + value});
    EXPECT_EQ(run.code, static_cast<int>(absl::StatusCode::kInvalidArgument)) << run.err;
    EXPECT_NE(run.err.find("--budget='" + value + "': expected a duration"), std::string::npos)
        << run.err;
  }
}

TEST(FormatTest, TensorSummary) {
  const Tensor t = Tensor::FromFloats(DType::kF32, {2, 2}, {1, -3, 2, 4});
  const nlohmann::json s = TensorSummary(t);
  EXPECT_EQ(s["dtype"], "f32");
  EXPECT_EQ(s["shape"], nlohmann::json::array({2, 2}));
  EXPECT_EQ(s["min"], -3.0);
  EXPECT_EQ(s["max"], 4.0);
  EXPECT_EQ(s["mean"], 1.0);
}

}  // namespace
}  // namespace kernelserve::cli
