#include "kernels/flash_attention/cpu/flash_attention_bwd.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cpu/flash_attention_bwd_passes.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/float_convert.h"
#include "kernels/runtime/cpu/parallel_for.h"

namespace kernelserve::cpu {
namespace {

using attention_bwd::Item;
using attention_bwd::Plan;
using attention_bwd::Scratch;
using attention_bwd::Span;
using attention_bwd::SpanOf;

constexpr int64_t kDefaultBlockQ = 32;
constexpr int64_t kDefaultBlockK = 64;

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("flash attention bwd: ", what));
}

absl::Status CheckBuffers(const FlashAttentionBwdArgs& args) {
  const FlashAttentionArgs& a = args.fwd;
  const std::pair<const char*, const void*> buffers[] = {
      {"q", a.q},          {"k", a.k},      {"v", a.v},      {"out", args.out}, {"lse", args.lse},
      {"dout", args.dout}, {"dq", args.dq}, {"dk", args.dk}, {"dv", args.dv}};
  for (const auto& [name, buffer] : buffers) {
    if (buffer == nullptr) return Invalid(absl::StrCat("no buffer for ", name));
  }
  if (args.dbias == nullptr) return absl::OkStatus();
  if (a.cu_seqlens_q != nullptr) return Invalid("dbias needs the dense form, not cu_seqlens");
  if ((args.dbias_batch != 1 && args.dbias_batch != a.num_sequences) ||
      (args.dbias_heads != 1 && args.dbias_heads != a.num_heads_q)) {
    return Invalid(absl::StrCat("dbias [", args.dbias_batch, ",", args.dbias_heads,
                                ",Sq,Sk]: expected [B or 1, Hq or 1, Sq, Sk]"));
  }
  return absl::OkStatus();
}

absl::Status CheckArgs(const FlashAttentionBwdArgs& args) {
  const FlashAttentionArgs& a = args.fwd;
  if (!IsFloating(a.dtype)) {
    return Invalid(absl::StrCat("dtype ", Sv(DTypeName(a.dtype)), " is not f32, f16 or bf16"));
  }
  if (a.head_dim < 1 || a.num_heads_q < 1 || a.num_heads_kv < 1 ||
      a.num_heads_q % a.num_heads_kv != 0) {
    return Invalid(absl::StrCat("expected D >= 1 and Hq a multiple of Hkv, got D=", a.head_dim,
                                " Hq=", a.num_heads_q, " Hkv=", a.num_heads_kv));
  }
  if (a.total_q < 0 || a.total_k < 0 || a.num_sequences < 0 || a.seq_len_q < 0 || a.seq_len_k < 0) {
    return Invalid("negative size");
  }
  if ((a.cu_seqlens_q == nullptr) != (a.cu_seqlens_k == nullptr)) {
    return Invalid("cu_seqlens_q and cu_seqlens_k must be given together");
  }
  if ((a.q_segment_ids == nullptr) != (a.kv_segment_ids == nullptr)) {
    return Invalid("q_segment_ids and kv_segment_ids must be given together");
  }
  if (a.cu_seqlens_q != nullptr) {
    if (a.bias != nullptr || a.q_segment_ids != nullptr) {
      return Invalid("bias and segment ids need the dense form, not cu_seqlens");
    }
    KS_RETURN_IF_ERROR(CheckOffsets(a.cu_seqlens_q, a.num_sequences, a.total_q, "cu_seqlens_q"));
    KS_RETURN_IF_ERROR(CheckOffsets(a.cu_seqlens_k, a.num_sequences, a.total_k, "cu_seqlens_k"));
  } else if (a.num_sequences * a.seq_len_q > a.total_q ||
             a.num_sequences * a.seq_len_k > a.total_k) {
    return Invalid("B*S exceeds the rows of q or k");
  }
  return CheckBuffers(args);
}
// Writes zeros to rows [begin, end) of a [*, width] tensor.
void ZeroRows(DType dtype, void* dst, int64_t begin, int64_t end, int64_t width) {
  const std::vector<float> zeros(static_cast<size_t>(std::max<int64_t>(width, 0)), 0.0f);
  for (int64_t row = begin; row < end; ++row) {
    StoreFromFloat(dtype, zeros.data(), width, dst, row * width);
  }
}

int64_t DbiasRows(const FlashAttentionBwdArgs& args) {
  if (args.dbias == nullptr || args.dbias_batch == 0 || args.dbias_heads == 0) return 0;
  return args.dbias_batch * args.dbias_heads * args.fwd.seq_len_q;
}

// Zeroes what no work item writes: the rows no sequence covers, and everything when q or k
// has no row.
void ClearUncovered(const FlashAttentionBwdArgs& args) {
  const FlashAttentionArgs& a = args.fwd;
  const bool empty = a.total_q == 0 || a.total_k == 0;
  const bool varlen = a.cu_seqlens_q != nullptr;
  int64_t covered_q = varlen ? a.cu_seqlens_q[a.num_sequences] : a.num_sequences * a.seq_len_q;
  int64_t covered_k = varlen ? a.cu_seqlens_k[a.num_sequences] : a.num_sequences * a.seq_len_k;
  if (empty) covered_q = covered_k = 0;
  const int64_t d = a.head_dim;
  ZeroRows(a.dtype, args.dq, covered_q, a.total_q, a.num_heads_q * d);
  ZeroRows(a.dtype, args.dk, covered_k, a.total_k, a.num_heads_kv * d);
  ZeroRows(a.dtype, args.dv, covered_k, a.total_k, a.num_heads_kv * d);
  if (empty && a.seq_len_k > 0) ZeroRows(DType::kF32, args.dbias, 0, DbiasRows(args), a.seq_len_k);
}

// One item per tile of `rows_of(span)` rows of every sequence, for each of `heads` heads.
template <typename RowsOf>
std::vector<Item> Items(const FlashAttentionArgs& a, int64_t block, int64_t heads, RowsOf rows_of) {
  std::vector<Item> items;
  for (int64_t seq = 0; seq < a.num_sequences; ++seq) {
    const int64_t rows = rows_of(SpanOf(a, seq));
    for (int64_t start = 0; start < rows; start += block) {
      for (int64_t head = 0; head < heads; ++head) items.push_back({seq, start, head});
    }
  }
  return items;
}

}  // namespace

absl::Status FlashAttentionBwdCpu(const FlashAttentionBwdArgs& args, const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckFlashAttentionBwdCpuConfig(config));
  KS_RETURN_IF_ERROR(CheckArgs(args));
  const FlashAttentionArgs& a = args.fwd;
  ClearUncovered(args);
  // No query or no key row: all zeros. An empty q or k still declares its B (q [10^9,0,1,1]
  // carries no bytes), so nothing is walked or sized from it.
  if (a.total_q == 0 || a.total_k == 0) return absl::OkStatus();
  Plan plan;
  plan.args = &args;
  plan.block_q =
      std::clamp<int64_t>(config.block_q > 0 ? config.block_q : kDefaultBlockQ, 1, a.total_q);
  plan.block_k =
      std::clamp<int64_t>(config.block_k > 0 ? config.block_k : kDefaultBlockK, 1, a.total_k);
  plan.group = a.num_heads_q / a.num_heads_kv;
  plan.scale = a.softmax_scale;
  plan.softcap = a.softcap;
  const std::vector<Item> dq_items =
      Items(a, plan.block_q, a.num_heads_q, [](const Span& s) { return s.q_len; });
  const std::vector<Item> dkdv_items =
      Items(a, plan.block_k, a.num_heads_kv, [](const Span& s) { return s.k_len; });
  const int64_t dbias_rows = DbiasRows(args);
  const int64_t most = std::max(
      {static_cast<int64_t>(dq_items.size()), static_cast<int64_t>(dkdv_items.size()), dbias_rows});
  const int threads = CpuWorkerCount(RequestedThreads(config), most);
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  for (Scratch& w : scratch) {
    attention_bwd::ResizeScratch(plan, dbias_rows > 0 ? a.seq_len_k : 0, w);
  }
  auto run = [&](int64_t count, auto body) {
    return ParallelForInterruptible(count, threads, a.interrupt, [&](int worker, int64_t i) {
      body(i, scratch[static_cast<size_t>(worker)]);
    });
  };
  KS_RETURN_IF_ERROR(run(static_cast<int64_t>(dq_items.size()), [&](int64_t i, Scratch& w) {
    attention_bwd::RunDq(plan, dq_items[static_cast<size_t>(i)], w);
  }));
  KS_RETURN_IF_ERROR(run(static_cast<int64_t>(dkdv_items.size()), [&](int64_t i, Scratch& w) {
    attention_bwd::RunDkDv(plan, dkdv_items[static_cast<size_t>(i)], w);
  }));
  return run(dbias_rows, [&](int64_t i, Scratch& w) { attention_bwd::RunDbiasRow(plan, i, w); });
}

// The backward's tiles are the forward's, with the same bounds.
const ConfigSchema& FlashAttentionBwdCpuConfigSchema() { return FlashAttentionCpuConfigSchema(); }

absl::Status CheckFlashAttentionBwdCpuConfig(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckCpuPlatform(config));
  return FlashAttentionBwdCpuConfigSchema().Check(config, "flash_attention_bwd on cpu");
}

}  // namespace kernelserve::cpu
