#include "server/usage.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "server/build_info.h"

namespace kernelserve::server {
namespace {

constexpr int kHelpColumn = 34;  // where help text starts
constexpr int kLineWidth = 100;

// `text` wrapped at kLineWidth, every line indented to kHelpColumn.
std::string Wrap(absl::string_view text) {
  std::string out;
  int column = kHelpColumn;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column > kHelpColumn && column + 1 + static_cast<int>(word.size()) > kLineWidth) {
      absl::StrAppend(&out, "\n", std::string(kHelpColumn, ' '));
      column = kHelpColumn;
    } else if (column > kHelpColumn) {
      out += ' ';
      ++column;
    }
    absl::StrAppend(&out, word);
    column += static_cast<int>(word.size());
  }
  return out;
}

std::string FlagLine(const absl::CommandLineFlag& flag) {
  std::string head = absl::StrCat("  --", absl::StrReplaceAll(flag.Name(), {{"_", "-"}}), "=",
                                  flag.DefaultValue().empty() ? "\"\"" : flag.DefaultValue());
  if (static_cast<int>(head.size()) + 1 >= kHelpColumn) {
    absl::StrAppend(&head, "\n", std::string(kHelpColumn, ' '));
  } else {
    head.resize(kHelpColumn, ' ');
  }
  return absl::StrCat(head, Wrap(flag.Help()), "\n");
}

}  // namespace

UsageRequest FindUsageRequest(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") return UsageRequest::kHelp;
    if (arg == "--version" || arg == "-version") return UsageRequest::kVersion;
  }
  return UsageRequest::kNone;
}

std::string HelpText(absl::string_view program) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "server/options.cc")) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string out = absl::StrCat(
      "usage: ", program, " [--flag=value ...]\n\n",
      "Serves the registered kernels over gRPC (kernelserve.v1 and grpc.health.v1) until SIGTERM\n"
      "or SIGINT. Flags may be written with dashes or underscores.\n\nflags:\n");
  for (const absl::CommandLineFlag* flag : flags) out += FlagLine(*flag);
  absl::StrAppend(&out,
                  "\n  -h, --help                      this text\n"
                  "  --version                       version, commit and CUDA toolkit\n"
                  "  --helpfull                      also the flags of the libraries linked in\n");
  return out;
}

std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", BuildInfoString());
}

}  // namespace kernelserve::server
