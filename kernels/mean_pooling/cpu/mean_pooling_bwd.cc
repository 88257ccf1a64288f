#include "kernels/mean_pooling/cpu/mean_pooling_bwd.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/mean_pooling/cpu/mean_pooling.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/float_convert.h"
#include "kernels/runtime/cpu/parallel_for.h"

namespace kernelserve::cpu {
namespace {

constexpr int64_t kDefaultBlockRows = 64;

absl::Status CheckArgs(const MeanPoolingBwdArgs& args) {
  if (!IsFloating(args.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mean pooling backward: dtype ", Sv(DTypeName(args.dtype)), " is not f32, f16 or bf16"));
  }
  if (args.hidden < 0 || args.num_sequences < 0 || args.total_rows < 0 || args.seq_len < 0) {
    return absl::InvalidArgumentError("mean pooling backward: negative size");
  }
  if (args.cu_seqlens != nullptr) {
    if (args.mask != nullptr) {
      return absl::InvalidArgumentError("mean pooling backward: both cu_seqlens and mask given");
    }
    return CheckOffsets(args.cu_seqlens, args.num_sequences, args.total_rows, "cu_seqlens");
  }
  if (args.num_sequences * args.seq_len != args.total_rows) {
    return absl::InvalidArgumentError(absl::StrCat("mean pooling backward: ", args.num_sequences,
                                                   "x", args.seq_len, " rows differ from the ",
                                                   args.total_rows, " rows of dx"));
  }
  return absl::OkStatus();
}

// The sequence of `row` and whether the row counts; seq = -1 when no sequence holds it.
struct RowOwner {
  int64_t seq = -1;
  bool counted = false;
};

RowOwner OwnerOf(const MeanPoolingBwdArgs& args, int64_t row) {
  if (args.cu_seqlens != nullptr) {
    const int64_t* begin = args.cu_seqlens;
    const int64_t* end = args.cu_seqlens + args.num_sequences + 1;
    // The last offset <= row starts the row's sequence (empty sequences share offsets).
    const int64_t* at = std::upper_bound(begin, end, row);
    const int64_t seq = (at - begin) - 1;
    if (seq >= args.num_sequences) return {};
    return {seq, true};
  }
  const int64_t seq = row / args.seq_len;
  return {seq, args.mask == nullptr || args.mask[row] != 0};
}

}  // namespace

absl::Status MeanPoolingBwdCpu(const MeanPoolingBwdArgs& args, const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckMeanPoolingBwdCpuConfig(config));
  KS_RETURN_IF_ERROR(CheckArgs(args));
  if (args.total_rows == 0 || args.hidden == 0) return absl::OkStatus();
  const int64_t h_count = args.hidden;
  const int64_t block_rows = config.block_size > 0 ? config.block_size : kDefaultBlockRows;
  const int64_t items = (args.total_rows + block_rows - 1) / block_rows;
  const std::vector<int64_t> counts = CountPoolingRows(args);
  const int threads = CpuWorkerCount(RequestedThreads(config), items);
  // Per worker: the quotient row of the sequence last seen, and which sequence that was.
  std::vector<std::vector<float>> rows(static_cast<size_t>(threads),
                                       std::vector<float>(static_cast<size_t>(h_count)));
  std::vector<int64_t> row_seq(static_cast<size_t>(threads), -1);
  const std::vector<float> zeros(static_cast<size_t>(h_count), 0.0f);
  return ParallelForInterruptible(items, threads, args.interrupt, [&](int worker, int64_t item) {
    std::vector<float>& quotient = rows[static_cast<size_t>(worker)];
    int64_t& seq_seen = row_seq[static_cast<size_t>(worker)];
    const int64_t last = std::min(args.total_rows, (item + 1) * block_rows);
    for (int64_t row = item * block_rows; row < last; ++row) {
      const RowOwner owner = OwnerOf(args, row);
      if (!owner.counted) {
        StoreFromFloat(args.dtype, zeros.data(), h_count, args.dx, row * h_count);
        continue;
      }
      if (owner.seq != seq_seen) {
        LoadAsFloat(args.dtype, args.dout, owner.seq * h_count, h_count, quotient.data());
        const auto count = static_cast<float>(counts[static_cast<size_t>(owner.seq)]);
        for (float& value : quotient) value /= count;
        seq_seen = owner.seq;
      }
      StoreFromFloat(args.dtype, quotient.data(), h_count, args.dx, row * h_count);
    }
  });
}

const ConfigSchema& MeanPoolingBwdCpuConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField("block_size", 0, kMaxCpuBlockRows, "0: 64", "rows of dx per work item"),
      CpuThreadsField(),
  }};
  return *kSchema;
}

absl::Status CheckMeanPoolingBwdCpuConfig(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckCpuPlatform(config));
  return MeanPoolingBwdCpuConfigSchema().Check(config, "mean_pooling_bwd on cpu");
}

}  // namespace kernelserve::cpu
