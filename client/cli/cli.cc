#include "client/cli/cli.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/explain.h"
#include "client/cli/parser.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

using Command = absl::Status (*)(const CommandContext&);

const std::map<std::string, Command>& Commands() {
  static const auto* commands = new std::map<std::string, Command>{
      {"health", CmdHealth}, {"info", CmdInfo}, {"kernels", CmdKernels}, {"run", CmdRun},
      {"bench", CmdBench},   {"tune", CmdTune}, {"cache", CmdCache},     {"tensor", CmdTensor},
  };
  return *commands;
}

int Fail(const absl::Status& status, std::ostream& err) {
  if (IsUsageError(status)) {
    err << "kernelserve: " << status.message() << "\n";
    return kUsageExitCode;
  }
  err << "kernelserve: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
      << "\n";
  return static_cast<int>(status.code());
}

absl::Status Dispatch(const Args& args, std::ostream& out, std::ostream& err, bool err_is_tty) {
  auto it = Commands().find(args.positional.at(0));
  if (it == Commands().end()) {  // the parser knows a command this table lacks
    return absl::InternalError(absl::StrCat("no implementation of '", args.positional[0], "'"));
  }
  KS_ASSIGN_OR_RETURN(ClientOptions options, ClientOptionsFromArgs(args));
  KS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  CommandContext ctx;
  ctx.client = client.get();
  ctx.args = &args;
  ctx.target = options.target;
  KS_ASSIGN_OR_RETURN(ctx.json, args.GetBool("json"));
  ctx.out = &out;
  ctx.err = &err;
  ctx.err_is_tty = err_is_tty;
  return ExplainFailure(it->second(ctx), options);
}

}  // namespace

absl::StatusOr<ClientOptions> ClientOptionsFromArgs(const Args& args) {
  ClientOptions options;
  options.target = args.Get("target", options.target);
  if (args.Has("token-file")) {
    const std::string path = args.Get("token-file");
    std::ifstream file(path);
    if (!file) {
      return absl::NotFoundError(absl::StrCat(
          "token file '", path, "' (--token-file or KERNELSERVE_TOKEN_FILE) cannot be read"));
    }
    std::stringstream text;
    text << file.rdbuf();
    options.token = std::string(absl::StripAsciiWhitespace(text.str()));
    if (options.token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
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
  absl::StatusOr<CommandLine> line = ParseCommandLine(argv);
  if (!line.ok()) return Fail(line.status(), err);
  if (!line->print.empty()) {
    out << line->print;
    return 0;
  }
  const absl::Status status = Dispatch(line->args, out, err, err_is_tty);
  return status.ok() ? 0 : Fail(status, err);
}

}  // namespace kernelserve::cli
