#include "client/cli/cli.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

constexpr const char* kUsage = R"(usage: kernelserve [GLOBAL FLAGS] COMMAND [ARGS] [FLAGS]

commands:
  health [SERVICE]          grpc.health.v1 status (exit 14 unless SERVING)
  info                      server version, devices, cache tiers, limits
  kernels                   kernels with their inputs, outputs and params
  run KERNEL                run once; inputs random (--shape), from .npy (--input) or
                            literal (--values); --output-dir DIR writes NAME.npy per output
  bench KERNEL              load test: --concurrency N --duration 5s [--requests N]
  tune KERNEL               autotune for the shapes; every candidate's time and the winner
  cache ls [KERNEL] | get KEY | put KERNEL --shape ... --config ... | rm KEY [--fingerprint F]

call flags (run, bench, tune, cache put):
  --shape NAME=[DTYPE:]D0,D1,...   e.g. x=f32:4,128,64 (dtypes f32 f16 bf16 i32 i64 bool)
  --input NAME=[DTYPE:]FILE.npy    bf16 reads a '<u2' file as bf16 bits
  --values NAME=DTYPE:V0,V1,...    e.g. cu_seqlens=i32:0,3,10
  --param KEY=VALUE                a kernel param, typed by the kernel's schema
                                   (`kernelserve kernels` lists them)
  --config KEY=VALUE,...           explicit config, e.g. block_size=64,num_warps=1
  --platform P  --device N  --seed N  --autotune

global flags:
  --target HOST:PORT (127.0.0.1:50051)  --token-file FILE  --tls  --tls-ca FILE
  --tls-cert FILE  --tls-key FILE  --deadline 60s  --json
exit status: 0, or the gRPC status code of the failure.
)";

const std::set<std::string> kGlobal = {"target",   "token-file", "tls",      "tls-ca",
                                       "tls-cert", "tls-key",    "deadline", "json"};
const std::set<std::string> kCall = {"shape",    "values", "input", "param",
                                     "platform", "device", "seed"};

using Command = absl::Status (*)(const CommandContext&);
struct CommandInfo {
  Command run;
  std::set<std::string> flags;  // besides the global ones and, with `call`, kCall
  bool call = false;
};

const std::map<std::string, CommandInfo>& Commands() {
  static const auto* commands = new std::map<std::string, CommandInfo>{
      {"health", {CmdHealth, {}}},
      {"info", {CmdInfo, {}}},
      {"kernels", {CmdKernels, {}}},
      {"run", {CmdRun, {"config", "output-dir", "autotune"}, true}},
      {"bench", {CmdBench, {"config", "autotune", "concurrency", "duration", "requests"}, true}},
      {"tune", {CmdTune, {}, true}},
      {"cache", {CmdCache, {"config", "fingerprint"}, true}},
  };
  return *commands;
}

int Fail(const absl::Status& status, std::ostream& err) {
  err << "kernelserve: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
      << "\n";
  return static_cast<int>(status.code());
}

absl::Status Dispatch(const Args& args, std::ostream& out, std::ostream& err, bool err_is_tty) {
  const std::string name = args.positional[0];
  auto it = Commands().find(name);
  if (it == Commands().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command '", name, "' (see kernelserve --help)"));
  }
  std::set<std::string> allowed = kGlobal;
  allowed.insert(it->second.flags.begin(), it->second.flags.end());
  if (it->second.call) allowed.insert(kCall.begin(), kCall.end());
  KS_RETURN_IF_ERROR(CheckFlags(args, allowed, name));
  KS_ASSIGN_OR_RETURN(ClientOptions options, ClientOptionsFromArgs(args));
  KS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  CommandContext ctx;
  ctx.client = client.get();
  ctx.args = &args;
  KS_ASSIGN_OR_RETURN(ctx.json, args.GetBool("json"));
  ctx.out = &out;
  ctx.err = &err;
  ctx.err_is_tty = err_is_tty;
  return it->second.run(ctx);
}

}  // namespace

const FlagSet& AllFlags() {
  static const FlagSet* flags =
      new FlagSet{{"target", "token-file", "tls-ca", "tls-cert", "tls-key", "deadline", "shape",
                   "values", "input", "param", "platform", "device", "seed", "config", "output-dir",
                   "concurrency", "duration", "requests", "fingerprint"},
                  {"json", "tls", "autotune", "help"}};
  return *flags;
}

absl::StatusOr<ClientOptions> ClientOptionsFromArgs(const Args& args) {
  ClientOptions options;
  options.target = args.Get("target", options.target);
  if (args.Has("token-file")) {
    const std::string path = args.Get("token-file");
    std::ifstream file(path);
    if (!file) return absl::NotFoundError(absl::StrCat("--token-file '", path, "' cannot be read"));
    std::stringstream text;
    text << file.rdbuf();
    options.token = std::string(absl::StripAsciiWhitespace(text.str()));
    if (options.token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file '", path, "' is empty"));
    }
  }
  KS_ASSIGN_OR_RETURN(bool tls, args.GetBool("tls"));
  options.use_tls = tls || args.Has("tls-ca") || args.Has("tls-cert") || args.Has("tls-key");
  options.tls.ca_file = args.Get("tls-ca");
  options.tls.cert_file = args.Get("tls-cert");
  options.tls.key_file = args.Get("tls-key");
  KS_ASSIGN_OR_RETURN(options.deadline, args.GetDuration("deadline", options.deadline));
  if (options.deadline == absl::ZeroDuration()) options.deadline = absl::InfiniteDuration();
  return options;
}

int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err,
           bool err_is_tty) {
  absl::StatusOr<Args> args = ParseArgs(argv, AllFlags());
  if (!args.ok()) return Fail(args.status(), err);
  if (args->Has("help")) {
    out << kUsage;
    return 0;
  }
  if (args->positional.empty()) {
    err << kUsage;
    return Fail(absl::InvalidArgumentError("no command given"), err);
  }
  const absl::Status status = Dispatch(*args, out, err, err_is_tty);
  return status.ok() ? 0 : Fail(status, err);
}

}  // namespace kernelserve::cli
