// The command line as CLI11 parses it: commands, flags anywhere, help, version, environment
// variables and usage errors with suggestions.
#include "client/cli/parser.h"

#include <cstdlib>
#include <regex>

#include "client/cli/suggest.h"
#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

using Strings = std::vector<std::string>;

CommandLine Parse(const Strings& argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argv);
  EXPECT_TRUE(line.ok()) << line.status();
  return line.value_or(CommandLine{});
}

// The message of the usage error `argv` makes (and checks that it is one).
std::string UsageMessage(const Strings& argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argv);
  EXPECT_FALSE(line.ok());
  EXPECT_TRUE(IsUsageError(line.status())) << line.status();
  return std::string(line.status().message());
}

TEST(ParseCommandLineTest, FlagsBeforeAndAfterTheCommandRepeatedAndBothForms) {
  CommandLine line = Parse({"--target=h:1", "run", "--shape", "x=f32:2,3", "mean_pooling",
                            "--shape=mask=bool:2", "--json", "--seed", "4", "--seed=5"});
  EXPECT_TRUE(line.print.empty());
  const Args& args = line.args;
  EXPECT_EQ(args.positional, (Strings{"run", "mean_pooling"}));
  EXPECT_EQ(args.GetAll("shape"), (Strings{"x=f32:2,3", "mask=bool:2"}));
  EXPECT_EQ(args.Get("target"), "h:1");
  EXPECT_EQ(args.Get("seed"), "5");
  EXPECT_TRUE(args.GetBool("json").value());
  EXPECT_FALSE(args.Has("duration"));
  EXPECT_FALSE(args.Has("tls"));
}

TEST(ParseCommandLineTest, CacheVerbsAndOptionalArguments) {
  EXPECT_EQ(Parse({"cache", "rm", "k1", "--fingerprint", "f"}).args.positional,
            (Strings{"cache", "rm", "k1"}));
  EXPECT_EQ(Parse({"cache", "rm", "k1", "--fingerprint", "f"}).args.Get("fingerprint"), "f");
  EXPECT_EQ(Parse({"cache", "ls"}).args.positional, (Strings{"cache", "ls"}));
  EXPECT_EQ(Parse({"health"}).args.positional, (Strings{"health"}));
  EXPECT_EQ(Parse({"health", "svc"}).args.positional, (Strings{"health", "svc"}));
  EXPECT_EQ(Parse({"health", "--", "--json"}).args.positional, (Strings{"health", "--json"}));
}

TEST(ParseCommandLineTest, HelpOfTheToolOfACommandAndOfAVerb) {
  const std::string root = Parse({"--help"}).print;
  EXPECT_NE(root.find("usage: kernelserve"), std::string::npos) << root;
  for (const char* command : {"health", "info", "kernels", "run", "bench", "tune", "cache"}) {
    EXPECT_NE(root.find(command), std::string::npos) << command;
  }
  EXPECT_EQ(Parse({"-h"}).print, root);
  EXPECT_EQ(Parse({"help"}).print, root);
  const std::string run = Parse({"run", "--help"}).print;
  EXPECT_NE(run.find("usage: kernelserve run KERNEL [FLAGS]"), std::string::npos) << run;
  EXPECT_NE(run.find("--output-dir"), std::string::npos) << run;
  EXPECT_EQ(run.find("--concurrency"), std::string::npos) << run;  // bench's
  EXPECT_EQ(Parse({"help", "run"}).print, run);
  EXPECT_EQ(Parse({"run", "-h"}).print, run);
  const std::string rm = Parse({"help", "cache", "rm"}).print;
  EXPECT_NE(rm.find("usage: kernelserve cache rm KEY [FLAGS]"), std::string::npos) << rm;
  EXPECT_NE(rm.find("--fingerprint"), std::string::npos) << rm;
  EXPECT_EQ(Parse({"cache", "rm", "--help"}).print, rm);
  EXPECT_NE(UsageMessage({"help", "rn"}).find("did you mean 'run'?"), std::string::npos);
}

TEST(ParseCommandLineTest, VersionIsTheClients) {
  const std::string version = Parse({"--version"}).print;
  EXPECT_TRUE(std::regex_match(version, std::regex("kernelserve [0-9]+\\.[0-9]+\\.[0-9]+ \\(git "
                                                   "[^)]+\\)\n")))
      << version;
}

TEST(ParseCommandLineTest, EnvironmentStandsForAbsentFlags) {
  setenv("KERNELSERVE_TARGET", "env-host:1", 1);
  setenv("KERNELSERVE_TOKEN_FILE", "/env/token", 1);
  CommandLine from_env = Parse({"info"});
  CommandLine flags_win = Parse({"--target=flag-host:2", "info", "--token-file=/flag/token"});
  unsetenv("KERNELSERVE_TARGET");
  unsetenv("KERNELSERVE_TOKEN_FILE");
  EXPECT_EQ(from_env.args.Get("target"), "env-host:1");
  EXPECT_EQ(from_env.args.Get("token-file"), "/env/token");
  EXPECT_EQ(flags_win.args.Get("target"), "flag-host:2");
  EXPECT_EQ(flags_win.args.Get("token-file"), "/flag/token");
  EXPECT_FALSE(Parse({"info"}).args.Has("target"));
}

TEST(ParseCommandLineTest, UsageErrorsSuggestTheClosestWord) {
  EXPECT_NE(UsageMessage({}).find("no command given"), std::string::npos);
  std::string message = UsageMessage({"rn", "mean_pooling"});
  EXPECT_NE(message.find("unknown command 'rn'; did you mean 'run'?"), std::string::npos)
      << message;
  message = UsageMessage({"frobnicate"});
  EXPECT_NE(message.find("unknown command 'frobnicate'"), std::string::npos) << message;
  EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
  message = UsageMessage({"run", "mean_pooling", "--shap=x=f32:1"});
  EXPECT_NE(message.find("unknown flag --shap; did you mean '--shape'?"), std::string::npos)
      << message;
  message = UsageMessage({"bench", "k", "--concurency", "2"});
  EXPECT_NE(message.find("did you mean '--concurrency'?"), std::string::npos) << message;
  message = UsageMessage({"info", "--shape=x=f32:1"});
  EXPECT_NE(message.find("unknown flag --shape (a flag of run, bench, tune, cache put)"),
            std::string::npos)
      << message;
  message = UsageMessage({"cache", "rn", "k"});
  EXPECT_NE(message.find("unknown verb 'rn'; did you mean 'rm'?"), std::string::npos) << message;
  EXPECT_NE(UsageMessage({"cache"}).find("expected a verb: ls, get, put, rm"), std::string::npos);
  EXPECT_NE(UsageMessage({"cache", "frob"}).find("(verbs: ls, get, put, rm)"), std::string::npos);
  EXPECT_NE(UsageMessage({"run"}).find("KERNEL"), std::string::npos);
  EXPECT_NE(UsageMessage({"run", "k", "--shape"}).find("--shape"), std::string::npos);
  EXPECT_NE(UsageMessage({"info", "kernels"}).find("unexpected argument 'kernels'"),
            std::string::npos);
  EXPECT_NE(UsageMessage({"health", "a", "b"}).find("unexpected argument 'b'"), std::string::npos);
}

TEST(SuggestTest, ClosestMatch) {
  EXPECT_EQ(EditDistance("run", "run"), 0);
  EXPECT_EQ(EditDistance("rnu", "run"), 1);  // a swap
  EXPECT_EQ(EditDistance("", "abc"), 3);
  const Strings commands = {"health", "info", "kernels", "run", "bench", "tune", "cache"};
  EXPECT_EQ(ClosestMatch("rn", commands), "run");
  EXPECT_EQ(ClosestMatch("kernel", commands), "kernels");
  EXPECT_EQ(ClosestMatch("benhc", commands), "bench");
  EXPECT_EQ(ClosestMatch("hea", commands), "health");  // a prefix of one command
  EXPECT_EQ(ClosestMatch("xyzzy", commands), "");
  EXPECT_EQ(DidYouMean("tuen", commands), "; did you mean 'tune'?");
  EXPECT_EQ(DidYouMean("zzz", commands), "");
}

}  // namespace
}  // namespace kernelserve::cli
