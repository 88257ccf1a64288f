// "Did you mean ...?" for a mistyped command, verb or flag of the kernelserve CLI.
// All functions are pure and thread-safe.
#ifndef KERNELSERVE_CLIENT_CLI_SUGGEST_H_
#define KERNELSERVE_CLIENT_CLI_SUGGEST_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kernelserve::cli {

// The number of single-character insertions, deletions, substitutions and swaps of two
// neighbours that turn `a` into `b` (optimal string alignment distance).
int EditDistance(absl::string_view a, absl::string_view b);

// The candidate closest to `word`, when it is close enough to be a typo (a distance of at most
// a third of its length, at least 1; or `word` is a prefix of exactly one candidate); "" when
// none is. Ties go to the first candidate.
std::string ClosestMatch(absl::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'run'?", or "" when no candidate is close.
std::string DidYouMean(absl::string_view word, const std::vector<std::string>& candidates);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_SUGGEST_H_
