// The server binary as an operator meets it: --help and --version, refusing addresses already
// in use, and the metrics that exist from the first scrape.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"
#include "tests/support/testing.h"

namespace kernelserve::testing {
namespace {

struct Finished {
  int exit_code = -1;  // -1 when killed by a signal (e.g. the 20 s guard)
  std::string output;  // stdout and stderr
};

// Runs the server binary with `args` to its end (killed after 20 s: a server that should have
// refused to start fails the test instead of hanging it).
Finished RunToExit(const std::vector<std::string>& args) {
  std::string command = "timeout -s KILL 20 '" + ServerBinary() + "'";
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  absl::StrAppend(&command, " 2>&1");
  Finished finished;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return finished;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) finished.output.append(buffer, n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) finished.exit_code = WEXITSTATUS(status);
  return finished;
}

TEST(ServerStartupTest, HelpListsItsOwnFlagsWithDefaults) {
  for (const char* flag : {"--help", "-h"}) {
    const Finished help = RunToExit({flag});
    EXPECT_EQ(help.exit_code, 0) << flag << ": " << help.output;
    EXPECT_FALSE(absl::StrContains(help.output, "No flags matched")) << help.output;
    EXPECT_TRUE(absl::StrContains(help.output, "--listen")) << help.output;
    EXPECT_TRUE(absl::StrContains(help.output, "--metrics-listen")) << help.output;
    EXPECT_TRUE(absl::StrContains(help.output, "127.0.0.1:9464")) << help.output;  // a default
    EXPECT_FALSE(absl::StrContains(help.output, ".cc")) << "no source paths: " << help.output;
  }
}

TEST(ServerStartupTest, VersionNamesGitAndCuda) {
  const Finished version = RunToExit({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_TRUE(absl::StartsWith(version.output, "kernelserve-server ")) << version.output;
  EXPECT_TRUE(absl::StrContains(version.output, "git ")) << version.output;
  EXPECT_TRUE(absl::StrContains(version.output, "cuda ")) << version.output;
}

TEST(ServerStartupTest, OutOfRangeFlagsAreRefusedNamingTheFlag) {
  for (const char* flag : {"--gpu-lanes=0", "--gpu-lanes=17", "--max-queue=0",
                           "--max-pinned-bytes=-1", "--max-connection-idle=-1s",
                           "--max-connection-age=-1s", "--max-connection-age-grace=-1s"}) {
    const Finished refused = RunToExit({"--cache=memory", "--metrics-listen=off", flag});
    EXPECT_NE(refused.exit_code, 0) << flag << ": " << refused.output;
    EXPECT_TRUE(absl::StrContains(refused.output, flag)) << flag << ": " << refused.output;
    EXPECT_TRUE(absl::StrContains(refused.output, "expected")) << flag << ": " << refused.output;
    EXPECT_FALSE(absl::StrContains(refused.output, "listening on")) << refused.output;
  }
}

TEST(ServerStartupTest, SecondServerOnAPortInUseIsRefused) {
  ServerProcess first;
  ASSERT_TRUE(first.Start({"--cache=memory"}).ok());
  const Finished second = RunToExit({"--cache=memory", absl::StrCat("--listen=", first.address()),
                                     "--metrics-listen=127.0.0.1:0"});
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, "--listen=" + first.address())) << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, "in use")) << second.output;
  EXPECT_FALSE(absl::StrContains(second.output, "listening on")) << second.output;
}

TEST(ServerStartupTest, SecondServerOnAUnixSocketInUseIsRefused) {
  const std::string target = "unix:" + MakeTempDir("busy-socket") + "/kernelserve.sock";
  ServerProcess first;
  ASSERT_TRUE(first.Start({"--cache=memory", "--listen=" + target}).ok());
  const Finished second =
      RunToExit({"--cache=memory", "--listen=" + target, "--metrics-listen=off"});
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, "another process is listening")) << second.output;
  // The first server still owns its socket.
  EXPECT_EQ(HealthStatus(target, "").value_or(-1), 1);
}

TEST(ServerStartupTest, SecondServerOnAMetricsPortInUseIsRefused) {
  ServerProcess first;
  ASSERT_TRUE(first.Start({"--cache=memory"}).ok());
  const std::string metrics = absl::StrCat("127.0.0.1:", first.metrics_port());
  const Finished second = RunToExit(
      {"--cache=memory", "--listen=127.0.0.1:0", absl::StrCat("--metrics-listen=", metrics)});
  EXPECT_NE(second.exit_code, 0) << second.output;
  // The flag and the address, why, and what to pass instead.
  for (const std::string& part :
       {absl::StrCat("--metrics-listen=", metrics, ": "), std::string("it is in use"),
        std::string("--metrics-listen=off")}) {
    EXPECT_TRUE(absl::StrContains(second.output, part)) << part << " in " << second.output;
  }
  EXPECT_FALSE(absl::StrContains(second.output, "listening on")) << second.output;
}

TEST(ServerStartupTest, StartupLineNamesProtocolsDevicesAndModes) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory", "--reflection"}).ok());
  const std::string& line = server.startup_line();
  for (const char* part :
       {"(plaintext)", "protocols kernelserve.v1 kserve.v2 grpc.health.v1 grpc.reflection",
        "devices cpu", "store memory", "autotune on a miss"}) {
    EXPECT_TRUE(absl::StrContains(line, part)) << part << " in " << line;
  }
}

TEST(ServerStartupTest, MetricsDashboardsUseExistAtZeroFromTheStart) {
  const std::string path = MakeTempDir("metrics-at-zero") + "/configs.json";
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=file:" + path}).ok());
  absl::StatusOr<std::string> text = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  const std::vector<std::string> series = {
      "kernelserve_store_errors_total{op=\"get\",store=\"file\"} 0",
      "kernelserve_store_errors_total{op=\"put\",store=\"file\"} 0",
      "kernelserve_requests_total{code=\"INTERNAL\",kernel=\"mean_pooling\",platform=\"cpu\"} 0",
      "kernelserve_requests_total{code=\"OK\",kernel=\"flash_attention\",platform=\"cpu\"} 0",
      "kernelserve_autotune_runs_total{kernel=\"flash_attention\",outcome=\"error\"} 0",
      "kernelserve_config_selections_total{kernel=\"mean_pooling\",source=\"heuristic\"} 0",
      "kernelserve_queue_wait_seconds_count{device=\"cpu\"} 0",
      "kernelserve_queue_depth{device=\"cpu\"} 0",
  };
  for (const std::string& line : series) {
    EXPECT_TRUE(absl::StrContains(*text, line + "\n")) << line;
  }
  EXPECT_TRUE(absl::StrContains(*text, "kernelserve_build_info{cuda=\"")) << *text;
  std::string promtool;
  EXPECT_EQ(PromtoolCheck(*text, &promtool), 0) << promtool;
}

TEST(ServerStartupTest, QueueWaitIsObservedPerCall) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--cache=memory"}).ok());
  const Tensor x = RandomTensor(DType::kF32, {2, 7, 5}, 71);
  for (int i = 0; i < 3; ++i) {
    v1::ExecuteResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(
        MakeStub(server.address())->Execute(&context, MeanPoolingRequest(x), &response).ok());
  }
  absl::StatusOr<std::string> text = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(MetricSum(*text, "kernelserve_queue_wait_seconds_count", {"device=\"cpu\""}), 3);
}

}  // namespace
}  // namespace kernelserve::testing
