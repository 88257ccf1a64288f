#include "client/cli/app.h"

#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/cli/version.h"

namespace kernelserve::cli {
namespace {

constexpr const char* kGlobalGroup = "global flags";
constexpr const char* kCallGroup = "call flags";
constexpr const char* kFlagGroup = "flags";

// "usage: kernelserve run KERNEL [FLAGS]"; the root lists its shape.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() {
    label("Positionals", "arguments");
    label("REQUIRED", "");
    column_width(36);
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    if (app->get_parent() == nullptr) {
      return absl::StrCat("usage: ", name, " [GLOBAL FLAGS] COMMAND [ARGS] [FLAGS]\n");
    }
    std::string usage = absl::StrCat("usage: ", name);
    for (const CLI::Option* opt : app->get_options()) {
      if (!opt->get_positional()) continue;
      const std::string word = opt->get_name();
      absl::StrAppend(&usage, " ", opt->get_required() ? word : absl::StrCat("[", word, "]"));
    }
    if (HasSubcommands(*app)) absl::StrAppend(&usage, " VERB");
    return absl::StrCat(usage, " [FLAGS]\n");
  }

  // "  run KERNEL      run once: ..." in the list of commands.
  std::string make_subcommand(const CLI::App* sub) const override {
    std::string name = sub->get_name();
    for (const CLI::Option* opt : sub->get_options()) {
      if (!opt->get_positional()) continue;
      const std::string word = opt->get_name();
      absl::StrAppend(&name, " ", opt->get_required() ? word : absl::StrCat("[", word, "]"));
    }
    if (HasSubcommands(*sub)) absl::StrAppend(&name, " VERB");
    std::stringstream out;
    CLI::detail::format_help(out, name, sub->get_description(), get_column_width());
    return out.str();
  }

 private:
  static bool HasSubcommands(const CLI::App& app) {
    return !app.get_subcommands([](const CLI::App*) { return true; }).empty();
  }
};

// --NAME VALUE (the last one given counts).
CLI::Option* Value(CLI::App* app, const std::string& name, const std::string& type,
                   const std::string& help, const char* group = kFlagGroup) {
  return app->add_option("--" + name)
      ->description(help)
      ->type_name(type)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->group(group);
}

// --NAME VALUE, repeatable: one value per occurrence, every one kept.
CLI::Option* Repeated(CLI::App* app, const std::string& name, const std::string& type,
                      const std::string& help, const char* group = kCallGroup) {
  return app->add_option("--" + name)
      ->description(help + "; repeatable")
      ->type_name(type)
      ->take_all()
      ->expected(1)
      ->allow_extra_args(false)
      ->group(group);
}

CLI::Option* Flag(CLI::App* app, const std::string& name, const std::string& help,
                  const char* group = kFlagGroup) {
  return app->add_flag("--" + name)->description(help)->group(group);
}

CLI::App* Command(CLI::App* parent, const std::string& name, const std::string& help) {
  CLI::App* app = parent->add_subcommand(name, help);
  app->group(parent->get_parent() == nullptr ? "commands" : "verbs");
  app->allow_extras();
  app->get_help_ptr()->group(kFlagGroup)->description("print this help");
  app->footer(
      "Global flags (--target, --token-file, --tls..., --deadline, --json) may come before or\n"
      "after the command: see kernelserve --help.");
  return app;
}

void AddGlobalFlags(CLI::App* app) {
  Value(app, "target", "HOST:PORT", "the server (default 127.0.0.1:50051)", kGlobalGroup)
      ->envname(kTargetEnv);
  Value(app, "token-file", "FILE", "a file holding the bearer token to send", kGlobalGroup)
      ->envname(kTokenFileEnv);
  Flag(app, "tls", "connect with TLS (implied by --tls-ca, --tls-cert, --tls-key)", kGlobalGroup);
  Value(app, "tls-ca", "FILE", "PEM roots to trust instead of the system's", kGlobalGroup);
  Value(app, "tls-cert", "FILE", "PEM client certificate (mTLS)", kGlobalGroup);
  Value(app, "tls-key", "FILE", "PEM client key (mTLS)", kGlobalGroup);
  Value(app, "deadline", "DURATION", "per call: 250ms, 5s, 1m, seconds; 0 = none (60s)",
        kGlobalGroup);
  Flag(app, "json", "print JSON instead of tables", kGlobalGroup);
}

// The flags of run, bench, tune and cache put: inputs, params, where to run.
void AddCallFlags(CLI::App* app) {
  Repeated(app, "shape", "NAME=[DTYPE:]D0,D1,...",
           "random input (dtypes f32 f16 bf16 i32 i64 bool f8_e4m3 f8_e5m2)");
  Repeated(app, "input", "NAME=[DTYPE:]FILE.npy",
           "input from a .npy file (bf16: '<u2' bits, fp8: '|u1' bits)");
  Repeated(app, "values", "NAME=DTYPE:V0,V1,...", "a short 1-D input, e.g. cu_seqlens=i32:0,3");
  Repeated(app, "param", "KEY=VALUE", "a kernel param, typed by its schema (see kernels)");
  Value(app, "platform", "P",
        "run on this platform: auto (default), cpu, cuda (own kernels), cudnn", kCallGroup);
  Value(app, "device", "N", "run on this device", kCallGroup);
  Value(app, "seed", "N", "seed of the random inputs (0)", kCallGroup);
}

void AddConfigFlag(CLI::App* app) {
  Value(app, "config", "KEY=VALUE,...",
        "explicit config, e.g. block_size=64,threads=1 (list shows the fields)");
}

void AddCacheVerbs(CLI::App* cache) {
  CLI::App* ls = Command(cache, "ls", "every cached config, or those of KERNEL");
  ls->add_option("KERNEL")->description("a kernel name or prefix");
  CLI::App* get = Command(cache, "get", "the cached configs whose key starts with KEY");
  get->add_option("KEY")->description("a cache key or a prefix of it")->required();
  CLI::App* put = Command(cache, "put", "pin --config for the call the flags describe");
  put->add_option("KERNEL")->description("the kernel")->required();
  AddCallFlags(put);
  AddConfigFlag(put);
  CLI::App* rm = Command(cache, "rm", "delete the config of KEY (NOT_FOUND when none is held)");
  rm->add_option("KEY")->description("the full cache key")->required();
  Value(rm, "fingerprint", "F", "the device fingerprint (default: the server's first device)");
}

// --tensor and --output-to of run and bench: inputs from and outputs into resident tensors.
void AddResidentFlags(CLI::App* app) {
  Repeated(app, "tensor", "NAME=@TENSOR",
           "input NAME from your resident tensor TENSOR, sent by name");
  Repeated(app, "output-to", "OUT=@TENSOR",
           "write output OUT into your resident tensor TENSOR (its dtype and shape)");
}

void AddTensorVerbs(CLI::App* tensor) {
  CLI::App* create = Command(tensor, "create", "create a resident tensor (zeros or a file's)");
  create->add_option("NAME")->description("1 to 128 printable characters, no space")->required();
  Value(create, "input-like", "SPEC",
        "DTYPE:D0,D1,... (zeros, e.g. f32:4,128) or [DTYPE:]FILE.npy (its contents)");
  Flag(create, "zeros", "with a FILE.npy: its dtype and shape, contents zeros");
  Value(create, "device", "N", "a GPU, or -1 for host memory (default: the server places it)");
  Value(create, "ttl", "DURATION",
        "idle time before it expires: 10m, 1h, seconds (default: the server's --resident-ttl)");
  CLI::App* write = Command(tensor, "write", "write a .npy file's bytes into a resident tensor");
  write->add_option("NAME")->description("the resident tensor")->required();
  write->add_option("FILE")->description("a .npy file (bf16: '<u2' bits)")->required();
  Value(write, "row", "R", "its rows go from row R of dimension 0 on (0)");
  Value(write, "byte-offset", "B", "its bytes go from byte B on, whatever the shape");
  CLI::App* read = Command(tensor, "read", "read a resident tensor, or rows of it");
  read->add_option("NAME")->description("the resident tensor")->required();
  Value(read, "rows", "A:B", "rows A to B-1 of dimension 0 (A: to the last, :B from the first)");
  read->add_option("-o,--output")
      ->description("write it to FILE.npy")
      ->type_name("FILE.npy")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->group(kFlagGroup);
  CLI::App* ls = Command(tensor, "ls", "your resident tensors, and the server's start time");
  ls->add_option("NAME")->description("only this tensor");
  Value(ls, "owner", "IDENTITY", "another identity's, or * for every one (admins)");
  CLI::App* rm = Command(tensor, "rm", "delete a resident tensor, or --all of them");
  rm->add_option("NAME")->description("the resident tensor");
  Flag(rm, "all", "every one not in use");
  Value(rm, "owner", "IDENTITY", "another identity's, or * for every one (admins)");
}

void AddCallCommands(CLI::App* app) {
  CLI::App* run = Command(app, "run", "run once: outputs (shape, stats), config, source, timings");
  run->add_option("KERNEL")->description("the kernel (kernelserve kernels lists them)")->required();
  AddCallFlags(run);
  AddResidentFlags(run);
  AddConfigFlag(run);
  Value(run, "output-dir", "DIR", "write DIR/NAME.npy for every output");
  Flag(run, "autotune", "allow tuning on a cache miss for this call");
  Value(run, "shared-memory", "auto|none|system",
        "inputs through a shared-memory region of this host (auto: local server, >= 1 MiB)");
  run->footer(
      "--shared-memory=auto (the default) sends inputs of 1 MiB or more through a POSIX\n"
      "shared-memory region when the server is on this host (unix:, localhost, 127.x, [::1])\n"
      "and serves system regions, and falls back to the message (one note on stderr) when it\n"
      "refuses the region; none sends them in the message; system always uses a region.\n\n" +
      run->get_footer());
  CLI::App* bench = Command(app, "bench", "load test: throughput, latency percentiles, phases");
  bench->add_option("KERNEL")->description("the kernel")->required();
  AddCallFlags(bench);
  AddResidentFlags(bench);
  AddConfigFlag(bench);
  Flag(bench, "autotune", "allow tuning on a cache miss");
  Value(bench, "concurrency", "N", "calls in flight, 1..4096 (1)");
  Value(bench, "duration", "DURATION", "how long to send (5s)");
  Value(bench, "requests", "N", "stop after N calls; 0 = no limit (0)");
  Value(bench, "pause", "DURATION",
        "each thread waits this long between its calls, so that each finds the server and the "
        "GPU idle (0)");
  Value(bench, "protocol", "native|v2", "kernelserve.v1 Execute, or KServe v2 ModelInfer (native)");
  Value(bench, "shared-memory", "auto|none|system|cuda",
        "inputs and outputs in a shared-memory region or a GPU buffer; server on this host "
        "(auto)");
  bench->footer(
      "--protocol=v2 sends each call as a KServe v2 ModelInfer (inference.GRPCInferenceService,\n"
      "same port, token, TLS and deadline); --config, --autotune, --platform, --device and a\n"
      "KERNEL@VERSION id are native only.\n"
      "--shared-memory=system puts the inputs and outputs in a POSIX shared-memory region,\n"
      "--shared-memory=cuda in a buffer on GPU --device (default 0; the CUDA runtime is loaded\n"
      "then), registered with the server (which must run on this host), so each call sends\n"
      "references only. auto (the default) takes a system region as run does (local server\n"
      "serving them, inputs of 1 MiB or more; its refusal is a note on stderr), none never.\n\n" +
      bench->get_footer());
  CLI::App* tune = Command(app, "tune", "autotune for the shapes: every candidate, the winner");
  tune->add_option("KERNEL")->description("the kernel")->required();
  AddCallFlags(tune);
  Value(tune, "budget", "DURATION",
        "start no candidate after this long and answer with the best so far (kept in the "
        "server's memory, not its config store): 30s, 500ms, seconds (default: the server's "
        "--autotune-budget, also the most it gives)");
}

}  // namespace

std::unique_ptr<CLI::App> MakeApp() {
  auto app = std::make_unique<CLI::App>(
      "Calls a kernelserve server (kernelserve.v1) from the command line.", "kernelserve");
  app->formatter(std::make_shared<HelpFormatter>());
  app->fallthrough();
  app->allow_extras();
  app->require_subcommand(0, 1);
  app->get_help_ptr()->group(kGlobalGroup)->description("print this help");
  app->set_version_flag("--version", VersionString(), "print the client's version")
      ->group(kGlobalGroup);
  AddGlobalFlags(app.get());
  Command(app.get(), "health", "grpc.health.v1 status of the server or SERVICE")
      ->add_option("SERVICE")
      ->description("a service name (default: the whole server)");
  Command(app.get(), "info", "server version, devices, cache tiers, policy, limits");
  Command(app.get(), "kernels", "kernels with inputs and outputs (dtype, shape), params");
  AddCallCommands(app.get());
  AddCacheVerbs(Command(app.get(), "cache", "the server's config cache: ls, get, put, rm"));
  AddTensorVerbs(Command(app.get(), "tensor",
                         "resident tensors kept on the server: create, write, read, ls, rm"));
  CLI::App* help =
      Command(app.get(), "help", "help of the tool, a COMMAND, a cache or tensor VERB");
  help->add_option("COMMAND")->description("a command");
  help->add_option("VERB")->description("a verb of the command (cache, tensor)");
  app->footer(
      "Environment: KERNELSERVE_TARGET and KERNELSERVE_TOKEN_FILE stand for --target and\n"
      "--token-file when the flag is absent.\n"
      "kernelserve help COMMAND (or COMMAND --help) shows a command's arguments and flags.\n"
      "Exit status: 0; 2 for a command line that does not parse (unknown command or flag,\n"
      "missing argument); otherwise the gRPC status code of the failure (3 invalid argument,\n"
      "5 not found, 14 unavailable, 16 unauthenticated, ...).");
  return app;
}

}  // namespace kernelserve::cli
