// Output helpers of the kernelserve CLI: aligned text tables and JSON renderings.
// All functions are thread-safe; a Table is not.
#ifndef KERNELSERVE_CLIENT_CLI_FORMAT_H_
#define KERNELSERVE_CLIENT_CLI_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/tensor.h"
#include "google/protobuf/message.h"
#include "kernelserve/v1/kernel_service.pb.h"
#include "nlohmann/json.hpp"

namespace kernelserve::cli {

// A text table: the header, a rule, then the rows; columns left-aligned, two spaces apart.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  // Missing cells print empty; extra cells are dropped.
  void AddRow(std::vector<std::string> row);
  std::string ToString() const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

// "memory", "heuristic", ...; "unspecified" for CONFIG_SOURCE_UNSPECIFIED.
std::string SourceName(v1::ConfigSource source);
// "block_q=32 block_k=64 ..." of a wire config; "(default)" when no field is set.
std::string ConfigString(const v1::KernelConfig& config);
// A wire message in the proto3 JSON mapping with the .proto field names; default values kept.
nlohmann::json MessageJson(const google::protobuf::Message& message);
// Microseconds as "850 us", "12.3 ms" or "1.50 s".
std::string FormatMicros(double us);
// The tune command's progress line: "tuning: 3/12 candidates, best 850 us, 1.2 s" ("best -"
// before any candidate matched; "k/?" until the total is known).
std::string TuneProgressLine(const v1::AutotuneProgress& progress);
// A --budget as AutotuneRequest.time_budget_ms: 0 stays 0 (the server's budget); a budget
// under a millisecond is one.
int64_t TimeBudgetMillis(absl::Duration budget);
// Bytes as "512 bytes", "1.5 KiB", "64 MiB" (4 significant digits, binary units up to TiB).
std::string FormatBytes(uint64_t bytes);
// {"dtype", "shape", "min", "max", "mean"} of a tensor (stats over its values as doubles;
// absent for an empty tensor).
nlohmann::json TensorSummary(const Tensor& tensor);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_FORMAT_H_
