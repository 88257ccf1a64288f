#include "kernels/paged_attention/paged_attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

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
  int64_t batch = 3, sq = 1, hq = 4, hkv = 2, d = 16;
  int64_t pages = 24, page_size = 3, max_pages = 6;
  std::vector<int64_t> lens = {7, 0, 16};  // per sequence; 0 = empty
  bool append = false;
};

// Random inputs of `c`: every sequence's pages drawn from a shuffled pool (unused pages too).
TensorMap Inputs(const Case& c, uint64_t seed) {
  TensorMap in;
  in["q"] = RandomTensor(c.dtype, {c.batch, c.sq, c.hq, c.d}, seed);
  in["k_cache"] = RandomTensor(c.dtype, {c.pages, c.page_size, c.hkv, c.d}, seed + 1);
  in["v_cache"] = RandomTensor(c.dtype, {c.pages, c.page_size, c.hkv, c.d}, seed + 2);
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

}  // namespace
}  // namespace kernelserve
