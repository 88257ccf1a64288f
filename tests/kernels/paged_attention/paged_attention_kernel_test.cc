#include "kernels/paged_attention/paged_attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/utils/random_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention/flash_attention.h"
#include "kernels/paged_attention/paged_attention.h"
#include "tests/support/kernel_run.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::AnalyzeCall;
using ::kernelserve::testing::RunOnCpu;
using ::testing::HasSubstr;

// The sizes of one paged call.
struct Case {
  DType dtype = DType::kF32;
  std::optional<DType> cache_dtype;  // unset: dtype
  int64_t batch = 3, sq = 1, hq = 4, hkv = 2, d = 16;
  int64_t pages = 24, page_size = 3, max_pages = 6;
  std::vector<int64_t> lens = {7, 0, 16};  // per sequence; 0 = empty
  bool append = false;
};

// Random inputs of `c`: every sequence's pages drawn from a shuffled pool (unused pages too).
TensorMap Inputs(const Case& c, uint64_t seed) {
  TensorMap in;
  in["q"] = RandomTensor(c.dtype, {c.batch, c.sq, c.hq, c.d}, seed);
  const DType cache = c.cache_dtype.value_or(c.dtype);
  in["k_cache"] = RandomTensor(cache, {c.pages, c.page_size, c.hkv, c.d}, seed + 1);
  in["v_cache"] = RandomTensor(cache, {c.pages, c.page_size, c.hkv, c.d}, seed + 2);
  std::vector<int64_t> pool(static_cast<size_t>(c.pages));
  std::iota(pool.begin(), pool.end(), int64_t{0});
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int64_t> table(static_cast<size_t>(c.batch * c.max_pages), -1);
  size_t next = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t used = (c.lens[b] + c.page_size - 1) / c.page_size;
    for (int64_t i = 0; i < used; ++i) table[b * c.max_pages + i] = pool[next++];
  }
  in["block_table"] = Tensor::FromInts(DType::kI32, {c.batch, c.max_pages}, table);
  in["cache_seqlens"] = Tensor::FromInts(DType::kI32, {c.batch}, c.lens);
  if (c.append) {
    in["k"] = RandomTensor(c.dtype, {c.batch, c.sq, c.hkv, c.d}, seed + 3);
    in["v"] = RandomTensor(c.dtype, {c.batch, c.sq, c.hkv, c.d}, seed + 4);
  }
  return in;
}

// Sequence b's cache gathered into a contiguous [1, L, Hkv, D] tensor.
Tensor Gather(const Case& c, const TensorMap& in, const std::string& cache, int64_t b) {
  const int64_t len = c.lens[b];
  Tensor out = Tensor::Empty(c.dtype, {1, len, c.hkv, c.d});
  const size_t row = static_cast<size_t>(c.hkv * c.d) * ItemSize(c.dtype);
  for (int64_t t = 0; t < len; ++t) {
    const int64_t page = in.at("block_table").GetInt(b * c.max_pages + t / c.page_size);
    const size_t src = static_cast<size_t>(page * c.page_size + t % c.page_size) * row;
    std::memcpy(static_cast<char*>(out.data()) + t * row,
                static_cast<const char*>(in.at(cache).data()) + src, row);
  }
  return out;
}

// Rows [b] of a [B, ...] tensor as a [1, ...] tensor.
Tensor Slice(const Tensor& t, int64_t b) {
  Shape shape = t.shape();
  const size_t bytes = t.nbytes() / static_cast<size_t>(shape[0]);
  shape[0] = 1;
  Tensor out = Tensor::Empty(t.dtype(), shape);
  std::memcpy(out.data(), static_cast<const char*>(t.data()) + b * bytes, bytes);
  return out;
}

// Checks the paged call's out and lse against flash_attention's CPU kernel over each
// sequence's gathered cache (another implementation: float accumulation, dense layout).
void ExpectMatchesDense(const Case& c, const TensorMap& in, const Attributes& params, double tol) {
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  std::unique_ptr<Kernel> flash = MakeFlashAttention();
  Attributes with_lse = params;
  with_lse["return_lse"] = true;
  absl::StatusOr<TensorMap> got = RunOnCpu(*paged, in, with_lse, KernelConfig{});
  ASSERT_TRUE(got.ok()) << got.status();
  const Tensor& out = got->at("out");
  const Tensor& lse = got->at("lse");
  const int64_t row = c.sq * c.hq * c.d;
  for (int64_t b = 0; b < c.batch; ++b) {
    SCOPED_TRACE(::testing::Message() << "sequence " << b << " of length " << c.lens[b]);
    if (c.lens[b] == 0) {
      for (int64_t x = 0; x < row; ++x) ASSERT_EQ(out.GetFloat(b * row + x), 0.0f);
      for (int64_t x = 0; x < c.hq * c.sq; ++x) {
        ASSERT_EQ(lse.GetFloat(b * c.hq * c.sq + x), -std::numeric_limits<float>::infinity());
      }
      continue;
    }
    TensorMap dense = {{"q", Slice(in.at("q"), b)},
                       {"k", Gather(c, in, "k_cache", b)},
                       {"v", Gather(c, in, "v_cache", b)}};
    absl::StatusOr<TensorMap> want = RunOnCpu(*flash, dense, with_lse, KernelConfig{});
    ASSERT_TRUE(want.ok()) << want.status();
    for (int64_t x = 0; x < row; ++x) {
      ASSERT_NEAR(out.GetFloat(b * row + x), want->at("out").GetFloat(x), tol) << "element " << x;
    }
    for (int64_t x = 0; x < c.hq * c.sq; ++x) {
      const float w = want->at("lse").GetFloat(x);
      const float g = lse.GetFloat(b * c.hq * c.sq + x);
      if (std::isinf(w)) {
        ASSERT_EQ(g, w) << "lse " << x;
      } else {
        ASSERT_NEAR(g, w, tol) << "lse " << x;
      }
    }
  }
}

TEST(PagedAttentionKernelTest, MatchesDenseAttentionOverGatheredPages) {
  const std::vector<Attributes> options = {
      {},
      {{"causal", true}},
      {{"window_left", int64_t{4}}, {"window_right", int64_t{1}}},
      {{"logits_soft_cap", 2.5}, {"softmax_scale", 0.3}},
      {{"causal", true}, {"window_left", int64_t{5}}}};
  uint64_t seed = 1;
  for (int64_t sq : {1, 3}) {
    for (int64_t page_size : {1, 3, 16}) {
      for (int64_t hkv : {1, 2, 4}) {
        for (const Attributes& params : options) {
          Case c;
          c.sq = sq;
          c.hkv = hkv;
          c.page_size = page_size;
          c.max_pages = (16 + page_size - 1) / page_size;
          c.pages = c.batch * c.max_pages + 2;
          SCOPED_TRACE(::testing::Message() << "Sq " << sq << " page_size " << page_size << " Hkv "
                                            << hkv << " case " << (&params - options.data()));
          ExpectMatchesDense(c, Inputs(c, seed++), params, 2e-5);
        }
      }
    }
  }
}

TEST(PagedAttentionKernelTest, HalfPrecisionMatchesDense) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Case c;
    c.dtype = dtype;
    c.sq = 2;
    c.page_size = 4;
    c.max_pages = 4;
    c.pages = 13;
    c.lens = {5, 16, 0};
    // Both round once from a float of the same value: at most one unit in the last place apart.
    ExpectMatchesDense(c, Inputs(c, 7), {{"causal", true}}, dtype == DType::kF16 ? 2e-3 : 1.6e-2);
  }
}

TEST(PagedAttentionKernelTest, AppendWritesOnlyTheNewSlotsInPlaceThenAttends) {
  Case c;
  c.sq = 2;
  c.append = true;
  c.lens = {7, 0, 16};
  TensorMap in = Inputs(c, 11);
  const TensorMap before = in;
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  absl::StatusOr<TensorMap> got = RunOnCpu(*paged, in, {{"causal", true}}, KernelConfig{});
  ASSERT_TRUE(got.ok()) << got.status();
  // The expected caches: the old ones with k, v copied to positions L - Sq .. L - 1.
  TensorMap want = before;
  want.erase("k");
  want.erase("v");
  const size_t row = static_cast<size_t>(c.d) * ItemSize(c.dtype);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; c.lens[b] > 0 && i < c.sq; ++i) {
      const int64_t t = c.lens[b] - c.sq + i;
      const int64_t page = in.at("block_table").GetInt(b * c.max_pages + t / c.page_size);
      for (int64_t h = 0; h < c.hkv; ++h) {
        const size_t dst = ((page * c.page_size + t % c.page_size) * c.hkv + h) * row;
        const size_t src = ((b * c.sq + i) * c.hkv + h) * row;
        for (const char* name : {"k", "v"}) {
          std::memcpy(static_cast<char*>(want[std::string(name) + "_cache"].data()) + dst,
                      static_cast<const char*>(before.at(name).data()) + src, row);
        }
      }
    }
  }
  for (const char* cache : {"k_cache", "v_cache"}) {
    EXPECT_EQ(in.at(cache).bytes(), want.at(cache).bytes()) << cache;
  }
  // The output is the attention over the appended cache, and a second launch repeats it bit for
  // bit (appending the same tokens writes the same bytes).
  absl::StatusOr<TensorMap> over = RunOnCpu(*paged, want, {{"causal", true}}, KernelConfig{});
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(got->at("out").bytes(), over->at("out").bytes());
  absl::StatusOr<TensorMap> again = RunOnCpu(*paged, in, {{"causal", true}}, KernelConfig{});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(got->at("out").bytes(), again->at("out").bytes());
}

// The code and message of analysing `in` with one change.
absl::Status Analyze(const TensorMap& in, const Attributes& params = {}) {
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  return AnalyzeCall(*paged, SpecsOf(in), params).status();
}

TEST(PagedAttentionKernelTest, ShapesThatDisagreeAreRefusedNamingTheInput) {
  Case c;
  c.append = true;
  const TensorMap good = Inputs(c, 3);
  ASSERT_TRUE(Analyze(good).ok());
  struct Bad {
    std::string input;
    Tensor tensor;
    std::string message;
  };
  const std::vector<Bad> bads = {
      {"v_cache", RandomTensor(c.dtype, {c.pages, c.page_size + 1, c.hkv, c.d}, 1),
       "input 'v_cache': expected the shape of k_cache"},
      {"k_cache", RandomTensor(DType::kF16, {c.pages, c.page_size, c.hkv, c.d}, 1),
       "input 'k_cache': dtype f16 differs from q's f32"},
      {"k_cache", RandomTensor(c.dtype, {c.pages, c.page_size, 3, c.d}, 1),
       "Hq must be a multiple of Hkv"},
      {"k_cache", RandomTensor(c.dtype, {c.pages, c.page_size, c.hkv, c.d + 1}, 1),
       "input 'k_cache': head dim 17 differs from q's 16"},
      {"block_table", Tensor::FromInts(DType::kI32, {2, c.max_pages}, std::vector<int64_t>(12)),
       "input 'block_table': expected [B,max_pages] with B = 3"},
      {"cache_seqlens", Tensor::FromInts(DType::kI32, {4}, {1, 1, 1, 1}),
       "input 'cache_seqlens': expected [B] = [3]"},
      {"k", RandomTensor(c.dtype, {c.batch, c.sq, c.hkv + 1, c.d}, 1),
       "input 'k': expected [B,Sq,Hkv,D] = [3,1,2,16]"},
      {"q", RandomTensor(c.dtype, {c.batch, 0, c.hq, c.d}, 1), "input 'q': Sq = 0"},
      {"block_table",
       Tensor::FromInts(DType::kI64, {c.batch, c.max_pages}, std::vector<int64_t>(18)),
       "block_table"}};
  for (const Bad& bad : bads) {
    TensorMap in = good;
    in[bad.input] = bad.tensor;
    // A changed k_cache goes with a v_cache of its shape (else v_cache's rule speaks first).
    if (bad.input == "k_cache") in["v_cache"] = bad.tensor;
    const absl::Status status = Analyze(in);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.message;
    EXPECT_THAT(status.message(), HasSubstr(bad.message));
  }
  TensorMap alone = good;
  alone.erase("v");
  EXPECT_THAT(Analyze(alone).message(), HasSubstr("input 'k': given alone"));
}

// The status of running `in` on the CPU.
absl::Status RunPaged(const TensorMap& in) {
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  return RunOnCpu(*paged, in, {}, KernelConfig{}).status();
}

TEST(PagedAttentionKernelTest, IndexDataIsCheckedBeforeAnyRead) {
  Case c;
  c.append = true;
  c.sq = 2;
  TensorMap in = Inputs(c, 5);
  ASSERT_TRUE(RunPaged(in).ok());
  TensorMap too_long = in;
  too_long["cache_seqlens"] = Tensor::FromInts(DType::kI32, {3}, {7, 0, 19});
  EXPECT_EQ(RunPaged(too_long).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(RunPaged(too_long).message(),
              HasSubstr("sequence 2 has length 19: expected 0 <= L <= 18"));
  TensorMap short_append = in;
  short_append["cache_seqlens"] = Tensor::FromInts(DType::kI32, {3}, {1, 0, 16});
  EXPECT_THAT(RunPaged(short_append).message(), HasSubstr("sequence 0 has length 1 but appends 2"));
  TensorMap bad_page = in;
  std::vector<int64_t> table = in.at("block_table").ToInts();
  table[2] = c.pages;  // sequence 0's third page (it has 7 tokens in pages of 3)
  bad_page["block_table"] = Tensor::FromInts(DType::kI32, {3, c.max_pages}, table);
  EXPECT_EQ(RunPaged(bad_page).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(RunPaged(bad_page).message(),
              HasSubstr("entry [0,2] = 24: expected a page in [0, 24)"));
  TensorMap shared = in;
  table = in.at("block_table").ToInts();
  table[2 * c.max_pages + 5] = table[0 * c.max_pages + 2];  // both append into that page
  shared["cache_seqlens"] = Tensor::FromInts(DType::kI32, {3}, {8, 0, 17});
  shared["block_table"] = Tensor::FromInts(DType::kI32, {3, c.max_pages}, table);
  EXPECT_EQ(RunPaged(shared).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(RunPaged(shared).message(),
              HasSubstr("which another sequence of the call appends to"));
}

TEST(PagedAttentionKernelTest, SynthesizedInputsAreValidAndShuffled) {
  Case c;
  c.append = true;
  const TensorMap in = Inputs(c, 9);
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  absl::StatusOr<std::shared_ptr<const Problem>> problem = AnalyzeCall(*paged, SpecsOf(in), {});
  ASSERT_TRUE(problem.ok());
  absl::StatusOr<TensorMap> made = paged->SynthesizeInputs(**problem, SpecsOf(in), 4);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(paged->ValidateData(**problem, *made).ok());
  // 24 pages over 3 sequences of at most 6 pages: 6 each, all full.
  EXPECT_EQ(made->at("cache_seqlens").ToInts(), (std::vector<int64_t>{18, 18, 18}));
  std::vector<int64_t> table = made->at("block_table").ToInts();
  EXPECT_NE(table, [] {
    std::vector<int64_t> in_order(18);
    std::iota(in_order.begin(), in_order.end(), int64_t{0});
    return in_order;
  }());
  std::sort(table.begin(), table.end());
  EXPECT_EQ(std::adjacent_find(table.begin(), table.end()), table.end()) << "a page used twice";
}

TEST(PagedAttentionKernelTest, LseOnlyOnRequestAndCachesAreMarkedUpdated) {
  Case c;
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  absl::StatusOr<std::shared_ptr<const Problem>> problem =
      AnalyzeCall(*paged, SpecsOf(Inputs(c, 1)), {});
  ASSERT_TRUE(problem.ok());
  EXPECT_EQ(paged->OutputSpecs(**problem).size(), 1u);
  for (const InputSchema& input : paged->schema().inputs) {
    EXPECT_EQ(input.updated, input.name == "k_cache" || input.name == "v_cache") << input.name;
  }
}

// fp8 caches.

// An fp8 case: bf16 q, k, v over `fp8` caches; GQA (Hq 4 over Hkv 2).
Case Fp8Case(DType fp8, int64_t sq) {
  Case c;
  c.dtype = DType::kBF16;
  c.cache_dtype = fp8;
  c.sq = sq;
  c.page_size = 4;
  c.max_pages = 4;
  c.pages = 13;
  c.lens = {5, 16, 0};
  return c;
}

float Fp8ToFloat(DType fp8, uint8_t bits) {
  return fp8 == DType::kF8E4M3 ? F8E4M3ToFloat(bits) : F8E5M2ToFloat(bits);
}

uint8_t FloatToFp8(DType fp8, float value) {
  return fp8 == DType::kF8E4M3 ? FloatToF8E4M3(value) : FloatToF8E5M2(value);
}

// The values an fp8 cache stands for, float(element) * scale[h] (scale 1 when `scale` is not
// given), as a tensor of `dtype`. The scales have few significant bits, so each value is exact
// in bf16 (an fp8 value has at most 4): asserted.
Tensor Dequantized(const Tensor& cache, const Tensor* scale, DType dtype) {
  const Shape& shape = cache.shape();
  const int64_t hkv = shape[2];
  const int64_t d = shape[3];
  Tensor out = Tensor::Empty(dtype, shape);
  const uint8_t* bits = cache.data_as<uint8_t>();
  for (int64_t e = 0; e < cache.numel(); ++e) {
    const double s = scale == nullptr ? 1.0 : scale->GetFloat((e / d) % hkv);
    const double value = static_cast<double>(Fp8ToFloat(cache.dtype(), bits[e])) * s;
    out.SetFloat(e, static_cast<float>(value));
    EXPECT_EQ(out.GetFloat(e), value) << "element " << e << " is not exact in " << DTypeName(dtype);
  }
  return out;
}

// Scales per kv head that differ: few significant bits (see Dequantized).
Tensor Scales(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Tensor::FromFloats(DType::kF32, {n}, values);
}

TEST(PagedAttentionKernelTest, Fp8CachesAttendAsTheirScaledValues) {
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  uint64_t seed = 40;
  for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (int64_t sq : {1, 3}) {
      for (bool v_scale : {true, false}) {  // v_scale left out: 1 for every head
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(fp8) << " Sq " << sq << " v_scale " << v_scale);
        const Case c = Fp8Case(fp8, sq);
        TensorMap in = Inputs(c, seed++);
        in["k_scale"] = Scales({0.75f, 1.5f});
        if (v_scale) in["v_scale"] = Scales({1.25f, 0.625f});
        // The same call over bf16 caches holding the values the fp8 caches stand for.
        TensorMap dense = in;
        dense.erase("k_scale");
        dense.erase("v_scale");
        dense["k_cache"] = Dequantized(in.at("k_cache"), &in.at("k_scale"), c.dtype);
        dense["v_cache"] =
            Dequantized(in.at("v_cache"), v_scale ? &in.at("v_scale") : nullptr, c.dtype);
        const Attributes params = {{"causal", true}, {"return_lse", true}};
        absl::StatusOr<TensorMap> got = RunOnCpu(*paged, in, params, KernelConfig{});
        ASSERT_TRUE(got.ok()) << got.status();
        absl::StatusOr<TensorMap> want = RunOnCpu(*paged, dense, params, KernelConfig{});
        ASSERT_TRUE(want.ok()) << want.status();
        ASSERT_EQ(got->at("out").dtype(), c.dtype);
        // Both sum the same values in double (the scale factored out or not): equal up to the
        // last bits of a double, so at most one bf16 unit in the last place apart.
        const Tensor& out = got->at("out");
        for (int64_t x = 0; x < out.numel(); ++x) {
          const float w = want->at("out").GetFloat(x);
          ASSERT_NEAR(out.GetFloat(x), w, std::abs(w) * 0x1p-7f) << "out " << x;
        }
        const Tensor& lse = got->at("lse");
        for (int64_t x = 0; x < lse.numel(); ++x) {
          const float w = want->at("lse").GetFloat(x);
          if (std::isinf(w)) {
            ASSERT_EQ(lse.GetFloat(x), w) << "lse " << x;
          } else {
            ASSERT_NEAR(lse.GetFloat(x), w, 1e-5f) << "lse " << x;
          }
        }
        // The scales matter: without them the answer is another one.
        TensorMap unscaled = in;
        unscaled.erase("k_scale");
        unscaled.erase("v_scale");
        absl::StatusOr<TensorMap> other = RunOnCpu(*paged, unscaled, params, KernelConfig{});
        ASSERT_TRUE(other.ok()) << other.status();
        EXPECT_NE(other->at("lse").bytes(), lse.bytes());
      }
    }
  }
}

TEST(PagedAttentionKernelTest, Fp8AppendStoresTheQuantizedQuotientBitForBit) {
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  uint64_t seed = 60;
  for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(fp8) << " over " << DTypeName(dtype));
      Case c = Fp8Case(fp8, 2);
      c.dtype = dtype;
      c.append = true;
      TensorMap in = Inputs(c, seed++);
      // Values past fp8's range (e4m3 saturates at 448; 600 / 0.6 is past it), arbitrary
      // scales (the quotient rounds in float), and a NaN, which stays NaN.
      in["k"] = RandomTensor(dtype, {c.batch, c.sq, c.hkv, c.d}, seed++, -600.0f, 600.0f);
      in["v"] = RandomTensor(dtype, {c.batch, c.sq, c.hkv, c.d}, seed++, -3.0f, 3.0f);
      in["k"].SetFloat(5, std::numeric_limits<float>::quiet_NaN());
      std::mt19937_64 rng(seed++);
      std::uniform_real_distribution<float> uniform(0.5f, 2.0f);
      in["k_scale"] = Scales({uniform(rng), 0.6f});
      in["v_scale"] = Scales({uniform(rng), uniform(rng)});
      const TensorMap before = in;
      absl::StatusOr<TensorMap> got = RunOnCpu(*paged, in, {{"causal", true}}, KernelConfig{});
      ASSERT_TRUE(got.ok()) << got.status();
      TensorMap want = before;
      want.erase("k");
      want.erase("v");
      for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t i = 0; c.lens[b] > 0 && i < c.sq; ++i) {
          const int64_t t = c.lens[b] - c.sq + i;
          const int64_t page = in.at("block_table").GetInt(b * c.max_pages + t / c.page_size);
          for (int64_t h = 0; h < c.hkv; ++h) {
            const int64_t dst = ((page * c.page_size + t % c.page_size) * c.hkv + h) * c.d;
            const int64_t src = ((b * c.sq + i) * c.hkv + h) * c.d;
            for (const std::string name : {"k", "v"}) {
              const float scale = before.at(name + "_scale").GetFloat(h);
              uint8_t* cache = want[name + "_cache"].data_as<uint8_t>();
              for (int64_t x = 0; x < c.d; ++x) {
                const float quotient = before.at(name).GetFloat(src + x) / scale;
                cache[dst + x] = FloatToFp8(fp8, quotient);
              }
            }
          }
        }
      }
      for (const char* cache : {"k_cache", "v_cache"}) {
        EXPECT_EQ(in.at(cache).bytes(), want.at(cache).bytes()) << cache;
        EXPECT_NE(in.at(cache).bytes(), before.at(cache).bytes()) << cache << " not written";
      }
      // The attention is over the appended cache.
      absl::StatusOr<TensorMap> over = RunOnCpu(*paged, want, {{"causal", true}}, KernelConfig{});
      ASSERT_TRUE(over.ok()) << over.status();
      EXPECT_EQ(got->at("out").bytes(), over->at("out").bytes());
    }
  }
}

TEST(PagedAttentionKernelTest, Fp8CacheRulesAreCheckedNamingTheInput) {
  const Case c = Fp8Case(DType::kF8E4M3, 1);
  TensorMap good = Inputs(c, 21);
  good["k_scale"] = Scales({0.5f, 2.0f});
  good["v_scale"] = Scales({1.0f, 1.5f});
  ASSERT_TRUE(Analyze(good).ok()) << Analyze(good);
  const Shape cache_shape = {c.pages, c.page_size, c.hkv, c.d};
  struct Bad {
    std::string what;
    TensorMap in;
    std::string message;
  };
  std::vector<Bad> bads;
  TensorMap f32_q = good;
  f32_q["q"] = RandomTensor(DType::kF32, {c.batch, c.sq, c.hq, c.d}, 1);
  bads.push_back({"f32 q", f32_q,
                  "input 'k_cache': dtype f8_e4m3 with q f32: fp8 caches need q in "
                  "f16 or bf16"});
  TensorMap mixed = good;
  mixed["v_cache"] = RandomTensor(DType::kBF16, cache_shape, 1);
  bads.push_back({"fp8 k_cache, bf16 v_cache", mixed,
                  "input 'v_cache': dtype bf16 differs from k_cache's f8_e4m3"});
  TensorMap two_fp8 = good;
  two_fp8["v_cache"] = RandomTensor(DType::kF8E5M2, cache_shape, 1);
  bads.push_back(
      {"e4m3 and e5m2", two_fp8, "input 'v_cache': dtype f8_e5m2 differs from k_cache's f8_e4m3"});
  TensorMap mixed_v = good;
  mixed_v.erase("k_scale");
  mixed_v.erase("v_scale");
  mixed_v["k_cache"] = RandomTensor(DType::kBF16, cache_shape, 1);
  bads.push_back({"bf16 k_cache, fp8 v_cache", mixed_v,
                  "input 'v_cache': dtype f8_e4m3 differs from q's bf16"});
  TensorMap bf16_caches = good;
  bf16_caches["k_cache"] = RandomTensor(DType::kBF16, cache_shape, 1);
  bf16_caches["v_cache"] = RandomTensor(DType::kBF16, cache_shape, 2);
  bf16_caches.erase("v_scale");
  bads.push_back({"scale with bf16 caches", bf16_caches,
                  "input 'k_scale': k_scale applies to fp8 caches only"});
  TensorMap wrong_shape = good;
  wrong_shape["v_scale"] = Scales({1.0f, 1.0f, 1.0f});
  bads.push_back(
      {"scale of 3 heads", wrong_shape, "input 'v_scale': expected [Hkv] = [2], got [3]"});
  TensorMap wrong_dtype = good;
  wrong_dtype["k_scale"] = Tensor::FromFloats(DType::kF16, {c.hkv}, {1.0f, 1.0f});
  bads.push_back({"f16 scale", wrong_dtype, "k_scale"});
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.what);
    const absl::Status status = Analyze(bad.in);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(bad.message));
  }
  // One scale alone, or none, is a call; so is an f16 q.
  TensorMap alone = good;
  alone.erase("k_scale");
  EXPECT_TRUE(Analyze(alone).ok()) << Analyze(alone);
  alone.erase("v_scale");
  alone["q"] = RandomTensor(DType::kF16, {c.batch, c.sq, c.hq, c.d}, 1);
  EXPECT_TRUE(Analyze(alone).ok()) << Analyze(alone);
}

TEST(PagedAttentionKernelTest, Fp8ScalesMustBeFiniteAndPositive) {
  const Case c = Fp8Case(DType::kF8E5M2, 1);
  TensorMap in = Inputs(c, 23);
  in["k_scale"] = Scales({0.5f, 2.0f});
  in["v_scale"] = Scales({1.0f, 1.5f});
  ASSERT_TRUE(RunPaged(in).ok()) << RunPaged(in);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<std::vector<float>, std::string>> bads = {
      {{1.0f, 0.0f}, "head 1 has scale 0"},
      {{-0.5f, 1.0f}, "head 0 has scale -0.5"},
      {{1.0f, nan}, "head 1 has scale nan"},
      {{inf, 1.0f}, "head 0 has scale inf"}};
  for (const char* name : {"k_scale", "v_scale"}) {
    for (const auto& [values, message] : bads) {
      TensorMap bad = in;
      bad[name] = Scales(values);
      const absl::Status status = RunPaged(bad);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name << " " << message;
      EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("input '", name, "': ", message)));
    }
  }
}

TEST(PagedAttentionKernelTest, Fp8NanCacheValuesPropagateToTheirQueriesAlone) {
  const Case c = Fp8Case(DType::kF8E4M3, 1);
  TensorMap in = Inputs(c, 25);
  // Token 2 of sequence 0, kv head 1: a NaN code in its key (0x7f is e4m3's NaN).
  const int64_t page = in.at("block_table").GetInt(0 * c.max_pages + 2 / c.page_size);
  in["k_cache"].data_as<uint8_t>()[((page * c.page_size + 2) * c.hkv + 1) * c.d + 3] = 0x7f;
  std::unique_ptr<Kernel> paged = MakePagedAttention();
  absl::StatusOr<TensorMap> got = RunOnCpu(*paged, in, {}, KernelConfig{});
  ASSERT_TRUE(got.ok()) << got.status();
  const Tensor& out = got->at("out");
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.hq; ++h) {
      // q heads 2 and 3 read kv head 1.
      const bool nan = b == 0 && h >= 2;
      for (int64_t x = 0; x < c.d; ++x) {
        EXPECT_EQ(std::isnan(out.GetFloat((b * c.hq + h) * c.d + x)), nan)
            << "sequence " << b << " head " << h;
      }
    }
  }
}

TEST(PagedAttentionKernelTest, SynthesizedFp8InputsAreFiniteWithPositiveScales) {
  for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
    Case c = Fp8Case(fp8, 1);
    c.append = true;
    TensorMap in = Inputs(c, 27);
    in["k_scale"] = Scales({1.0f, 1.0f});
    in["v_scale"] = Scales({1.0f, 1.0f});
    std::unique_ptr<Kernel> paged = MakePagedAttention();
    absl::StatusOr<std::shared_ptr<const Problem>> problem = AnalyzeCall(*paged, SpecsOf(in), {});
    ASSERT_TRUE(problem.ok()) << problem.status();
    const auto& p = ProblemAs<PagedAttentionProblem>(**problem);
    EXPECT_EQ(p.dtype, DType::kBF16);
    EXPECT_EQ(p.cache_dtype, fp8);
    EXPECT_TRUE(p.has_k_scale && p.has_v_scale);
    absl::StatusOr<TensorMap> made = paged->SynthesizeInputs(**problem, SpecsOf(in), 8);
    ASSERT_TRUE(made.ok()) << made.status();
    EXPECT_TRUE(paged->ValidateData(**problem, *made).ok());
    for (const char* name : {"k_scale", "v_scale"}) {
      for (float scale : made->at(name).ToFloats()) {
        EXPECT_GE(scale, 0.5f) << name;
        EXPECT_LT(scale, 2.0f) << name;
      }
    }
    EXPECT_NE(made->at("k_scale").bytes(), made->at("v_scale").bytes());
    for (const char* name : {"k_cache", "v_cache"}) {
      for (float value : made->at(name).ToFloats()) ASSERT_TRUE(std::isfinite(value)) << name;
    }
    absl::StatusOr<TensorMap> run = RunOnCpu(*paged, *made, {}, KernelConfig{});
    ASSERT_TRUE(run.ok()) << run.status();
    for (float value : run->at("out").ToFloats()) ASSERT_TRUE(std::isfinite(value));
  }
}

}  // namespace
}  // namespace kernelserve
