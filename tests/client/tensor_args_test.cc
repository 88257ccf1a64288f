// Resident tensors on the command line, without a server: the value syntaxes of --tensor,
// --output-to and the tensor verbs, the requests they make, and what is refused before any call.
#include "client/cli/tensor_args.h"

#include <sstream>

#include "client/cli/call_spec.h"
#include "client/cli/cli.h"
#include "client/cli/parser.h"
#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

using Strings = std::vector<std::string>;

Args ArgsOf(const Strings& argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argv);
  EXPECT_TRUE(line.ok()) << line.status();
  return line.ok() ? line->args : Args{};
}

// The message of the error `status` holds, checking its code.
std::string Error(const absl::Status& status, absl::StatusCode code) {
  EXPECT_EQ(status.code(), code) << status;
  return std::string(status.message());
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ResidentArgTest, NameAtTensor) {
  absl::StatusOr<std::pair<std::string, std::string>> named =
      ParseResidentArg("tensor", "x=@weights-1");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(*named, std::make_pair(std::string("x"), std::string("weights-1")));
  // The tensor's name is all that follows the '@', '=' and '@' included.
  EXPECT_EQ(ParseResidentArg("output-to", "out=@a=@b")->second, "a=@b");
  for (const std::string bad : {"x=weights", "x", "=@w", "x=@", "x=", "@w"}) {
    const std::string message =
        Error(ParseResidentArg("tensor", bad).status(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(message, "--tensor '" + bad + "': expected NAME=@TENSOR")) << message;
  }
  EXPECT_TRUE(Contains(
      Error(ParseResidentArg("output-to", "out=o").status(), absl::StatusCode::kInvalidArgument),
      "--output-to 'out=o': expected OUT=@TENSOR (e.g. out=@pooled)"));
}

TEST(LikeArgTest, ShapeOrFile) {
  absl::StatusOr<LikeArg> like = ParseLikeArg("bf16:4,0,128");
  ASSERT_TRUE(like.ok()) << like.status();
  EXPECT_EQ(like->spec, (TensorSpec{DType::kBF16, {4, 0, 128}}));
  EXPECT_EQ(like->path, "");
  EXPECT_FALSE(like->dtype.has_value());
  EXPECT_EQ(ParseLikeArg("7,3")->spec, (TensorSpec{DType::kF32, {7, 3}}));  // f32 by default
  like = ParseLikeArg("data/w.npy");
  ASSERT_TRUE(like.ok()) << like.status();
  EXPECT_EQ(like->path, "data/w.npy");
  EXPECT_FALSE(like->dtype.has_value());
  like = ParseLikeArg("bf16:w.NPY");
  ASSERT_TRUE(like.ok()) << like.status();
  EXPECT_EQ(like->path, "w.NPY");
  EXPECT_EQ(like->dtype, DType::kBF16);
  EXPECT_EQ(ParseLikeArg("run:3/w.npy")->path, "run:3/w.npy");  // not a dtype: all a path
  for (const std::string bad : {"", "f32:", "f32:4,-1", "f32:4,x", "zeros", "f64:4,4", "f32:4:4"}) {
    const std::string message =
        Error(ParseLikeArg(bad).status(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(message, "--input-like '" + bad + "': ")) << message;
    EXPECT_TRUE(Contains(message,
                         "expected DTYPE:D0,D1,... (zeros, e.g. f32:4,128) or "
                         "[DTYPE:]FILE.npy"))
        << message;
  }
}

TEST(RowsArgTest, Ranges) {
  absl::StatusOr<RowsArg> rows = ParseRowsArg("2:5");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->row, 2);
  EXPECT_EQ(rows->rows, 3);
  rows = ParseRowsArg("3:");
  EXPECT_EQ(rows->row, 3);
  EXPECT_FALSE(rows->rows.has_value());
  rows = ParseRowsArg(":4");
  EXPECT_EQ(rows->row, 0);
  EXPECT_EQ(rows->rows, 4);
  EXPECT_EQ(ParseRowsArg("4:4")->rows, 0);
  for (const std::string bad : {"3", "5:2", "a:b", "-1:2", "1:2:3"}) {
    const std::string message =
        Error(ParseRowsArg(bad).status(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(message, "--rows '" + bad + "'")) << message;
    EXPECT_TRUE(Contains(message, "expected A:B")) << message;
  }
}

TEST(TtlTest, WholeSecondsRoundedUp) {
  EXPECT_EQ(TtlFromArgs(Args{}).value(), 0u);
  EXPECT_EQ(TtlFromArgs(Args{{}, {{"ttl", {"10m"}}}}).value(), 600u);
  EXPECT_EQ(TtlFromArgs(Args{{}, {{"ttl", {"90"}}}}).value(), 90u);
  EXPECT_EQ(TtlFromArgs(Args{{}, {{"ttl", {"250ms"}}}}).value(), 1u);
  EXPECT_EQ(TtlFromArgs(Args{{}, {{"ttl", {"soon"}}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(Error(TtlFromArgs(Args{{}, {{"ttl", {"2000000h"}}}}).status(),
                             absl::StatusCode::kInvalidArgument),
                       "expected at most 4294967295 seconds"));
}

TEST(SplitIntoTest, PiecesOfWholeUnits) {
  EXPECT_EQ(SplitInto(10, 4, 1), (std::vector<Piece>{{0, 4}, {4, 4}, {8, 2}}));
  EXPECT_EQ(SplitInto(12, 10, 4), (std::vector<Piece>{{0, 8}, {8, 4}}));  // 10 -> 8: whole f32s
  EXPECT_EQ(SplitInto(8, 3, 4), (std::vector<Piece>{{0, 4}, {4, 4}}));    // at least one unit
  EXPECT_EQ(SplitInto(6, 6, 2), (std::vector<Piece>{{0, 6}}));
  EXPECT_TRUE(SplitInto(0, 6, 2).empty());
}

TEST(CallSpecResidentTest, InputsAndOutputsByName) {
  absl::StatusOr<CallSpec> spec = CallSpecFromArgs(
      ArgsOf({"run", "flash_attention", "--tensor=k=@keys", "--tensor", "v=@values",
              "--shape=q=f32:1,4,2,8", "--output-to=out=@attn", "--output-to=lse=@lse"}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->resident_inputs,
            (std::map<std::string, std::string>{{"k", "keys"}, {"v", "values"}}));
  EXPECT_EQ(spec->resident_outputs,
            (std::map<std::string, std::string>{{"lse", "lse"}, {"out", "attn"}}));
  v1::ExecuteRequest request;
  request.mutable_inputs()->insert({"q", v1::Tensor()});
  PutResident(*spec, &request);
  ASSERT_EQ(request.inputs().size(), 3u);
  for (const auto& [input, tensor] :
       {std::pair<std::string, std::string>{"k", "keys"}, {"v", "values"}}) {
    const v1::Tensor& sent = request.inputs().at(input);
    EXPECT_EQ(sent.ref().tensor(), tensor);
    // Only the name goes: the server has the rest.
    EXPECT_EQ(sent.dtype(), v1::DTYPE_UNSPECIFIED);
    EXPECT_EQ(sent.shape_size(), 0);
    EXPECT_TRUE(sent.data().empty());
    EXPECT_TRUE(sent.ref().region().empty());
  }
  EXPECT_FALSE(request.inputs().at("q").has_ref());
  EXPECT_EQ(request.output_regions().at("out").tensor(), "attn");
  EXPECT_EQ(request.output_regions().at("lse").tensor(), "lse");
  EXPECT_TRUE(request.output_regions().at("out").region().empty());
}

TEST(CallSpecResidentTest, NamedTwiceIsAnError) {
  auto error = [](const Strings& argv) {
    return Error(CallSpecFromArgs(ArgsOf(argv)).status(), absl::StatusCode::kInvalidArgument);
  };
  EXPECT_EQ(error({"run", "k", "--tensor=x=@a", "--shape=x=f32:2"}),
            "input 'x' is given twice (--tensor, and --shape, --values or --input)");
  EXPECT_EQ(error({"run", "k", "--tensor=x=@a", "--values=x=f32:2"}),
            "input 'x' is given twice (--tensor, and --shape, --values or --input)");
  EXPECT_EQ(error({"run", "k", "--tensor=x=@a", "--tensor=x=@b"}),
            "--tensor: input 'x' is given twice");
  EXPECT_EQ(error({"run", "k", "--output-to=o=@a", "--output-to=o=@b"}),
            "--output-to: output 'o' is given twice");
  EXPECT_TRUE(Contains(error({"run", "k", "--tensor=x=a"}), "expected NAME=@TENSOR"));
}

TEST(TensorCommandLineTest, VerbsParse) {
  Args args = ArgsOf({"tensor", "create", "w", "--input-like=f32:4,8", "--ttl=10m", "--device=-1"});
  EXPECT_EQ(args.positional, (Strings{"tensor", "create", "w"}));
  EXPECT_EQ(args.Get("input-like"), "f32:4,8");
  EXPECT_EQ(args.Get("ttl"), "10m");
  args = ArgsOf({"tensor", "read", "w", "--rows=1:3", "-o", "out.npy"});
  EXPECT_EQ(args.positional, (Strings{"tensor", "read", "w"}));
  EXPECT_EQ(args.Get("output"), "out.npy");
  EXPECT_EQ(args.Get("rows"), "1:3");
  args = ArgsOf({"tensor", "write", "w", "rows.npy", "--row=2"});
  EXPECT_EQ(args.positional, (Strings{"tensor", "write", "w", "rows.npy"}));
  args = ArgsOf({"tensor", "rm", "--all", "--owner=*"});
  EXPECT_TRUE(args.GetBool("all").value());
  EXPECT_EQ(args.Get("owner"), "*");
  EXPECT_EQ(ArgsOf({"tensor", "ls"}).positional, (Strings{"tensor", "ls"}));
  EXPECT_EQ(ArgsOf({"bench", "k", "--tensor=x=@w", "--output-to=out=@o"}).GetAll("tensor"),
            (Strings{"x=@w"}));
  // A verb is required, and the resident flags belong to run and bench alone.
  for (const Strings& argv :
       {Strings{"tensor"}, Strings{"tensor", "mv", "a"}, Strings{"tune", "k", "--tensor=x=@w"},
        Strings{"tensor", "read", "w", "--row=1"}}) {
    absl::StatusOr<CommandLine> line = ParseCommandLine(argv);
    EXPECT_FALSE(line.ok()) << argv.back();
    EXPECT_TRUE(IsUsageError(line.status())) << line.status();
  }
}

struct CliRun {
  int code = -1;
  std::string err;
};

// The tool against a port where no server listens: what it refuses before any call exits
// INVALID_ARGUMENT (3), what reaches the network UNAVAILABLE (14).
CliRun RunTool(Strings argv) {
  argv.insert(argv.begin(), "--target=127.0.0.1:1");
  argv.push_back("--deadline=2s");
  std::ostringstream out, err;
  CliRun run;
  run.code = RunCli(argv, out, err, /*err_is_tty=*/false);
  run.err = err.str();
  return run;
}

TEST(TensorCommandTest, BadValuesAreRefusedBeforeAnyCall) {
  const int invalid = static_cast<int>(absl::StatusCode::kInvalidArgument);
  const std::vector<std::pair<Strings, std::string>> cases = {
      {{"tensor", "create", "w"}, "tensor create needs --input-like"},
      {{"tensor", "create", "w", "--input-like=f32:4,x"}, "--input-like 'f32:4,x'"},
      {{"tensor", "create", "w", "--input-like=4", "--ttl=soon"}, "--ttl='soon'"},
      {{"tensor", "write", "w", "x.npy", "--row=1", "--byte-offset=8"},
       "give --row R (rows of dimension 0) or --byte-offset B, not both"},
      {{"tensor", "write", "w", "x.npy", "--row=-1"}, "--row: expected a row >= 0"},
      {{"tensor", "read", "w", "--rows=5:2"}, "the end 2 is before the start 5"},
      {{"tensor", "rm"}, "tensor rm takes a NAME or --all"},
      {{"tensor", "rm", "w", "--all"}, "tensor rm takes a NAME or --all"},
      {{"run", "mean_pooling", "--tensor=x=w"}, "expected NAME=@TENSOR"},
      {{"bench", "mean_pooling", "--tensor=x=@w", "--protocol=v2"},
       "--tensor is not taken with --protocol=v2"},
      {{"bench", "mean_pooling", "--shape=x=f32:1,2,3", "--output-to=out=@o", "--protocol=v2"},
       "--output-to is not taken with --protocol=v2"},
  };
  for (const auto& [argv, message] : cases) {
    CliRun run = RunTool(argv);
    EXPECT_EQ(run.code, invalid) << argv[1] << ": " << run.err;
    EXPECT_TRUE(Contains(run.err, message)) << run.err;
  }
  // A missing argument does not parse (exit 2); a missing file is NOT_FOUND, before any call.
  CliRun no_file = RunTool({"tensor", "write", "w"});
  EXPECT_EQ(no_file.code, kUsageExitCode);
  EXPECT_TRUE(Contains(no_file.err, "tensor write: FILE is required")) << no_file.err;
  EXPECT_EQ(RunTool({"tensor", "write", "w", "/nonexistent/x.npy"}).code,
            static_cast<int>(absl::StatusCode::kNotFound));
  // A good command line gets as far as the network.
  CliRun ls = RunTool({"tensor", "ls"});
  EXPECT_EQ(ls.code, static_cast<int>(absl::StatusCode::kUnavailable)) << ls.err;
}

}  // namespace
}  // namespace kernelserve::cli
