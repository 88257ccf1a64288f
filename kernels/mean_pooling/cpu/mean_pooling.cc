#include "kernels/mean_pooling/cpu/mean_pooling.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/runtime/cpu/checks.h"
#include "kernels/runtime/cpu/float_convert.h"
#include "kernels/runtime/cpu/parallel_for.h"

namespace kernelserve::cpu {
namespace {

constexpr int64_t kDefaultBlockRows = 32;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A contiguous run of leaves of one sequence; the unit of work of the first pass.
struct WorkItem {
  int64_t seq = 0;
  int64_t leaf_begin = 0;
  int64_t leaf_end = 0;
  bool whole = false;  // covers the whole sequence: finalises it directly
};

// Per-worker buffers, each `hidden` floats.
struct Scratch {
  std::vector<float> row;    // one row of x converted to float
  std::vector<float> leaf;   // the current leaf's sum
  std::vector<float> total;  // the running sum of the leaves
};

absl::Status CheckArgs(const MeanPoolingArgs& args) {
  if (!IsFloating(args.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mean pooling: dtype ", Sv(DTypeName(args.dtype)), " is not f32, f16 or bf16"));
  }
  if (args.hidden < 0 || args.num_sequences < 0 || args.total_rows < 0 || args.seq_len < 0) {
    return absl::InvalidArgumentError("mean pooling: negative size");
  }
  if (args.cu_seqlens != nullptr) {
    if (args.mask != nullptr) {
      return absl::InvalidArgumentError("mean pooling: both cu_seqlens and mask given");
    }
    KS_RETURN_IF_ERROR(
        CheckOffsets(args.cu_seqlens, args.num_sequences, args.total_rows, "cu_seqlens"));
  } else if (args.num_sequences * args.seq_len > args.total_rows) {
    return absl::InvalidArgumentError(absl::StrCat("mean pooling: ", args.num_sequences, "x",
                                                   args.seq_len, " rows exceed the ",
                                                   args.total_rows, " rows of x"));
  }
  return absl::OkStatus();
}

int64_t FirstRow(const MeanPoolingArgs& args, int64_t seq) {
  return args.cu_seqlens != nullptr ? args.cu_seqlens[seq] : seq * args.seq_len;
}

int64_t SeqRows(const MeanPoolingArgs& args, int64_t seq) {
  return args.cu_seqlens != nullptr ? args.cu_seqlens[seq + 1] - args.cu_seqlens[seq]
                                    : args.seq_len;
}

// leaf[h] = sum over the counted rows of leaf `leaf` of sequence `seq`, in row order.
void SumLeaf(const MeanPoolingArgs& args, int64_t seq, int64_t leaf, Scratch& scratch) {
  const int64_t h_count = args.hidden;
  float* acc = scratch.leaf.data();
  std::fill(acc, acc + h_count, 0.0f);
  const int64_t first = leaf * kMeanPoolingLeafRows;
  const int64_t last = std::min(first + kMeanPoolingLeafRows, SeqRows(args, seq));
  const int64_t base = FirstRow(args, seq);
  for (int64_t r = first; r < last; ++r) {
    if (args.mask != nullptr && args.mask[seq * args.seq_len + r] == 0) continue;
    const float* src;
    if (args.dtype == DType::kF32) {
      src = static_cast<const float*>(args.x) + (base + r) * h_count;
    } else {
      LoadAsFloat(args.dtype, args.x, (base + r) * h_count, h_count, scratch.row.data());
      src = scratch.row.data();
    }
    for (int64_t h = 0; h < h_count; ++h) acc[h] += src[h];
  }
}

// Writes out[seq, :] = total / count (zeros when count is 0).
void Finalize(const MeanPoolingArgs& args, int64_t seq, int64_t count, float* total) {
  const int64_t h_count = args.hidden;
  if (count == 0) {
    std::fill(total, total + h_count, 0.0f);
  } else {
    const float divisor = static_cast<float>(count);
    for (int64_t h = 0; h < h_count; ++h) total[h] /= divisor;
  }
  StoreFromFloat(args.dtype, total, h_count, args.out, seq * h_count);
}

}  // namespace

std::vector<int64_t> CountPoolingRows(const PoolingRowsArgs& args) {
  std::vector<int64_t> counts(static_cast<size_t>(args.num_sequences));
  for (int64_t seq = 0; seq < args.num_sequences; ++seq) {
    int64_t count =
        args.cu_seqlens != nullptr ? args.cu_seqlens[seq + 1] - args.cu_seqlens[seq] : args.seq_len;
    if (args.mask != nullptr) {
      const uint8_t* row = args.mask + seq * args.seq_len;
      count = std::count_if(row, row + args.seq_len, [](uint8_t m) { return m != 0; });
    }
    counts[static_cast<size_t>(seq)] = count;
  }
  return counts;
}

absl::Status MeanPoolingCpu(const MeanPoolingArgs& args, const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckMeanPoolingCpuConfig(config));
  KS_RETURN_IF_ERROR(CheckArgs(args));
  // No output element: nothing to write. The other dims of an empty x or out are sized from
  // nothing a caller sent (x [0,1,2^40] carries no bytes), so nothing is sized from them.
  if (args.num_sequences == 0 || args.hidden == 0) return absl::OkStatus();
  const int64_t block_rows = config.block_size > 0 ? config.block_size : kDefaultBlockRows;
  const int64_t leaves_per_item = CeilDiv(block_rows, kMeanPoolingLeafRows);
  const int64_t h_count = args.hidden;

  // Plan: items of up to leaves_per_item leaves; sequences split over several items keep
  // their leaf sums in `partials` (from leaf_base[seq]) for a second pass.
  std::vector<WorkItem> items;
  std::vector<int64_t> split_seqs;
  std::vector<int64_t> leaf_base(static_cast<size_t>(args.num_sequences), 0);
  int64_t num_partials = 0;
  for (int64_t seq = 0; seq < args.num_sequences; ++seq) {
    const int64_t leaves = CeilDiv(SeqRows(args, seq), kMeanPoolingLeafRows);
    const bool whole = leaves <= leaves_per_item;
    if (!whole) {
      split_seqs.push_back(seq);
      leaf_base[static_cast<size_t>(seq)] = num_partials;
      num_partials += leaves;
    }
    for (int64_t begin = 0; begin < std::max<int64_t>(leaves, 1); begin += leaves_per_item) {
      items.push_back({seq, begin, std::min(begin + leaves_per_item, leaves), whole});
    }
  }
  const std::vector<int64_t> counts = CountPoolingRows(args);
  std::vector<float> partials(static_cast<size_t>(num_partials * h_count));

  const int threads = CpuWorkerCount(RequestedThreads(config), static_cast<int64_t>(items.size()));
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  for (Scratch& s : scratch) {
    s.row.resize(static_cast<size_t>(h_count));
    s.leaf.resize(static_cast<size_t>(h_count));
    s.total.resize(static_cast<size_t>(h_count));
  }
  KS_RETURN_IF_ERROR(ParallelForInterruptible(
      static_cast<int64_t>(items.size()), threads, args.interrupt, [&](int worker, int64_t i) {
        const WorkItem& item = items[static_cast<size_t>(i)];
        Scratch& s = scratch[static_cast<size_t>(worker)];
        std::fill(s.total.begin(), s.total.end(), 0.0f);
        for (int64_t leaf = item.leaf_begin; leaf < item.leaf_end; ++leaf) {
          SumLeaf(args, item.seq, leaf, s);
          if (item.whole) {
            for (int64_t h = 0; h < h_count; ++h) s.total[h] += s.leaf[h];
          } else {
            const int64_t at = (leaf_base[static_cast<size_t>(item.seq)] + leaf) * h_count;
            std::copy(s.leaf.begin(), s.leaf.end(), partials.begin() + at);
          }
        }
        if (item.whole)
          Finalize(args, item.seq, counts[static_cast<size_t>(item.seq)], s.total.data());
      }));
  // Second pass: add the leaf sums of each split sequence in leaf order, as the first pass
  // does for whole sequences.
  return ParallelForInterruptible(
      static_cast<int64_t>(split_seqs.size()), threads, args.interrupt, [&](int worker, int64_t i) {
        const int64_t seq = split_seqs[static_cast<size_t>(i)];
        Scratch& s = scratch[static_cast<size_t>(worker)];
        std::fill(s.total.begin(), s.total.end(), 0.0f);
        const int64_t leaves = CeilDiv(SeqRows(args, seq), kMeanPoolingLeafRows);
        for (int64_t leaf = 0; leaf < leaves; ++leaf) {
          const float* sum =
              partials.data() + (leaf_base[static_cast<size_t>(seq)] + leaf) * h_count;
          for (int64_t h = 0; h < h_count; ++h) s.total[h] += sum[h];
        }
        Finalize(args, seq, counts[static_cast<size_t>(seq)], s.total.data());
      });
}

const ConfigSchema& MeanPoolingCpuConfigSchema() {
  static const ConfigSchema* const kSchema = new ConfigSchema{{
      IntConfigField("block_size", 0, kMaxCpuBlockRows, "0: chunk_size",
                     "rows per work item, rounded up to whole leaves"),
      CpuThreadsField(),
  }};
  return *kSchema;
}

absl::Status CheckMeanPoolingCpuConfig(const KernelConfig& config) {
  KS_RETURN_IF_ERROR(CheckCpuPlatform(config));
  return MeanPoolingCpuConfigSchema().Check(config, "mean_pooling on cpu");
}

}  // namespace kernelserve::cpu
