#include "client/cli/suggest.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kernelserve::cli {

int EditDistance(absl::string_view a, absl::string_view b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance between the first i characters of a and the first j of b.
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string ClosestMatch(absl::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty()) return "";
  const int limit = std::max<int>(1, static_cast<int>(word.size()) / 3);
  std::string best;
  int best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const int distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (!best.empty()) return best;
  std::vector<std::string> prefixed;
  for (const std::string& candidate : candidates) {
    if (absl::StartsWith(candidate, word)) prefixed.push_back(candidate);
  }
  return prefixed.size() == 1 ? prefixed.front() : "";
}

std::string DidYouMean(absl::string_view word, const std::vector<std::string>& candidates) {
  const std::string match = ClosestMatch(word, candidates);
  return match.empty() ? "" : absl::StrCat("; did you mean '", match, "'?");
}

}  // namespace kernelserve::cli
