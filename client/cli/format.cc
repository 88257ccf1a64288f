#include "client/cli/format.h"

#include <algorithm>
#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "proto/convert.h"

namespace kernelserve::cli {

Table::Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void Table::AddRow(std::vector<std::string> row) {
  row.resize(rows_[0].size());
  rows_.push_back(std::move(row));
}

std::string Table::ToString() const {
  std::vector<size_t> widths(rows_[0].size(), 0);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < row.size(); ++c) {
      out += row[c];
      if (c + 1 < row.size()) out.append(widths[c] - row[c].size() + 2, ' ');
    }
    return out + "\n";
  };
  std::string out = line(rows_[0]);
  std::vector<std::string> rule;
  for (size_t w : widths) rule.push_back(std::string(w, '-'));
  out += line(rule);
  for (size_t r = 1; r < rows_.size(); ++r) out += line(rows_[r]);
  return out;
}

std::string SourceName(v1::ConfigSource source) {
  const std::string prefix = "CONFIG_SOURCE_";
  const std::string name = v1::ConfigSource_Name(source);
  if (name.size() <= prefix.size()) return absl::StrCat("source ", static_cast<int>(source));
  return absl::AsciiStrToLower(name.substr(prefix.size()));
}

std::string ConfigString(const v1::KernelConfig& config) {
  std::string text = FromProto(config).DebugString();
  return text.empty() ? "(default)" : text;
}

nlohmann::json MessageJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) {
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string FormatBytes(uint64_t bytes) {
  constexpr std::array<const char*, 5> kUnits = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " bytes");
  return absl::StrCat(absl::StrFormat("%.4g", value), " ", kUnits[unit]);
}

std::string FormatMicros(double us) {
  if (us < 1000) return absl::StrFormat("%.0f us", us);
  if (us < 1e6) return absl::StrFormat("%.3g ms", us / 1e3);
  return absl::StrFormat("%.2f s", us / 1e6);
}

std::string TuneProgressLine(const v1::AutotuneProgress& progress) {
  return absl::StrCat(
      "tuning: ", progress.candidates_done(), "/",
      progress.candidates_total() > 0 ? absl::StrCat(progress.candidates_total()) : "?",
      " candidates, best ", progress.best_us() > 0 ? FormatMicros(progress.best_us()) : "-", ", ",
      absl::StrFormat("%.1f s", progress.elapsed_seconds()));
}

int64_t TimeBudgetMillis(absl::Duration budget) {
  if (budget <= absl::ZeroDuration()) return 0;
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(budget));
}

nlohmann::json TensorSummary(const Tensor& tensor) {
  nlohmann::json summary = {{"dtype", std::string(DTypeName(tensor.dtype()))},
                            {"shape", tensor.shape()}};
  const std::vector<double> values = tensor.ToDoubles();
  if (values.empty()) return summary;
  double sum = 0;
  for (double v : values) sum += v;
  summary["min"] = *std::min_element(values.begin(), values.end());
  summary["max"] = *std::max_element(values.begin(), values.end());
  summary["mean"] = sum / static_cast<double>(values.size());
  return summary;
}

}  // namespace kernelserve::cli
