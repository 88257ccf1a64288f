// CallSpec: what `run`, `bench`, `tune` and `cache put` say about one kernel call, and the
// requests built from it.
#ifndef KERNELSERVE_CLIENT_CLI_CALL_SPEC_H_
#define KERNELSERVE_CLIENT_CLI_CALL_SPEC_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/cli/args.h"
#include "client/client.h"
#include "core/attributes.h"
#include "core/kernel_config.h"
#include "core/tensor.h"
#include "kernelserve/v1/kernel_service.pb.h"

namespace kernelserve::cli {

// A value type.
struct CallSpec {
  std::string kernel;                         // the first positional argument after the command
  TensorSpecMap shapes;                       // --shape: random inputs, or shapes only
  TensorMap values;                           // --input (.npy files) and --values
  std::map<std::string, std::string> params;  // --param KEY=VALUE
  std::string platform;                       // --platform
  std::optional<int> device;                  // --device
  std::optional<KernelConfig> config;         // --config
  uint64_t seed = 0;                          // --seed: random inputs use seed, seed+1, ...
  // --tensor NAME=@TENSOR: inputs taken from the caller's resident tensors, input -> tensor.
  std::map<std::string, std::string> resident_inputs;
  // --output-to OUT=@TENSOR: outputs written into resident tensors in place, output -> tensor.
  std::map<std::string, std::string> resident_outputs;
};

// Reads a CallSpec from `args` (positional[1] is the kernel). InvalidArgument naming the bad
// flag; NotFound for a missing .npy file. An input named twice is an error.
absl::StatusOr<CallSpec> CallSpecFromArgs(const Args& args);

// The bytes of input data a request built from `spec` with data carries: random inputs of
// --shape and the tensors of --values and --input. Computed from the shapes, before anything is
// allocated. InvalidArgument naming the input when its size overflows, or naming the size and
// the limit when the total exceeds `limit_bytes` (the largest message the client sends).
absl::StatusOr<int64_t> CheckDataSize(const CallSpec& spec, int64_t limit_bytes);

// The inputs of a call: `values` as they are, `shapes` filled with seeded uniform values in
// [-1, 1) (integer dtypes: -1, 0 or 1; bool: 0 or 1).
TensorMap MakeInputs(const CallSpec& spec);

// The params of a call from their text (--param KEY=VALUE), typed by the kernel's schema when
// `info` is given (ListKernels): InvalidArgument naming an unknown param (with the kernel's
// params) or a value that is not of the param's type. Without a schema the text decides:
// true/false a bool, an integer an int, a number a float, anything else a string.
absl::StatusOr<Attributes> ParamsFromText(const std::map<std::string, std::string>& params,
                                          const v1::KernelInfo* info);

// Names spec's resident tensors in `request`: each of resident_inputs as an input
// Tensor{ref{tensor}} (no dtype, shape or bytes), each of resident_outputs in output_regions.
void PutResident(const CallSpec& spec, v1::ExecuteRequest* request);

// Fills kernel, inputs, params (as `parameters`, typed by the kernel's schema from `client`'s
// ListKernels when params are given), platform and device of an ExecuteRequest,
// AutotuneRequest or PutConfigRequest. With `with_data` false, inputs from shapes go without
// data (shapes only); with it, CheckDataSize against the client's max_message_bytes comes first.
template <typename Request>
absl::Status FillRequest(const CallSpec& spec, const Client& client, bool with_data,
                         Request* request);

}  // namespace kernelserve::cli

#endif  // KERNELSERVE_CLIENT_CLI_CALL_SPEC_H_
