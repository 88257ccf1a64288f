// KernelSchema: what a kernel takes and gives, declared once by the kernel and read by every
// layer that would otherwise name it: the wire conversion of params, call validation, the CLI,
// ListKernels and the clients.
#ifndef KERNELSERVE_CORE_SCHEMA_H_
#define KERNELSERVE_CORE_SCHEMA_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/attributes.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace kernelserve {

// The type of a param's value.
enum class ParamType { kBool, kInt, kFloat, kString };
// "bool", "int", "float", "string".
std::string_view ParamTypeName(ParamType type);

// One input tensor. A value type.
struct InputSchema {
  std::string name;           // "q"
  bool required = true;       // false: may be left out
  std::vector<DType> dtypes;  // the dtypes it may have (more rules in the kernel's analysis)
  std::vector<int> ranks;     // the ranks it may have
  std::string shape;          // for people: "[B,Sq,Hq,D] or [Tq,Hq,D]"
  std::string doc;            // one line
  // True when only its dtype and shape are read (a backward kernel's copy of a forward input
  // whose values the gradient does not need): it may come without data (Tensor::ShapeOnly;
  // on the wire, empty data). False: data is required.
  bool shape_only = false;
  // True when the kernel writes new values into this input as it runs (a paged cache that the
  // call appends to). A resident tensor named for it is updated in place (the call holds it
  // for writing, and it must lie where the call runs); inline data, or a system region's bytes
  // (copied first: a client's region is never written), are updated in the call's own copy,
  // which is not returned; a CUDA region is refused for it.
  bool updated = false;
};

// One output tensor. A value type.
struct OutputSchema {
  std::string name;   // "lse"
  std::string dtype;  // for people: "dtype of q", "f32"
  std::string shape;  // for people: "[B,Hq,Sq]"
  std::string doc;    // one line, saying when it is produced if not always
  // The input whose resident tensor a call may also name for this output, which is then
  // written over it in place (the server copies the output there after the kernel, so the
  // kernel reads the input as it was); "" = none.
  std::string in_place_of;
};

// One scalar param. A value type.
struct ParamSchema {
  std::string name;  // "window_left"
  ParamType type = ParamType::kInt;
  AttrValue default_value;    // its value when left out; of `type`
  std::optional<double> min;  // inclusive bounds of an int or float param
  std::optional<double> max;
  std::string doc;  // one line, with what special values mean
};

// A kernel's declaration. A value type.
struct KernelSchema {
  std::string name;  // "flash_attention"
  int version = 1;
  std::string doc;  // one line
  std::vector<InputSchema> inputs;
  std::vector<OutputSchema> outputs;
  std::vector<ParamSchema> params;
  // The kernel computing this one's vector-Jacobian product (its backward), "" when none.
  std::string vjp;
  // For a backward kernel: the forward kernel whose VJP it computes; "" otherwise.
  std::string vjp_of;

  // nullptr when there is none of that name.
  const InputSchema* FindInput(std::string_view name) const;
  const ParamSchema* FindParam(std::string_view name) const;

  // Checks each input's name, dtype and rank, and that every required input is there.
  // InvalidArgument naming the input and what was expected.
  absl::Status CheckInputs(const TensorSpecMap& inputs) const;
  // Checks that every input but the shape_only ones has its data (Tensor::has_data).
  // InvalidArgument naming the input and the bytes it needs.
  absl::Status CheckInputData(const TensorMap& inputs) const;
  // The canonical form of `params`: each name known, each value of the param's type (an int
  // is taken for a float param) and within its bounds (floats finite), and values equal to the
  // default left out, so that equal calls have equal attributes however they were written.
  // InvalidArgument naming the param and what was expected.
  absl::StatusOr<Attributes> CanonicalParams(const Attributes& params) const;
};

// The value of `name` in canonical attributes, or the param's default. REQUIRES: `schema` has
// a param `name` of type T's (bool: kBool, int64_t: kInt, double: kFloat, std::string:
// kString) and `attrs` came from schema.CanonicalParams.
template <typename T>
T ParamOr(const KernelSchema& schema, const Attributes& attrs, std::string_view name);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_SCHEMA_H_
