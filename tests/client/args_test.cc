#include "client/cli/args.h"

#include "gtest/gtest.h"

namespace kernelserve::cli {
namespace {

// Args as the parser fills it.
Args MakeArgs(std::map<std::string, std::vector<std::string>> flags) {
  Args args;
  args.positional = {"run", "mean_pooling"};
  args.flags = std::move(flags);
  return args;
}

TEST(ArgsTest, GetReturnsTheLastValue) {
  Args args = MakeArgs({{"shape", {"x=f32:2,3", "mask=bool:2"}}, {"target", {"a:1", "h:1"}}});
  EXPECT_EQ(args.GetAll("shape"), (std::vector<std::string>{"x=f32:2,3", "mask=bool:2"}));
  EXPECT_EQ(args.Get("target"), "h:1");
  EXPECT_EQ(args.Get("missing", "fallback"), "fallback");
  EXPECT_TRUE(args.GetAll("missing").empty());
  EXPECT_FALSE(args.Has("duration"));
}

TEST(ArgsTest, TypedReads) {
  Args args = MakeArgs({{"duration", {"250ms"}}, {"target", {"12"}}, {"json", {"true"}}});
  EXPECT_EQ(args.GetDuration("duration", absl::Seconds(1)).value(), absl::Milliseconds(250));
  EXPECT_EQ(args.GetInt("target", 0).value(), 12);
  EXPECT_EQ(args.GetInt("shape", 5).value(), 5);
  EXPECT_TRUE(args.GetBool("json").value());
  EXPECT_FALSE(args.GetBool("tls").value());
  Args seconds = MakeArgs({{"duration", {"1.5"}}});
  EXPECT_EQ(seconds.GetDuration("duration", absl::ZeroDuration()).value(),
            absl::Milliseconds(1500));
  Args bad = MakeArgs({{"duration", {"soon"}}, {"target", {"x"}}, {"json", {"maybe"}}});
  EXPECT_EQ(bad.GetDuration("duration", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.GetInt("target", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.GetBool("json").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValueSyntaxTest, Shape) {
  auto [name, spec] = ParseShapeArg("x=bf16:4,128,64").value();
  EXPECT_EQ(name, "x");
  EXPECT_EQ(spec, (TensorSpec{DType::kBF16, {4, 128, 64}}));
  EXPECT_EQ(ParseShapeArg("q=2,3").value().second, (TensorSpec{DType::kF32, {2, 3}}));
  EXPECT_EQ(ParseShapeArg("kv=f8_e4m3:8,2,4").value().second,
            (TensorSpec{DType::kF8E4M3, {8, 2, 4}}));
  EXPECT_EQ(ParseShapeArg("kv=f8_e5m2:3").value().second, (TensorSpec{DType::kF8E5M2, {3}}));
  for (const char* bad : {"x", "=f32:2", "x=f64:2", "x=f32:", "x=f32:2,-1", "x=f32:2,a"}) {
    EXPECT_EQ(ParseShapeArg(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ValueSyntaxTest, Values) {
  auto [name, tensor] = ParseValuesArg("cu_seqlens=i32:0,3,10").value();
  EXPECT_EQ(name, "cu_seqlens");
  EXPECT_EQ(tensor.dtype(), DType::kI32);
  EXPECT_EQ(tensor.ToInts(), (std::vector<int64_t>{0, 3, 10}));
  Tensor floats = ParseValuesArg("w=f16:0.5,-2").value().second;
  EXPECT_EQ(floats.ToFloats(), (std::vector<float>{0.5f, -2.0f}));
  // fp8 values are floats, rounded (and saturated) to the dtype, not integers.
  Tensor e4m3 = ParseValuesArg("s=f8_e4m3:0.5,-2,0.3,1000").value().second;
  EXPECT_EQ(e4m3.dtype(), DType::kF8E4M3);
  EXPECT_EQ(e4m3.ToFloats(), (std::vector<float>{0.5f, -2.0f, 0.3125f, 448.0f}));
  Tensor e5m2 = ParseValuesArg("s=f8_e5m2:1.5,1e6").value().second;
  EXPECT_EQ(e5m2.ToFloats(), (std::vector<float>{1.5f, 57344.0f}));
  for (const char* bad : {"c=0,1", "c=i32:0,1.5", "c=i32:0,x", "c=i32:"}) {
    EXPECT_EQ(ParseValuesArg(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ValueSyntaxTest, Input) {
  InputArg plain = ParseInputArg("x=data/x.npy").value();
  EXPECT_EQ(plain.name, "x");
  EXPECT_EQ(plain.path, "data/x.npy");
  EXPECT_FALSE(plain.dtype.has_value());
  InputArg typed = ParseInputArg("q=bf16:/tmp/q.npy").value();
  EXPECT_EQ(typed.path, "/tmp/q.npy");
  EXPECT_EQ(typed.dtype, DType::kBF16);
  EXPECT_EQ(ParseInputArg("kv=f8_e5m2:kv.npy").value().dtype, DType::kF8E5M2);
  // A colon that does not follow a dtype belongs to the path.
  EXPECT_EQ(ParseInputArg("k=c:/k.npy").value().path, "c:/k.npy");
  EXPECT_EQ(ParseInputArg("x=").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseInputArg("x.npy").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValueSyntaxTest, Config) {
  KernelConfig config =
      ParseConfigArg("block_q=32, block_k=64,num_warps=2,platform=cpu,algorithm=wgmma").value();
  EXPECT_EQ(config.block_q, 32);
  EXPECT_EQ(config.block_k, 64);
  EXPECT_EQ(config.num_warps, 2);
  EXPECT_EQ(config.platform, "cpu");
  EXPECT_EQ(config.algorithm, "wgmma");
  EXPECT_EQ(config.block_size, 0);
  EXPECT_TRUE(config.named.empty());
  for (const char* bad : {"", "block_q=x", "threads=two", "block_q", "plan=1.5"}) {
    EXPECT_EQ(ParseConfigArg(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// Names other than the fixed fields are a platform's named fields; the server checks them.
TEST(ValueSyntaxTest, ConfigNamedFields) {
  KernelConfig config = ParseConfigArg("block_size=64,threads=2,platform=cpu").value();
  EXPECT_EQ(config.block_size, 64);
  EXPECT_EQ(config.Named("threads"), 2);
  EXPECT_EQ(config.named.size(), 1u);
  config = ParseConfigArg("platform=cudnn,plan=3").value();
  EXPECT_EQ(config.Named("plan"), 3);
  EXPECT_EQ(ParseConfigArg("lanes=8589934592").value().Named("lanes"), int64_t{1} << 33);
  const absl::Status bad = ParseConfigArg("threads=two").status();
  EXPECT_EQ(bad.message(),
            "--config threads='two': expected an integer (fields other than platform and "
            "algorithm are integers)");
}

TEST(ValueSyntaxTest, Param) {
  EXPECT_EQ(ParseParamArg("causal=true").value(),
            std::make_pair(std::string("causal"), std::string("true")));
  EXPECT_EQ(ParseParamArg("causal").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kernelserve::cli
