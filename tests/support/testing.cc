#include "tests/support/testing.h"

#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kernelserve {
namespace {

AllCloseResult SizeMismatch(const std::string& actual, const std::string& expected) {
  AllCloseResult result;
  result.ok = false;
  result.message = absl::StrCat("shape mismatch: actual ", actual, ", expected ", expected);
  return result;
}

// How far `a` is beyond tolerance of `e` (> 0 means outside), and |a - e| when both finite.
double Excess(double a, double e, double rtol, double atol) {
  if (std::isnan(a) || std::isnan(e)) return std::numeric_limits<double>::infinity();
  if (std::isinf(a) || std::isinf(e)) {
    return a == e ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return std::fabs(a - e) - (atol + rtol * std::fabs(e));
}

}  // namespace

AllCloseResult AllClose(absl::Span<const double> actual, absl::Span<const double> expected,
                        double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return SizeMismatch(absl::StrCat(actual.size(), " elements"),
                        absl::StrCat(expected.size(), " elements"));
  }
  AllCloseResult result;
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (std::isfinite(a) && std::isfinite(e)) {
      result.max_abs_error = std::max(result.max_abs_error, std::fabs(a - e));
    }
    const double excess = Excess(a, e, rtol, atol);
    if (!(excess > 0.0)) continue;
    ++result.num_bad;
    if (result.worst_index < 0 || excess > worst) {
      worst = excess;
      result.worst_index = static_cast<int64_t>(i);
    }
  }
  if (result.num_bad == 0) return result;
  result.ok = false;
  const size_t w = static_cast<size_t>(result.worst_index);
  result.message = absl::StrFormat(
      "%d of %d elements differ (rtol=%g, atol=%g); worst at index %d: actual %.9g, expected "
      "%.9g, |diff| %.3g > tolerance %.3g",
      result.num_bad, actual.size(), rtol, atol, result.worst_index, actual[w], expected[w],
      std::fabs(actual[w] - expected[w]), atol + rtol * std::fabs(expected[w]));
  return result;
}

AllCloseResult AllClose(const std::vector<float>& actual, const std::vector<float>& expected,
                        double rtol, double atol) {
  const std::vector<double> a(actual.begin(), actual.end());
  const std::vector<double> e(expected.begin(), expected.end());
  return AllClose(a, e, rtol, atol);
}

AllCloseResult AllClose(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  if (actual.shape() != expected.shape()) {
    return SizeMismatch(actual.spec().DebugString(), expected.spec().DebugString());
  }
  return AllClose(actual.ToDoubles(), expected.ToDoubles(), rtol, atol);
}

double RelativeError(absl::Span<const double> a, absl::Span<const double> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  if (norm == 0.0) return diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff) / std::sqrt(norm);
}

double RelativeError(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return std::numeric_limits<double>::infinity();
  return RelativeError(a.ToDoubles(), b.ToDoubles());
}

TensorMap RandomAttentionInputs(const AttentionInputsOptions& options) {
  const AttentionInputsOptions& o = options;
  TensorMap inputs;
  inputs["q"] = RandomTensor(o.dtype, {o.B, o.Sq, o.Hq, o.D}, o.seed);
  inputs["k"] = RandomTensor(o.dtype, {o.B, o.Sk, o.Hkv, o.D}, o.seed + 1);
  inputs["v"] = RandomTensor(o.dtype, {o.B, o.Sk, o.Hkv, o.D}, o.seed + 2);
  return inputs;
}

std::string LseMismatch(const Tensor& got, const Tensor& want) {
  if (!(got.spec() == want.spec())) return "lse spec differs";
  const std::vector<float> g = got.ToFloats();
  const std::vector<float> w = want.ToFloats();
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isinf(w[i])) {
      if (g[i] != w[i]) return absl::StrCat("lse[", i, "] = ", g[i], ", expected ", w[i]);
      continue;
    }
    if (std::isnan(g[i]) || std::isinf(g[i])) {
      return absl::StrCat("lse[", i, "] = ", g[i], ", expected ", w[i]);
    }
    diff += (g[i] - w[i]) * static_cast<double>(g[i] - w[i]);
    norm += static_cast<double>(w[i]) * w[i];
  }
  if (norm > 0.0 && std::sqrt(diff / norm) >= 1e-3) {
    return absl::StrCat("lse relative error ", std::sqrt(diff / norm), " (limit 1e-3)");
  }
  return "";
}

}  // namespace kernelserve
