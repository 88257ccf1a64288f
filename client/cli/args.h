// The parsed command line of the kernelserve CLI (client/cli/parser.h fills it) and the value
// syntaxes of --shape, --values, --input, --param and --config.
// All functions are pure and thread-safe.
#ifndef KERNELSERVE_CLIENT_CLI_ARGS_H_
#define KERNELSERVE_CLIENT_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/kernel_config.h"
#include "core/tensor.h"

namespace kernelserve::cli {

// A command line split into positional arguments and flags. A value type.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;  // every value of each flag, in order

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  // The last value of `name`, or `fallback` when absent.
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  // Every value of `name` (empty when absent).
  std::vector<std::string> GetAll(const std::string& name) const;
  // Typed reads of the last value; InvalidArgument naming the flag and the expected form.
  absl::StatusOr<bool> GetBool(const std::string& name) const;  // absent = false
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  // "250ms", "5s", "1m", or a bare number of seconds.
  absl::StatusOr<absl::Duration> GetDuration(const std::string& name,
                                             absl::Duration fallback) const;
};

// --shape NAME=[DTYPE:]D0,D1,...  (dtype default f32), e.g. "x=f32:4,128,64".
absl::StatusOr<std::pair<std::string, TensorSpec>> ParseShapeArg(const std::string& text);
// --values NAME=DTYPE:V0,V1,...  a 1-D tensor, e.g. "cu_seqlens=i32:0,3,10".
absl::StatusOr<std::pair<std::string, Tensor>> ParseValuesArg(const std::string& text);

// --input NAME=[DTYPE:]PATH. DTYPE, when given, is the dtype the file must hold (bf16 reads
// '<u2' files as bf16 bits).
struct InputArg {
  std::string name;
  std::string path;
  std::optional<DType> dtype;
};
absl::StatusOr<InputArg> ParseInputArg(const std::string& text);

// --param KEY=VALUE.
absl::StatusOr<std::pair<std::string, std::string>> ParseParamArg(const std::string& text);
// --config KEY=VALUE,KEY=VALUE,...: the fixed fields of KernelConfig by their names, any other
// name a platform's named field (an integer; the server checks the name), e.g.
// "block_q=32,block_k=64,threads=1,platform=cpu".
absl::StatusOr<KernelConfig> ParseConfigArg(const std::string& text);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_ARGS_H_
