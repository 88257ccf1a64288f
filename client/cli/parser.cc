#include "client/cli/parser.h"

#include <algorithm>
#include <memory>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/app.h"
#include "client/cli/suggest.h"

namespace kernelserve::cli {
namespace {

constexpr absl::string_view kUsagePayload = "kernelserve.cli/usage";

using Chain = std::vector<const CLI::App*>;

// The root, then each subcommand the line selected.
Chain ParsedChain(const CLI::App& root) {
  Chain chain = {&root};
  for (std::vector<CLI::App*> subs = root.get_subcommands(); !subs.empty();
       subs = subs.front()->get_subcommands()) {
    chain.push_back(subs.front());
  }
  return chain;
}

// "kernelserve cache rm".
std::string Path(const Chain& chain) {
  std::vector<std::string> names;
  for (const CLI::App* app : chain) names.push_back(app->get_name());
  return absl::StrJoin(names, " ");
}

// "cache rm: " where a message about `chain` starts; "" for the root.
std::string Prefix(const Chain& chain) {
  std::vector<std::string> names;
  for (size_t i = 1; i < chain.size(); ++i) names.push_back(chain[i]->get_name());
  return names.empty() ? "" : absl::StrCat(absl::StrJoin(names, " "), ": ");
}

std::vector<std::string> SubcommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

// "--shape" of a flag.
std::string FlagName(const CLI::Option& opt) { return opt.get_name(false, false); }

// Every flag that the last command of `chain` takes, with the global ones.
std::vector<std::string> FlagNames(const Chain& chain) {
  std::vector<std::string> names;
  for (const CLI::App* app : chain) {
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->nonpositional()) names.push_back(FlagName(*opt));
    }
  }
  return names;
}

// The commands (and cache verbs) that take `flag`, e.g. "run, bench, tune, cache put".
std::string CommandsTaking(const CLI::App& root, const std::string& flag) {
  std::vector<std::string> commands;
  auto visit = [&](const CLI::App& app, const std::string& prefix, auto& self) -> void {
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      const std::string name = prefix + sub->get_name();
      if (sub->get_option_no_throw(flag) != nullptr) commands.push_back(name);
      self(*sub, name + " ", self);
    }
  };
  visit(root, "", visit);
  return absl::StrJoin(commands, ", ");
}

absl::Status UnknownFlag(const CLI::App& root, const Chain& chain, const std::string& word) {
  const std::string flag = word.substr(0, word.find('='));
  std::string message = absl::StrCat(Prefix(chain), "unknown flag ", flag);
  if (const std::string hint = DidYouMean(flag, FlagNames(chain)); !hint.empty()) {
    absl::StrAppend(&message, hint);
  } else if (const std::string owners = CommandsTaking(root, flag); !owners.empty()) {
    absl::StrAppend(&message, " (a flag of ", owners, ")");
  }
  return UsageError(absl::StrCat(message, " (see ", Path(chain), " --help)"));
}

// A word the line has no place for: an unknown flag, command or verb, or an extra argument.
absl::Status Unexpected(const CLI::App& root, const Chain& chain, const std::string& word) {
  if (absl::StartsWith(word, "-") && word.size() > 1) return UnknownFlag(root, chain, word);
  const std::vector<std::string> names = SubcommandNames(*chain.back());
  if (names.empty()) {
    return UsageError(absl::StrCat(Prefix(chain), "unexpected argument '", word, "' (see ",
                                   Path(chain), " --help)"));
  }
  const char* what = chain.size() == 1 ? "command" : "verb";
  return UsageError(absl::StrCat(Prefix(chain), "unknown ", what, " '", word, "'",
                                 DidYouMean(word, names), " (", what,
                                 "s: ", absl::StrJoin(names, ", "), ")"));
}

std::string HelpOf(const CLI::App& app, const std::string& path) {
  return app.get_formatter()->make_help(&app, path, CLI::AppFormatMode::Normal);
}

// `help [COMMAND [VERB]]`: the help text of the app the words name.
absl::StatusOr<std::string> HelpCommand(const CLI::App& root, const CLI::App& help) {
  const CLI::App* app = &root;
  Chain chain = {&root};
  std::vector<std::string> words = help.get_option("COMMAND")->results();
  for (const std::string& verb : help.get_option("VERB")->results()) words.push_back(verb);
  for (const std::string& word : words) {
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == word) next = sub;
    }
    if (next == nullptr) return Unexpected(root, chain, word);
    app = next;
    chain.push_back(app);
  }
  return HelpOf(*app, Path(chain));
}

Args ToArgs(const Chain& chain) {
  Args args;
  for (size_t i = 0; i < chain.size(); ++i) {
    const CLI::App* app = chain[i];
    if (i > 0) args.positional.push_back(app->get_name());
    for (const CLI::Option* opt : app->get_options()) {
      if (opt->results().empty() || opt == app->get_help_ptr()) continue;
      if (opt->get_positional()) {
        for (const std::string& value : opt->results()) args.positional.push_back(value);
      } else {
        args.flags[FlagName(*opt).substr(2)] = opt->results();
      }
    }
  }
  return args;
}

// The line after CLI11 has parsed it without error.
absl::StatusOr<CommandLine> Interpret(const CLI::App& root) {
  const Chain chain = ParsedChain(root);
  for (const std::string& extra : root.remaining(true)) {
    if (extra != "--") return Unexpected(root, chain, extra);  // CLI11 keeps the "--" it read
  }
  if (chain.size() == 1) {
    return UsageError("no command given; kernelserve --help lists the commands");
  }
  if (chain[1]->get_name() == "help") {
    CommandLine line;
    absl::StatusOr<std::string> text = HelpCommand(root, *chain[1]);
    if (!text.ok()) return text.status();
    line.print = *std::move(text);
    return line;
  }
  if (const std::vector<std::string> verbs = SubcommandNames(*chain.back()); !verbs.empty()) {
    return UsageError(absl::StrCat(Prefix(chain), "expected a verb: ", absl::StrJoin(verbs, ", ")));
  }
  return CommandLine{ToArgs(chain), ""};
}

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& argv) {
  std::unique_ptr<CLI::App> root = MakeApp();
  std::vector<std::string> reversed(argv.rbegin(), argv.rend());  // CLI11 parses from the back
  try {
    root->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return CommandLine{Args{}, root->help()};
  } catch (const CLI::CallForVersion& version) {
    return CommandLine{Args{}, absl::StrCat(version.what(), "\n")};
  } catch (const CLI::ParseError& error) {
    const Chain chain = ParsedChain(*root);
    return UsageError(absl::StrCat(Prefix(chain), error.what(), " (see ", Path(chain), " --help)"));
  }
  return Interpret(*root);
}

}  // namespace kernelserve::cli
