#include "client/cli/args.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

// Splits "NAME=REST"; InvalidArgument quoting `form` when there is no name.
absl::StatusOr<std::pair<std::string, std::string>> SplitNamed(absl::string_view text,
                                                               absl::string_view form) {
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': expected ", form));
  }
  return std::make_pair(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
}

// "4,128,64" -> {4,128,64}; every dim >= 0.
absl::StatusOr<Shape> ParseDims(absl::string_view text, absl::string_view what) {
  Shape shape;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &dim) || dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": bad dimension '", part, "': expected integers >= 0"));
    }
    shape.push_back(dim);
  }
  return shape;
}

}  // namespace

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = flags.find(name);
  return it == flags.end() ? std::vector<std::string>() : it->second;
}

absl::StatusOr<bool> Args::GetBool(const std::string& name) const {
  if (!Has(name)) return false;
  bool value = false;
  if (!absl::SimpleAtob(Get(name), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "='", Get(name), "': expected true or false"));
  }
  return value;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(Get(name), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "='", Get(name), "': expected an integer"));
  }
  return value;
}

absl::StatusOr<absl::Duration> Args::GetDuration(const std::string& name,
                                                 absl::Duration fallback) const {
  if (!Has(name)) return fallback;
  const std::string text = Get(name);
  absl::Duration value;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds) && seconds >= 0) return absl::Seconds(seconds);
  if (absl::ParseDuration(text, &value) && value >= absl::ZeroDuration()) return value;
  return absl::InvalidArgumentError(absl::StrCat(
      "--", name, "='", text, "': expected a duration such as 250ms, 5s, 1m or seconds"));
}

absl::StatusOr<std::pair<std::string, TensorSpec>> ParseShapeArg(const std::string& text) {
  constexpr absl::string_view kForm = "NAME=[DTYPE:]D0,D1,... (e.g. x=f32:4,128,64)";
  KS_ASSIGN_OR_RETURN(auto named, SplitNamed(text, kForm));
  absl::string_view rest = named.second;
  TensorSpec spec;
  if (const size_t colon = rest.find(':'); colon != absl::string_view::npos) {
    KS_ASSIGN_OR_RETURN(spec.dtype, ParseDType(std::string(rest.substr(0, colon))));
    rest = rest.substr(colon + 1);
  }
  if (rest.empty()) return absl::InvalidArgumentError(absl::StrCat("'", text, "': no dims"));
  KS_ASSIGN_OR_RETURN(spec.shape, ParseDims(rest, absl::StrCat("--shape ", named.first)));
  return std::make_pair(named.first, spec);
}

absl::StatusOr<std::pair<std::string, Tensor>> ParseValuesArg(const std::string& text) {
  constexpr absl::string_view kForm = "NAME=DTYPE:V0,V1,... (e.g. cu_seqlens=i32:0,3,10)";
  KS_ASSIGN_OR_RETURN(auto named, SplitNamed(text, kForm));
  const size_t colon = named.second.find(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': expected ", kForm));
  }
  KS_ASSIGN_OR_RETURN(DType dtype, ParseDType(named.second.substr(0, colon)));
  std::vector<double> values;
  for (absl::string_view part : absl::StrSplit(named.second.substr(colon + 1), ',')) {
    double value = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--values ", named.first, ": '", part, "' is not a number"));
    }
    values.push_back(value);
  }
  const Shape shape = {static_cast<int64_t>(values.size())};
  if (HoldsFloats(dtype)) {
    return std::make_pair(
        named.first,
        Tensor::FromFloats(dtype, shape, std::vector<float>(values.begin(), values.end())));
  }
  std::vector<int64_t> ints;
  for (double v : values) {
    if (v != static_cast<double>(static_cast<int64_t>(v))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--values ", named.first, ": ", v, " is not an integer"));
    }
    ints.push_back(static_cast<int64_t>(v));
  }
  return std::make_pair(named.first, Tensor::FromInts(dtype, shape, ints));
}

absl::StatusOr<InputArg> ParseInputArg(const std::string& text) {
  KS_ASSIGN_OR_RETURN(auto named, SplitNamed(text, "NAME=[DTYPE:]PATH (e.g. x=x.npy)"));
  InputArg input{named.first, named.second, std::nullopt};
  if (const size_t colon = input.path.find(':'); colon != std::string::npos) {
    absl::StatusOr<DType> dtype = ParseDType(input.path.substr(0, colon));
    if (dtype.ok()) {
      input.dtype = *dtype;
      input.path = input.path.substr(colon + 1);
    }
  }
  if (input.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--input '", text, "': empty path"));
  }
  return input;
}

absl::StatusOr<std::pair<std::string, std::string>> ParseParamArg(const std::string& text) {
  return SplitNamed(text, "KEY=VALUE (e.g. causal=true)");
}

absl::StatusOr<KernelConfig> ParseConfigArg(const std::string& text) {
  KernelConfig config;
  const std::map<absl::string_view, int*> ints = {
      {"block_q", &config.block_q},       {"block_k", &config.block_k},
      {"block_d", &config.block_d},       {"num_warps", &config.num_warps},
      {"num_stages", &config.num_stages}, {"block_size", &config.block_size},
      {"priority", &config.priority}};
  const std::map<absl::string_view, std::string*> strings = {{"platform", &config.platform},
                                                             {"algorithm", &config.algorithm}};
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    KS_ASSIGN_OR_RETURN(auto kv, SplitNamed(absl::StripAsciiWhitespace(item), "KEY=VALUE"));
    if (auto it = ints.find(kv.first); it != ints.end()) {
      if (!absl::SimpleAtoi(kv.second, it->second)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--config ", kv.first, "='", kv.second, "': expected an integer"));
      }
    } else if (auto st = strings.find(kv.first); st != strings.end()) {
      *st->second = kv.second;
    } else {
      // A platform's named field ("threads", "lanes", "plan"): the server checks the name.
      int64_t value = 0;
      if (!absl::SimpleAtoi(kv.second, &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--config ", kv.first, "='", kv.second,
            "': expected an integer (fields other than platform and algorithm are integers)"));
      }
      config.named[std::string(kv.first)] = value;
    }
  }
  if (config == KernelConfig{}) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config '", text, "': sets no field (e.g. block_size=64,threads=1)"));
  }
  return config;
}

}  // namespace kernelserve::cli
