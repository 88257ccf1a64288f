// The CUDA paged attention launchers called directly on device buffers, against a float64 host
// reference computed from the paged layout: page sizes 16/64/256, shuffled block tables with
// unused pages, empty sequences and partly filled last pages, Sq 1 and 4, causal, windows, soft
// cap, GQA 1/4/8 (with more than 16 rows per kv head), head dims 64/128/256, f16 and bf16, one
// split and several, lse; fp8 caches (e4m3, e5m2) with per-head scales under f16 and bf16 q;
// repeated launches give the same bits; append writes only its slots (fp8: the quantized bits).
// Inputs are fresh random values; outputs and workspace are poisoned (0xFF bytes: NaN) before
// each launch. Skips where no GPU is visible (the dispatch tests run anywhere CUDA is built).
#include "kernels/paged_attention/cuda/paged_attention_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/utils/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/paged_attention/cuda/paged_attention_config.h"
#include "kernels/paged_attention/cuda/paged_attention_dispatch.h"
#include "kernels/paged_attention/cuda/paged_attention_space.h"
#include "kernels/runtime/cuda/cuda_platform.h"

namespace kernelserve::cuda {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Absolute error allowed on out (values are convex combinations of v in [-1, 1]): P and the
// output are rounded to the dtype (bf16 keeps 8 bits, f16 11), as in the flash attention tests'
// relative 1e-2 / 5e-3, taken element-wise with headroom for the largest elements.
double OutTolerance(DType dtype) { return dtype == DType::kBF16 ? 2e-2 : 4e-3; }
// ||out - ref|| / ||ref||, as the flash attention tests (issue 5).
double RelTolerance(DType dtype) { return dtype == DType::kBF16 ? 1e-2 : 5e-3; }
// lse comes from fp32 accumulation of the same rounded inputs: only fp32 rounding differs.
constexpr double kLseTolerance = 2e-3;

// ---- host values in the device's element types ----

uint16_t ToBits(DType dtype, float x) {
  if (dtype == DType::kBF16) return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
  return static_cast<__half_raw>(__float2half_rn(x)).x;
}

float FromBits(DType dtype, uint16_t bits) {
  if (dtype == DType::kBF16) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

// A host tensor of 16-bit (or fp8: 8-bit) codes and the real values they stand for (an fp8
// cache's: code * scale of the element's head).
struct HostTensor {
  std::vector<uint16_t> bits;
  std::vector<double> values;
  bool fp8 = false;
};

uint8_t ToFp8(DType cache, float x) {
  return cache == DType::kF8E4M3 ? FloatToF8E4M3(x) : FloatToF8E5M2(x);
}
bool IsFp8NaN(DType cache, uint8_t code) {
  if (cache == DType::kF8E4M3) return (code & 0x7F) == 0x7F;
  return (code & 0x7C) == 0x7C && (code & 0x03) != 0;
}
float FromFp8(DType cache, uint8_t code) {
  return cache == DType::kF8E4M3 ? F8E4M3ToFloat(code) : F8E5M2ToFloat(code);
}

// The bytes of `t` as the device holds them.
std::vector<uint8_t> DeviceBytes(const HostTensor& t) {
  std::vector<uint8_t> bytes;
  if (t.fp8) {
    bytes.assign(t.bits.begin(), t.bits.end());
  } else {
    bytes.resize(t.bits.size() * 2);
    std::memcpy(bytes.data(), t.bits.data(), bytes.size());
  }
  return bytes;
}

HostTensor Random(DType dtype, size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  HostTensor t;
  t.bits.resize(n);
  t.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    t.bits[i] = ToBits(dtype, dist(rng));
    t.values[i] = FromBits(dtype, t.bits[i]);
  }
  return t;
}

// An fp8 cache of `n` elements (rows of `head_dim` over `scales.size()` heads) whose real values
// are uniform in [-1, 1): each quantized as x / scale[h].
HostTensor RandomFp8(DType cache, size_t n, int64_t head_dim, const std::vector<float>& scales,
                     std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  HostTensor t;
  t.fp8 = true;
  t.bits.resize(n);
  t.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float scale = scales[(i / head_dim) % scales.size()];
    const uint8_t code = ToFp8(cache, dist(rng) / scale);
    t.bits[i] = code;
    t.values[i] = static_cast<double>(FromFp8(cache, code)) * scale;
  }
  return t;
}

// ---- device buffers ----

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  void Upload(const HostTensor& host) { Upload(DeviceBytes(host)); }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size() * sizeof(T), bytes_);
    if (bytes_ > 0) {
      ASSERT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (bytes_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }
  // 0xFF bytes: NaN in f16, bf16 and f32, so an element left unwritten shows.
  void Poison() {
    if (bytes_ > 0) {
      ASSERT_EQ(cudaMemset(ptr_, 0xFF, bytes_), cudaSuccess);
    }
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// An append's device pointers: new k and v, the caches, the block table and the lengths.
PagedAppendArgs AppendPointers(const DeviceBuffer& k_new, const DeviceBuffer& v_new,
                               const DeviceBuffer& k_cache, const DeviceBuffer& v_cache,
                               const DeviceBuffer& table, const DeviceBuffer& lens) {
  PagedAppendArgs a;
  a.k = k_new.get();
  a.v = v_new.get();
  a.k_cache = k_cache.get();
  a.v_cache = v_cache.get();
  a.block_table = static_cast<const int32_t*>(table.get());
  a.cache_seqlens = static_cast<const int32_t*>(lens.get());
  return a;
}

// ---- the cases ----

struct Case {
  DType dtype = DType::kF16;
  DType cache = DType::kF32;  // kF32: the caches are of dtype; or kF8E4M3 / kF8E5M2
  int64_t head_dim = 64;
  int64_t seq_len_q = 1;
  int64_t hq = 1;
  int64_t hkv = 1;
  int64_t page_size = 16;
  std::vector<int32_t> lens;  // cache_seqlens, new tokens included
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
  float softcap = 0.0f;
  float softmax_scale = 0.0f;  // 0: 1/sqrt(D)
  float q_range = 2.0f;        // q uniform in [-q_range, q_range)
  bool lse = true;
  bool append = false;  // every L is 0 or at least Sq

  int64_t batch() const { return static_cast<int64_t>(lens.size()); }
  bool fp8() const { return cache == DType::kF8E4M3 || cache == DType::kF8E5M2; }
  DType cache_dtype() const { return fp8() ? cache : dtype; }
  size_t cache_bytes() const { return fp8() ? 1 : 2; }
  float scale() const {
    return softmax_scale > 0.0f ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  std::string Describe() const {
    return absl::StrCat(dtype == DType::kBF16 ? "bf16" : "f16",
                        " cache=", Sv(DTypeName(cache_dtype())), " D=", head_dim, " Sq=", seq_len_q,
                        " Hq=", hq, " Hkv=", hkv) +
           absl::StrCat(" page=", page_size, " lens={", absl::StrJoin(lens, ","),
                        "} causal=", causal, " window=(", window_left, ",", window_right,
                        ") softcap=", softcap, " scale=", scale(), " lse=", lse,
                        " append=", append);
  }
};

// A paged cache: pages dealt out to the sequences in a random order, a few pages unused, the
// block table's unused entries far out of range (a read of one faults).
struct Paging {
  int64_t num_pages = 0;
  int64_t max_pages = 0;
  std::vector<int32_t> table;
};

Paging MakePaging(const Case& c, std::mt19937_64& rng) {
  Paging p;
  std::vector<int64_t> pages_of(c.lens.size());
  int64_t used = 0;
  for (size_t b = 0; b < c.lens.size(); ++b) {
    pages_of[b] = (c.lens[b] + c.page_size - 1) / c.page_size;
    used += pages_of[b];
    p.max_pages = std::max(p.max_pages, pages_of[b]);
  }
  p.max_pages += 1;  // a column no sequence uses
  p.num_pages = used + 3;
  std::vector<int32_t> order(p.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  p.table.assign(c.lens.size() * p.max_pages, 1 << 30);
  int64_t next = 0;
  for (size_t b = 0; b < c.lens.size(); ++b) {
    for (int64_t j = 0; j < pages_of[b]; ++j) p.table[b * p.max_pages + j] = order[next++];
  }
  return p;
}

int64_t CacheIndex(const Case& c, const Paging& p, int64_t b, int64_t t, int64_t h) {
  const int64_t page = p.table[b * p.max_pages + t / c.page_size];
  return ((page * c.page_size + t % c.page_size) * c.hkv + h) * c.head_dim;
}

struct Reference {
  std::vector<double> out;  // [B, Sq, Hq, D]
  std::vector<double> lse;  // [B, Hq, Sq]
};

Reference ComputeReference(const Case& c, const Paging& p, const HostTensor& q, const HostTensor& k,
                           const HostTensor& v) {
  const int64_t d = c.head_dim;
  const int64_t sq = c.seq_len_q;
  Reference ref;
  ref.out.assign(c.batch() * sq * c.hq * d, 0.0);
  ref.lse.assign(c.batch() * c.hq * sq, -kInf);
  for (int64_t b = 0; b < c.batch(); ++b) {
    const int64_t len = c.lens[b];
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t pos = len - sq + i;
      for (int64_t hq = 0; hq < c.hq; ++hq) {
        const int64_t h = hq / (c.hq / c.hkv);
        const double* qrow = &q.values[((b * sq + i) * c.hq + hq) * d];
        std::vector<std::pair<int64_t, double>> logits;
        for (int64_t t = 0; t < len; ++t) {
          if (c.causal && t > pos) continue;
          if (c.window_left >= 0 && t < pos - c.window_left) continue;
          if (c.window_right >= 0 && t > pos + c.window_right) continue;
          const double* krow = &k.values[CacheIndex(c, p, b, t, h)];
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) dot += qrow[e] * krow[e];
          double s = c.scale() * dot;
          if (c.softcap > 0.0f) s = c.softcap * std::tanh(s / c.softcap);
          logits.push_back({t, s});
        }
        if (logits.empty()) continue;  // zeros, lse -inf
        double mx = -kInf;
        for (const auto& [t, s] : logits) mx = std::max(mx, s);
        double sum = 0.0;
        for (const auto& [t, s] : logits) sum += std::exp(s - mx);
        double* orow = &ref.out[((b * sq + i) * c.hq + hq) * d];
        for (const auto& [t, s] : logits) {
          const double w = std::exp(s - mx) / sum;
          const double* vrow = &v.values[CacheIndex(c, p, b, t, h)];
          for (int64_t e = 0; e < d; ++e) orow[e] += w * vrow[e];
        }
        ref.lse[(b * c.hq + hq) * sq + i] = mx + std::log(sum);
      }
    }
  }
  return ref;
}

// The largest errors of out against the float64 reference seen per (q dtype, cache dtype), for
// the record (docs/PERFORMANCE.md writes them down per dtype).
struct WorstErrors {
  double abs = 0.0;
  double rel = 0.0;
};
std::map<std::string, WorstErrors>& Worst() {
  static auto* worst = new std::map<std::string, WorstErrors>();
  return *worst;
}
void PrintWorst() {
  for (const auto& [key, w] : Worst()) {
    std::printf(
        "  errors against float64, %s: max |out - ref| %.3g, ||out - ref|| / ||ref|| %.3g\n",
        key.c_str(), w.abs, w.rel);
  }
  Worst().clear();
}

// Empty when out (and lse) match the reference; otherwise the first few mismatches.
std::string Compare(const Case& c, const Reference& ref, const std::vector<uint16_t>& out,
                    const std::vector<float>& lse) {
  std::string errors;
  int shown = 0;
  double diff2 = 0.0;
  double ref2 = 0.0;
  WorstErrors& worst = Worst()[absl::StrCat("q ", c.dtype == DType::kBF16 ? "bf16" : "f16",
                                            ", caches ", Sv(DTypeName(c.cache_dtype())))];
  for (size_t j = 0; j < out.size(); ++j) {
    const double got = FromBits(c.dtype, out[j]);
    const double err = std::fabs(got - ref.out[j]);
    worst.abs = std::max(worst.abs, std::isnan(got) ? kInf : err);
    diff2 += std::isnan(got) ? kInf : err * err;
    ref2 += ref.out[j] * ref.out[j];
    if (!(err <= OutTolerance(c.dtype)) && shown++ < 5) {
      absl::StrAppend(&errors, "\n  out[", j, "] = ", got, ", want ", ref.out[j]);
    }
  }
  const double rel = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  worst.rel = std::max(worst.rel, rel);
  if (!(rel <= RelTolerance(c.dtype))) absl::StrAppend(&errors, "\n  relative error ", rel);
  for (size_t j = 0; j < lse.size(); ++j) {
    const double want = ref.lse[j];
    const bool ok = std::isinf(want) ? (std::isinf(lse[j]) && lse[j] < 0)
                                     : std::fabs(lse[j] - want) <=
                                           kLseTolerance * std::max(1.0, std::fabs(want));
    if (!ok && shown++ < 10)
      absl::StrAppend(&errors, "\n  lse[", j, "] = ", lse[j], ", want ", want);
  }
  return errors;
}

// An fp8 case's per-head scales, on the host and the device.
struct Scales {
  std::vector<float> k, v;
  const float* k_device = nullptr;
  const float* v_device = nullptr;
};

class PagedAttentionLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "no CUDA device visible (no driver or no GPU): GPU tests run on a GPU "
                      "machine, see docs/GPU.md";
    }
    const std::vector<DeviceInfo> devices = EnumerateCudaDevices();
    ASSERT_FALSE(devices.empty());
    gpu_ = devices[0];
  }

  // The heuristic's split count for the case on this device (as the server sees it).
  int HeuristicSplits(const Case& c, const Paging& p) const {
    const PagedAttentionShape shape = {
        c.dtype,    c.batch(), c.hkv, c.seq_len_q * (c.hq / c.hkv), p.max_pages * c.page_size,
        c.head_dim, c.fp8()};
    return PagedSplits(PagedAttentionHeuristic(shape, gpu_));
  }

  // Runs the case with each split count of `splits` (and the heuristic's), each twice, and
  // compares with the reference; with c.append, appends new keys and values first and checks
  // the caches. `seed` draws the inputs.
  void Check(const Case& c, std::vector<int> splits, uint64_t seed) {
    SCOPED_TRACE(c.Describe());
    std::mt19937_64 rng(seed);
    const Paging paging = MakePaging(c, rng);
    const int64_t d = c.head_dim;
    const size_t q_elems = c.batch() * c.seq_len_q * c.hq * d;
    const size_t cache_elems = paging.num_pages * c.page_size * c.hkv * d;
    // q wider than k: logits of a few units, so the softmax is far from uniform.
    HostTensor q = Random(c.dtype, q_elems, -c.q_range, c.q_range, rng);
    // fp8 caches: per-head scales of different sizes (the values stay in [-1, 1)).
    std::vector<float> k_scale(c.hkv), v_scale(c.hkv);
    std::uniform_real_distribution<float> scale_dist(0.01f, 0.1f);
    for (int64_t h = 0; h < c.hkv; ++h) {
      k_scale[h] = scale_dist(rng);
      v_scale[h] = scale_dist(rng);
    }
    HostTensor k = c.fp8() ? RandomFp8(c.cache, cache_elems, d, k_scale, rng)
                           : Random(c.dtype, cache_elems, -1.0f, 1.0f, rng);
    HostTensor v = c.fp8() ? RandomFp8(c.cache, cache_elems, d, v_scale, rng)
                           : Random(c.dtype, cache_elems, -1.0f, 1.0f, rng);

    DeviceBuffer q_d(q_elems * 2);
    DeviceBuffer k_d(cache_elems * c.cache_bytes()), v_d(cache_elems * c.cache_bytes());
    DeviceBuffer table_d(paging.table.size() * 4), lens_d(c.lens.size() * 4);
    DeviceBuffer out_d(q_elems * 2), lse_d(c.batch() * c.hq * c.seq_len_q * 4);
    DeviceBuffer k_scale_d(c.hkv * 4), v_scale_d(c.hkv * 4);
    q_d.Upload(q.bits);
    k_d.Upload(k);
    v_d.Upload(v);
    table_d.Upload(paging.table);
    lens_d.Upload(c.lens);
    k_scale_d.Upload(k_scale);
    v_scale_d.Upload(v_scale);
    const Scales scales = {k_scale, v_scale, static_cast<const float*>(k_scale_d.get()),
                           static_cast<const float*>(v_scale_d.get())};

    if (c.append) {
      ASSERT_NO_FATAL_FAILURE(Append(c, paging, rng, scales, k, v, k_d, v_d, table_d, lens_d));
    }
    const Reference ref = ComputeReference(c, paging, q, k, v);

    PagedDeviceArgs args;
    args.q = q_d.get();
    args.k_cache = k_d.get();
    args.v_cache = v_d.get();
    args.block_table = static_cast<const int32_t*>(table_d.get());
    args.cache_seqlens = static_cast<const int32_t*>(lens_d.get());
    args.out = out_d.get();
    args.lse = c.lse ? static_cast<float*>(lse_d.get()) : nullptr;
    args.batch = c.batch();
    args.seq_len_q = c.seq_len_q;
    args.num_heads_q = c.hq;
    args.num_heads_kv = c.hkv;
    args.num_pages = paging.num_pages;
    args.page_size = c.page_size;
    args.max_pages = paging.max_pages;
    args.max_seq_len = c.lens.empty() ? 0 : *std::max_element(c.lens.begin(), c.lens.end());
    args.softmax_scale = c.scale();
    args.causal = c.causal;
    args.window_left = c.window_left;
    args.window_right = c.window_right;
    args.softcap = c.softcap;
    if (c.fp8()) {
      args.k_scale = scales.k_device;
      args.v_scale = scales.v_device;
    }

    absl::StatusOr<PagedAttentionLaunchFn> launch =
        SelectPagedAttentionLaunch(c.dtype, c.cache_dtype(), d, kPagedNumWarps[0]);
    ASSERT_TRUE(launch.ok()) << launch.status();
    splits.push_back(HeuristicSplits(c, paging));
    for (int s : splits) {
      SCOPED_TRACE(absl::StrCat("splits=", s));
      DeviceBuffer workspace(PagedWorkspaceBytes(args, static_cast<int>(d), s));
      std::vector<uint16_t> first_out;
      std::vector<float> first_lse;
      for (int repeat = 0; repeat < 2; ++repeat) {
        out_d.Poison();
        lse_d.Poison();
        workspace.Poison();
        ASSERT_EQ((*launch)(args, s, workspace.get(), /*stream=*/nullptr), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint16_t> out = out_d.Download<uint16_t>();
        std::vector<float> lse = c.lse ? lse_d.Download<float>() : std::vector<float>();
        if (repeat == 0) {
          EXPECT_EQ(Compare(c, ref, out, lse), "");
          first_out = std::move(out);
          first_lse = std::move(lse);
        } else {
          EXPECT_TRUE(out == first_out) << "a repeated launch changed out";
          EXPECT_EQ(std::memcmp(lse.data(), first_lse.data(), lse.size() * 4), 0)
              << "a repeated launch changed lse";
        }
      }
    }
  }

  // Appends fresh k, v on the device; checks that exactly the target slots changed, to the
  // new values (fp8 caches: to fp8(x / scale[h]) as the host rounds it); applies the same
  // writes to the host caches.
  void Append(const Case& c, const Paging& paging, std::mt19937_64& rng, const Scales& scales,
              HostTensor& k, HostTensor& v, DeviceBuffer& k_d, DeviceBuffer& v_d,
              const DeviceBuffer& table_d, const DeviceBuffer& lens_d) {
    const int64_t d = c.head_dim;
    const size_t new_elems = c.batch() * c.seq_len_q * c.hkv * d;
    const HostTensor k_new = Random(c.dtype, new_elems, -1.0f, 1.0f, rng);
    const HostTensor v_new = Random(c.dtype, new_elems, -1.0f, 1.0f, rng);
    DeviceBuffer k_new_d(new_elems * 2), v_new_d(new_elems * 2);
    k_new_d.Upload(k_new.bits);
    v_new_d.Upload(v_new.bits);
    PagedAppendArgs a = AppendPointers(k_new_d, v_new_d, k_d, v_d, table_d, lens_d);
    a.batch = c.batch();
    a.seq_len_q = c.seq_len_q;
    a.num_heads_kv = c.hkv;
    a.head_dim = d;
    a.page_size = c.page_size;
    a.max_pages = paging.max_pages;
    if (c.fp8()) {
      a.k_scale = scales.k_device;
      a.v_scale = scales.v_device;
    }
    absl::StatusOr<PagedAppendLaunchFn> append = SelectPagedAppendLaunch(c.dtype, c.cache_dtype());
    ASSERT_TRUE(append.ok()) << append.status();
    ASSERT_EQ((*append)(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int64_t b = 0; b < c.batch(); ++b) {
      const int64_t len = c.lens[b];
      if (len == 0) continue;
      ASSERT_GE(len, c.seq_len_q) << "a case to append needs L >= Sq";
      for (int64_t i = 0; i < c.seq_len_q; ++i) {
        for (int64_t h = 0; h < c.hkv; ++h) {
          const int64_t dst = CacheIndex(c, paging, b, len - c.seq_len_q + i, h);
          const int64_t src = ((b * c.seq_len_q + i) * c.hkv + h) * d;
          for (int64_t e = 0; e < d; ++e) {
            Store(c, k_new, src + e, scales.k[h], k, dst + e);
            Store(c, v_new, src + e, scales.v[h], v, dst + e);
          }
        }
      }
    }
    // The whole caches: the target slots hold the new values, every other element is unchanged.
    EXPECT_TRUE(k_d.Download<uint8_t>() == DeviceBytes(k)) << "k_cache after append";
    EXPECT_TRUE(v_d.Download<uint8_t>() == DeviceBytes(v)) << "v_cache after append";
  }

  // cache[at] = the new element new_values[from], quantized for an fp8 cache.
  static void Store(const Case& c, const HostTensor& new_values, int64_t from, float scale,
                    HostTensor& cache, int64_t at) {
    if (!c.fp8()) {
      cache.bits[at] = new_values.bits[from];
      cache.values[at] = new_values.values[from];
      return;
    }
    const uint8_t code = ToFp8(c.cache, static_cast<float>(new_values.values[from]) / scale);
    cache.bits[at] = code;
    cache.values[at] = static_cast<double>(FromFp8(c.cache, code)) * scale;
  }

  DeviceInfo gpu_;
};

// The scenarios every dtype and head dim runs.
std::vector<Case> Scenarios(DType dtype, int64_t d) {
  std::vector<Case> cases;
  auto add = [&](Case c) {
    c.dtype = dtype;
    c.head_dim = d;
    cases.push_back(std::move(c));
  };
  // MHA decode, page 16, an empty sequence, a full last page and partly filled ones.
  add({.seq_len_q = 1, .hq = 2, .hkv = 2, .page_size = 16, .lens = {37, 0, 16, 200}});
  // GQA 4, Sq 4, causal, page 64, appended.
  add({.seq_len_q = 4,
       .hq = 8,
       .hkv = 2,
       .page_size = 64,
       .lens = {130, 4, 0, 257},
       .causal = true,
       .append = true});
  // GQA 8 (32 rows: two row groups), causal with a window, page 256, appended.
  add({.seq_len_q = 4,
       .hq = 8,
       .hkv = 1,
       .page_size = 256,
       .lens = {600, 300},
       .causal = true,
       .window_left = 50,
       .window_right = 0,
       .append = true});
  // GQA 4, soft cap, no lse, page 16, appended.
  add({.seq_len_q = 1,
       .hq = 16,
       .hkv = 4,
       .page_size = 16,
       .lens = {1000, 33},
       .softcap = 2.0f,
       .lse = false,
       .append = true});
  // GQA 8, a two-sided window without causal, custom scale, page 64.
  add({.seq_len_q = 4,
       .hq = 16,
       .hkv = 2,
       .page_size = 64,
       .lens = {500, 100, 0},
       .window_left = 20,
       .window_right = 10,
       .softmax_scale = 0.3f});
  // L < Sq with causal: the first queries see nothing (zeros, lse -inf).
  add({.seq_len_q = 4, .hq = 1, .hkv = 1, .page_size = 16, .lens = {3, 2, 17}, .causal = true});
  // Every sequence empty.
  add({.seq_len_q = 1, .hq = 8, .hkv = 8, .page_size = 64, .lens = {0, 0}});
  // Long sequences with causal, soft cap and a window, GQA 4: the heuristic splits.
  add({.seq_len_q = 1,
       .hq = 8,
       .hkv = 2,
       .page_size = 16,
       .lens = {5000, 4097},
       .causal = true,
       .window_left = 3000,
       .softcap = 30.0f});
  return cases;
}

TEST_F(PagedAttentionLaunchTest, MatchesTheReferenceF16) {
  uint64_t seed = 1;
  for (int64_t d : kPagedHeadDims) {
    for (const Case& c : Scenarios(DType::kF16, d)) Check(c, {1, 3, 16}, seed++);
  }
  PrintWorst();
}

TEST_F(PagedAttentionLaunchTest, MatchesTheReferenceBF16) {
  uint64_t seed = 1000;
  for (int64_t d : kPagedHeadDims) {
    for (const Case& c : Scenarios(DType::kBF16, d)) Check(c, {1, 2, 7}, seed++);
  }
  PrintWorst();
}

TEST_F(PagedAttentionLaunchTest, MoreSplitsThanTilesLeavesEmptySplits) {
  Case c{.dtype = DType::kBF16,
         .head_dim = 128,
         .seq_len_q = 4,
         .hq = 4,
         .hkv = 1,
         .page_size = 16,
         .lens = {70, 1, 0, 129},
         .causal = true};
  Check(c, {kPagedMaxSplits, 64}, 77);
}

TEST_F(PagedAttentionLaunchTest, MatchesTheReferenceFp8Caches) {
  uint64_t seed = 2000;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (DType cache : {DType::kF8E4M3, DType::kF8E5M2}) {
      for (int64_t d : kPagedHeadDims) {
        for (Case c : Scenarios(dtype, d)) {
          c.cache = cache;
          Check(c, {1, 5}, seed++);
        }
      }
    }
  }
  PrintWorst();
}

// bf16 q beyond f16's range over fp8 caches: the kernel computes in f16 and scales q down by a
// power of two (QToHalfForFp8), so the logits come out as the reference's.
TEST_F(PagedAttentionLaunchTest, Fp8CachesTakeBf16QueriesBeyondF16Range) {
  uint64_t seed = 3000;
  for (DType cache : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (int64_t d : kPagedHeadDims) {
      Case c{.dtype = DType::kBF16,
             .cache = cache,
             .head_dim = d,
             .seq_len_q = 2,
             .hq = 8,
             .hkv = 2,
             .page_size = 16,
             .lens = {300, 0, 77},
             .causal = true,
             .softmax_scale = 2e-6f,
             .q_range = 1e6f};
      Check(c, {1, 4}, seed++);
    }
  }
  PrintWorst();
}

TEST_F(PagedAttentionLaunchTest, AppendSkipsEmptySequencesAndD8Unaligned) {
  // Head dims that are no multiple of 8 take the element-wise append path; attention is not
  // compiled for them, so only the caches are checked.
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (DType cache : {DType::kF32, DType::kF8E4M3, DType::kF8E5M2}) {
      Case c{.dtype = dtype,
             .cache = cache,
             .head_dim = 12,
             .seq_len_q = 3,
             .hq = 2,
             .hkv = 2,
             .page_size = 16,
             .lens = {0, 3, 40},
             .append = true};
      SCOPED_TRACE(c.Describe());
      std::mt19937_64 rng(5);
      const Paging paging = MakePaging(c, rng);
      const size_t cache_elems = paging.num_pages * c.page_size * c.hkv * c.head_dim;
      const std::vector<float> k_scale = {0.05f, 0.003f}, v_scale = {0.5f, 0.02f};
      HostTensor k = c.fp8() ? RandomFp8(cache, cache_elems, c.head_dim, k_scale, rng)
                             : Random(dtype, cache_elems, -1.0f, 1.0f, rng);
      HostTensor v = c.fp8() ? RandomFp8(cache, cache_elems, c.head_dim, v_scale, rng)
                             : Random(dtype, cache_elems, -1.0f, 1.0f, rng);
      DeviceBuffer k_d(cache_elems * c.cache_bytes()), v_d(cache_elems * c.cache_bytes());
      DeviceBuffer table_d(paging.table.size() * 4), lens_d(c.lens.size() * 4);
      DeviceBuffer k_scale_d(8), v_scale_d(8);
      k_d.Upload(k);
      v_d.Upload(v);
      table_d.Upload(paging.table);
      lens_d.Upload(c.lens);
      k_scale_d.Upload(k_scale);
      v_scale_d.Upload(v_scale);
      const Scales scales = {k_scale, v_scale, static_cast<const float*>(k_scale_d.get()),
                             static_cast<const float*>(v_scale_d.get())};
      Append(c, paging, rng, scales, k, v, k_d, v_d, table_d, lens_d);
    }
  }
}

TEST_F(PagedAttentionLaunchTest, AppendQuantizesEveryInputAsTheHostDivisionRoundsIt) {
  // Every 16-bit pattern but NaNs (infinities, subnormals and both zeros among them), divided by
  // eight scales per cache: ordinary ones, the ends of the range the kernel multiplies by a
  // reciprocal (2^-60, 2^60), and ones it divides by element by element (0, a subnormal,
  // negative, 2^+-70). The fp8 codes equal the host's fp8(float(x) / scale) bit for bit (NaNs,
  // from 0 / 0, as NaNs).
  constexpr int64_t kHeads = 8, kD = 128, kPage = 16;
  constexpr int64_t kTokens = 65536 / kD;  // every pattern once per head
  const std::vector<float> k_scale = {1.0f, 0.37f, 3.1e-3f, 1.7e4f, 0x1p-70f, 0x1p70f, 0.0f, -0.5f};
  const std::vector<float> v_scale = {0x1p-60f, 0x1p60f, 0.7f,           2.5f,
                                      1e-45f,   448.0f,  0x1.fffffep-1f, 3.0f};
  std::vector<int32_t> table(kTokens / kPage);
  for (size_t p = 0; p < table.size(); ++p) table[p] = static_cast<int32_t>(table.size() - 1 - p);
  const std::vector<int32_t> lens = {static_cast<int32_t>(kTokens)};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    // New k: pattern (t * D + e) in every head; new v: the patterns in reverse.
    std::vector<uint16_t> k_new(kTokens * kHeads * kD), v_new(k_new.size());
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t h = 0; h < kHeads; ++h) {
        for (int64_t e = 0; e < kD; ++e) {
          const auto pattern = static_cast<uint16_t>(t * kD + e);
          const size_t at = (t * kHeads + h) * kD + e;
          k_new[at] = std::isnan(FromBits(dtype, pattern)) ? 0 : pattern;
          const auto reversed = static_cast<uint16_t>(0xFFFF - pattern);
          v_new[at] = std::isnan(FromBits(dtype, reversed)) ? 0x8000 : reversed;
        }
      }
    }
    for (DType cache : {DType::kF8E4M3, DType::kF8E5M2}) {
      SCOPED_TRACE(absl::StrCat(Sv(DTypeName(dtype)), " into ", Sv(DTypeName(cache))));
      DeviceBuffer k_new_d(k_new.size() * 2), v_new_d(v_new.size() * 2);
      DeviceBuffer k_d(k_new.size()), v_d(v_new.size()), table_d(table.size() * 4), lens_d(4);
      DeviceBuffer k_scale_d(kHeads * 4), v_scale_d(kHeads * 4);
      k_new_d.Upload(k_new);
      v_new_d.Upload(v_new);
      table_d.Upload(table);
      lens_d.Upload(lens);
      k_scale_d.Upload(k_scale);
      v_scale_d.Upload(v_scale);
      k_d.Poison();
      v_d.Poison();
      PagedAppendArgs a = AppendPointers(k_new_d, v_new_d, k_d, v_d, table_d, lens_d);
      a.k_scale = static_cast<const float*>(k_scale_d.get());
      a.v_scale = static_cast<const float*>(v_scale_d.get());
      a.batch = 1;
      a.seq_len_q = kTokens;
      a.num_heads_kv = kHeads;
      a.head_dim = kD;
      a.page_size = kPage;
      a.max_pages = static_cast<int64_t>(table.size());
      absl::StatusOr<PagedAppendLaunchFn> append = SelectPagedAppendLaunch(dtype, cache);
      ASSERT_TRUE(append.ok()) << append.status();
      ASSERT_EQ((*append)(a, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint8_t> k_got = k_d.Download<uint8_t>(), v_got = v_d.Download<uint8_t>();
      int64_t wrong = 0;
      std::string first;
      for (int64_t t = 0; t < kTokens; ++t) {
        const int64_t slot = table[t / kPage] * kPage + t % kPage;
        for (int64_t h = 0; h < kHeads; ++h) {
          for (int64_t e = 0; e < kD; ++e) {
            const size_t from = (t * kHeads + h) * kD + e;
            const size_t to = (slot * kHeads + h) * kD + e;
            for (const auto& [x, scale, got] : {std::tuple{k_new[from], k_scale[h], k_got[to]},
                                                std::tuple{v_new[from], v_scale[h], v_got[to]}}) {
              const uint8_t want = ToFp8(cache, FromBits(dtype, x) / scale);
              // 0 / 0: a NaN either way, whose sign IEEE leaves open (x86's is negative).
              if (got == want || (IsFp8NaN(cache, got) && IsFp8NaN(cache, want))) continue;
              if (wrong++ == 0) {
                first = absl::StrCat("x = ", FromBits(dtype, x), " / ", scale, ": got 0x",
                                     absl::Hex(got), ", want 0x", absl::Hex(want));
              }
            }
          }
        }
      }
      EXPECT_EQ(wrong, 0) << "first: " << first;
    }
  }
}

TEST_F(PagedAttentionLaunchTest, RefusesBadArguments) {
  absl::StatusOr<PagedAttentionLaunchFn> launch =
      SelectPagedAttentionLaunch(DType::kF16, DType::kF16, 64, 4);
  ASSERT_TRUE(launch.ok());
  PagedDeviceArgs args;
  args.batch = 1;
  args.seq_len_q = 1;
  args.num_heads_q = 3;
  args.num_heads_kv = 2;  // does not divide Hq
  args.page_size = 16;
  EXPECT_EQ((*launch)(args, 1, nullptr, nullptr), cudaErrorInvalidValue);
  args.num_heads_q = 4;
  EXPECT_EQ((*launch)(args, 2, nullptr, nullptr), cudaErrorInvalidValue);  // no workspace
  EXPECT_EQ((*launch)(args, 0, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ((*launch)(args, kPagedMaxSplits + 1, nullptr, nullptr), cudaErrorInvalidValue);
  args.batch = 0;
  EXPECT_EQ((*launch)(args, 1, nullptr, nullptr), cudaSuccess);  // nothing to do
  // The kernel numbers token slots in 32 bits: caches of 2^32 slots are refused (checked before
  // the empty batch returns), a page fewer is not.
  args.num_pages = (int64_t{1} << 32) / 16;
  EXPECT_EQ((*launch)(args, 1, nullptr, nullptr), cudaErrorInvalidValue);
  args.num_pages -= 1;
  EXPECT_EQ((*launch)(args, 1, nullptr, nullptr), cudaSuccess);
}

// ---- dispatch: no GPU needed ----

TEST(PagedAttentionDispatchTest, EveryCompiledInstanceIsSelectable) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (DType cache : {dtype, DType::kF8E4M3, DType::kF8E5M2}) {
      for (int64_t d : kPagedHeadDims) {
        for (int warps : kPagedNumWarps) {
          EXPECT_TRUE(SelectPagedAttentionLaunch(dtype, cache, d, warps).ok()) << d << " " << warps;
        }
      }
      EXPECT_TRUE(SelectPagedAppendLaunch(dtype, cache).ok());
    }
  }
}

TEST(PagedAttentionDispatchTest, OthersAreUnimplementedNamingTheCompiledSet) {
  for (auto [dtype, cache, d, warps] :
       {std::tuple{DType::kF32, DType::kF32, 128, 4}, std::tuple{DType::kF16, DType::kF16, 96, 4},
        std::tuple{DType::kBF16, DType::kBF16, 128, 8}, std::tuple{DType::kF16, DType::kF16, 0, 4},
        std::tuple{DType::kF16, DType::kBF16, 128, 4},
        std::tuple{DType::kF32, DType::kF8E4M3, 128, 4}}) {
    const absl::StatusOr<PagedAttentionLaunchFn> got =
        SelectPagedAttentionLaunch(dtype, cache, d, warps);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(got.status().message(),
                HasSubstr("compiled: q f16/bf16 with caches of q's dtype, f8_e4m3 or f8_e5m2; "
                          "head_dim 64, 128 or 256"));
  }
  for (auto [dtype, cache] :
       {std::pair{DType::kF32, DType::kF32}, std::pair{DType::kBF16, DType::kF16},
        std::pair{DType::kF32, DType::kF8E5M2}}) {
    EXPECT_EQ(SelectPagedAppendLaunch(dtype, cache).status().code(),
              absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace kernelserve::cuda
