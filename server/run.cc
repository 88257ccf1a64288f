// kernelserve-server's main: flags, signals, start, serve until SIGTERM or SIGINT, drain.
#include "server/run.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/utils/log.h"
#include "proto/parse.h"
#include "server/options.h"
#include "server/process_tuning.h"
#include "server/server.h"
#include "server/usage.h"

namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  (void)!write(g_signal_pipe[1], &byte, 1);
}

// Flags may be written with dashes (--max-queue) as well as underscores (--max_queue).
std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  for (size_t i = 1; i < storage.size(); ++i) {
    std::string& arg = storage[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = arg.find('=') == std::string::npos ? arg.size() : arg.find('=');
    for (size_t j = 2; j < end; ++j) {
      if (arg[j] == '-') arg[j] = '_';
    }
  }
  std::vector<char*> out;
  for (std::string& s : storage) out.push_back(s.data());
  return out;
}

}  // namespace

namespace kernelserve::server {
namespace {

// SIGTERM/SIGINT only write their number to a pipe (async-signal-safe); main waits on it.
bool InstallSignalPipe() {
  if (pipe(g_signal_pipe) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return true;
}

int WaitForSignal() {
  unsigned char signal_number = 0;
  while (read(g_signal_pipe[0], &signal_number, 1) != 1) {
  }
  return signal_number;
}

// --help or --version answered: the exit code; else none.
std::optional<int> AnswerUsageRequest(int argc, char** argv) {
  const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string()
                                       : std::string("kernelserve-server");
  switch (FindUsageRequest(std::vector<std::string>(argv + std::min(argc, 1), argv + argc))) {
    case UsageRequest::kHelp:
      std::printf("%s", HelpText(program).c_str());
      return 0;
    case UsageRequest::kVersion:
      std::printf("%s\n", VersionText(program).c_str());
      return 0;
    case UsageRequest::kNone:
      break;
  }
  return std::nullopt;
}

}  // namespace

int RunServerMain(int argc, char** argv,
                  const std::vector<std::function<std::unique_ptr<Kernel>()>>& extra_kernels) {
  TuneProcess();                         // large tensors reuse freed memory
  kernelserve::wire::FilterParseLogs();  // bad requests are answered, not logged
  absl::SetProgramUsageMessage("Serves the registered kernels over gRPC.");
  if (std::optional<int> answered = AnswerUsageRequest(argc, argv)) return *answered;
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, storage);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (!InstallSignalPipe()) {
    KS_LOG(ERROR) << "kernelserve-server: cannot create the signal pipe";
    return 1;
  }

  absl::StatusOr<ServerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    KS_LOG(ERROR) << "kernelserve-server: " << options.status();
    return 2;
  }
  logging::SetMinLevel(options->log_level);
  auto server = Server::Start(*options, extra_kernels);
  if (!server.ok()) {
    KS_LOG(ERROR) << "kernelserve-server: " << server.status();
    return 1;
  }
  std::printf("%s\n", (*server)->StartupLine().c_str());
  std::fflush(stdout);

  const int signal_number = WaitForSignal();
  std::printf("kernelserve-server: signal %d, draining (grace period %s)\n", signal_number,
              absl::FormatDuration(options->grace_period).c_str());
  std::fflush(stdout);
  const absl::Status flushed = (*server)->Shutdown();
  if (!flushed.ok()) KS_LOG(ERROR) << "kernelserve-server: flushing the store: " << flushed;
  std::printf("kernelserve-server: stopped\n");
  return 0;
}

}  // namespace kernelserve::server
