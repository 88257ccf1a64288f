#include "kernels/flash_attention/cudnn/flash_attention_cudnn_graph.h"

#include <cudnn_frontend.h>

#include <algorithm>
#include <exception>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "kernels/flash_attention/cudnn/flash_attention_cudnn_config.h"
#include "kernels/runtime/cuda/cuda_check.h"
#include "kernels/runtime/cuda/cuda_resources.h"
#include "kernels/runtime/cudnn/cudnn_library.h"

namespace kernelserve::cudnn {
namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the graph (the variant pack's keys).
enum Uid : int64_t { kQ = 1, kK, kV, kBias, kOut, kLse, kDout, kDq, kDk, kDv, kDbias };

// A frontend error as a status: the graph's own refusals are Unimplemented (the cuda platform
// serves those problems); anything else is Internal.
absl::Status FrontendStatus(fe::error_t error, const char* step) {
  if (error.is_good()) return absl::OkStatus();
  const std::string message =
      absl::StrCat("flash attention (cudnn): ", step, ": ", error.get_message());
  switch (error.get_code()) {
    case fe::error_code_t::GRAPH_NOT_SUPPORTED:
    case fe::error_code_t::INVALID_VALUE:
    case fe::error_code_t::ATTRIBUTE_NOT_SET:
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
    case fe::error_code_t::HEURISTIC_QUERY_FAILED:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

#define KS_FE_RETURN_IF_ERROR(expr, step) KS_RETURN_IF_ERROR(FrontendStatus((expr), (step)))

// Everything a graph depends on, as a cache key.
std::string GraphKey(const FlashAttentionProblem& p, int ordinal) {
  return absl::StrCat("fwd|", ordinal, "|", static_cast<int>(p.dtype), "|", p.num_sequences, ",",
                      p.seq_len_q, ",", p.seq_len_k, ",", p.num_heads_q, ",", p.num_heads_kv, ",",
                      p.head_dim, "|", p.causal, ",", p.window_left, ",", p.window_right, "|",
                      p.softmax_scale, "|", p.has_bias, ",", p.bias_batch, ",", p.bias_heads, "|",
                      p.return_lse);
}

std::string GraphKey(const FlashAttentionBwdProblem& p, int ordinal) {
  return absl::StrCat("bwd|", p.return_dbias, ",", p.deterministic, "|", GraphKey(p.fwd, ordinal));
}

// cuDNN's [B,H,S,D] view of the contract's [B,S,H,D] tensor.
std::shared_ptr<fe::graph::Tensor_attributes> Bshd(fe::graph::Graph& graph, const char* name,
                                                   Uid uid, int64_t b, int64_t s, int64_t h,
                                                   int64_t d) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({b, h, s, d})
                          .set_stride({s * h * d, d, h * d, 1}));
}

// The contract's mask as cuDNN's diagonal band, aligned bottom right (key j of query i is
// visible when i + Sk - Sq - window_left <= j <= i + Sk - Sq + right, right = 0 for causal).
// Where Sq == Sk that is the same band aligned top left, which cuDNN's backward runs as a
// causal mask (skipping the tiles above the diagonal): measured on an H100, its causal backward
// took as long as the full one with the bottom-right alignment.
template <typename Attributes>
void SetMask(const FlashAttentionProblem& p, Attributes& attrs) {
  int64_t right = p.causal ? 0 : -1;
  if (p.window_right >= 0) right = right < 0 ? p.window_right : std::min(right, p.window_right);
  if (right < 0 && p.window_left < 0) return;
  attrs.set_diagonal_alignment(p.seq_len_q == p.seq_len_k ? fe::DiagonalAlignment_t::TOP_LEFT
                                                          : fe::DiagonalAlignment_t::BOTTOM_RIGHT);
  if (right >= 0) attrs.set_diagonal_band_right_bound(static_cast<int>(right));
  // cuDNN's left bound counts the diagonal itself: keys j > diagonal - left_bound.
  if (p.window_left >= 0) attrs.set_diagonal_band_left_bound(static_cast<int>(p.window_left + 1));
}

struct Graph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::vector<int64_t> plans;   // the graph's plan indices that built, in cuDNN's order
  int64_t workspace_bytes = 0;  // the largest of them
};

// A new graph with the problem's data types.
std::shared_ptr<fe::graph::Graph> NewGraph(const FlashAttentionProblem& p) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(p.dtype == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// The problem's bias as a graph tensor (f32 [B or 1, Hq or 1, Sq, Sk]).
std::shared_ptr<fe::graph::Tensor_attributes> BiasTensor(fe::graph::Graph& graph,
                                                         const FlashAttentionProblem& p,
                                                         const char* name, Uid uid) {
  const int64_t bb = p.bias_batch, bh = p.bias_heads, sq = p.seq_len_q, sk = p.seq_len_k;
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_data_type(fe::DataType_t::FLOAT)
                          .set_dim({bb, bh, sq, sk})
                          .set_stride({bh * sq * sk, sq * sk, sk, 1}));
}

// Marks `t` an output of the contract's [B,S,H,D] layout.
void SetBshdOutput(fe::graph::Tensor_attributes& t, Uid uid, int64_t b, int64_t s, int64_t h,
                   int64_t d) {
  t.set_output(true).set_uid(uid).set_dim({b, h, s, d}).set_stride({s * h * d, d, h * d, 1});
}

// Validates and builds `built.graph`, and up to kMaxFlashPlans of its plans.
absl::Status Finish(Handle handle, Graph& built) {
  fe::graph::Graph& graph = *built.graph;
  KS_FE_RETURN_IF_ERROR(graph.validate(), "validate");
  KS_FE_RETURN_IF_ERROR(graph.build_operation_graph(handle), "operation graph");
  KS_FE_RETURN_IF_ERROR(graph.create_execution_plans({fe::HeurMode_t::A}), "execution plans");
  KS_FE_RETURN_IF_ERROR(graph.check_support(handle), "support check");
  const int64_t count = std::min<int64_t>(graph.get_execution_plan_count(), kMaxFlashPlans);
  fe::error_t last;
  for (int64_t i = 0; i < count; ++i) {
    last = graph.build_plan_at_index(handle, i);
    if (!last.is_good()) continue;
    int64_t bytes = 0;
    if (!graph.get_workspace_size_plan_at_index(i, bytes).is_good()) continue;
    built.plans.push_back(i);
    built.workspace_bytes = std::max(built.workspace_bytes, bytes);
  }
  if (built.plans.empty()) {
    return last.is_good() ? absl::UnimplementedError("flash attention (cudnn): no plan")
                          : FrontendStatus(last, "build plans");
  }
  return absl::OkStatus();
}

// SDPA forward: out (and lse as cuDNN's stats) from q, k, v and the bias.
absl::StatusOr<Graph> Build(const FlashAttentionProblem& p, Handle handle) {
  Graph built;
  built.graph = NewGraph(p);
  fe::graph::Graph& graph = *built.graph;
  const int64_t b = p.num_sequences, sq = p.seq_len_q, sk = p.seq_len_k, d = p.head_dim;
  auto q = Bshd(graph, "q", kQ, b, sq, p.num_heads_q, d);
  auto k = Bshd(graph, "k", kK, b, sk, p.num_heads_kv, d);
  auto v = Bshd(graph, "v", kV, b, sk, p.num_heads_kv, d);
  fe::graph::SDPA_attributes attrs;
  attrs.set_name("flash_attention")
      .set_generate_stats(p.return_lse)
      .set_attn_scale(static_cast<float>(p.softmax_scale));
  SetMask(p, attrs);
  if (p.has_bias) attrs.set_bias(BiasTensor(graph, p, "bias", kBias));
  auto [out, lse] = graph.sdpa(q, k, v, attrs);
  SetBshdOutput(*out, kOut, b, sq, p.num_heads_q, d);
  if (p.return_lse) {
    lse->set_output(true)
        .set_uid(kLse)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({b, p.num_heads_q, sq, 1})
        .set_stride({p.num_heads_q * sq, sq, 1, 1});
  }
  KS_RETURN_IF_ERROR(Finish(handle, built));
  return built;
}

// SDPA backward (deterministic unless the call says not): dq, dk, dv (and dbias) from q, k, v, out,
// dout and the lse as cuDNN's stats.
absl::StatusOr<Graph> Build(const FlashAttentionBwdProblem& bwd, Handle handle) {
  const FlashAttentionProblem& p = bwd.fwd;
  Graph built;
  built.graph = NewGraph(p);
  fe::graph::Graph& graph = *built.graph;
  const int64_t b = p.num_sequences, sq = p.seq_len_q, sk = p.seq_len_k, d = p.head_dim;
  const int64_t hq = p.num_heads_q, hkv = p.num_heads_kv;
  auto q = Bshd(graph, "q", kQ, b, sq, hq, d);
  auto k = Bshd(graph, "k", kK, b, sk, hkv, d);
  auto v = Bshd(graph, "v", kV, b, sk, hkv, d);
  auto out = Bshd(graph, "out", kOut, b, sq, hq, d);
  auto dout = Bshd(graph, "dout", kDout, b, sq, hq, d);
  auto stats = graph.tensor(fe::graph::Tensor_attributes()
                                .set_name("lse")
                                .set_uid(kLse)
                                .set_data_type(fe::DataType_t::FLOAT)
                                .set_dim({b, hq, sq, 1})
                                .set_stride({hq * sq, sq, 1, 1}));
  fe::graph::SDPA_backward_attributes attrs;
  attrs.set_name("flash_attention_bwd")
      .set_attn_scale(static_cast<float>(p.softmax_scale))
      .set_deterministic_algorithm(bwd.deterministic);
  SetMask(p, attrs);
  if (p.has_bias) attrs.set_bias(BiasTensor(graph, p, "bias", kBias));
  if (bwd.return_dbias) {
    auto dbias = BiasTensor(graph, p, "dbias", kDbias);
    dbias->set_output(true);
    attrs.set_dbias(dbias);
  }
  auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, out, dout, stats, attrs);
  SetBshdOutput(*dq, kDq, b, sq, hq, d);
  SetBshdOutput(*dk, kDk, b, sk, hkv, d);
  SetBshdOutput(*dv, kDv, b, sk, hkv, d);
  KS_RETURN_IF_ERROR(Finish(handle, built));
  return built;
}

// One cache entry: built once, by the first call that needs it.
struct Entry {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);  // the verdict
  Graph graph ABSL_GUARDED_BY(mu);
};

class GraphCache {
 public:
  // The entry of `key`, new and unbuilt when there was none.
  std::shared_ptr<Entry> Find(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    order_.emplace_front(key, std::make_shared<Entry>());
    index_[key] = order_.begin();
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evictions_;
    }
    return order_.front().second;
  }

  // Drops `key` (a failure that may pass on a retry is not kept).
  void Forget(const std::string& key, const std::shared_ptr<Entry>& entry) {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second->second != entry) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  void CountBuild() {
    absl::MutexLock lock(&mu_);
    ++builds_;
  }

  FlashGraphCacheStats Stats() {
    absl::MutexLock lock(&mu_);
    return {static_cast<int64_t>(order_.size()), builds_, evictions_};
  }

  void SetCapacity(size_t entries) {
    absl::MutexLock lock(&mu_);
    capacity_ = std::max<size_t>(entries, 1);
  }

 private:
  using Order = std::list<std::pair<std::string, std::shared_ptr<Entry>>>;
  absl::Mutex mu_;
  Order order_ ABSL_GUARDED_BY(mu_);  // most recently used first
  std::unordered_map<std::string, Order::iterator> index_ ABSL_GUARDED_BY(mu_);
  size_t capacity_ ABSL_GUARDED_BY(mu_) = 256;
  int64_t builds_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

GraphCache& Cache() {
  static GraphCache* const cache = new GraphCache();
  return *cache;
}

// The entry of the problem (FlashAttentionProblem: the forward graph; FlashAttentionBwdProblem:
// the backward's), built (on this thread when new) and supported; else the verdict.
template <typename P>
absl::StatusOr<std::shared_ptr<Entry>> Built(const P& p, int ordinal) {
  KS_RETURN_IF_ERROR(CheckCudnnFlashRules(ForwardOf(p)));
  KS_ASSIGN_OR_RETURN(const Handle handle, ThisThreadHandle(ordinal));
  const std::string key = GraphKey(p, ordinal);
  std::shared_ptr<Entry> entry = Cache().Find(key);
  absl::MutexLock lock(&entry->mu);
  if (!entry->done) {
    absl::StatusOr<Graph> graph;
    try {
      graph = Build(p, handle);
    } catch (const std::exception& e) {
      graph = absl::InternalError(absl::StrCat("flash attention (cudnn): ", e.what()));
    }
    Cache().CountBuild();
    if (!graph.ok() && !absl::IsUnimplemented(graph.status())) {
      Cache().Forget(key, entry);  // out of memory, a CUDA error: may pass next time
      return graph.status();
    }
    entry->done = true;
    entry->status = graph.status();
    if (graph.ok()) entry->graph = *std::move(graph);
  }
  KS_RETURN_IF_ERROR(entry->status);
  return entry;
}

template <typename P>
absl::StatusOr<int> PlanCount(const P& problem, int ordinal) {
  KS_ASSIGN_OR_RETURN(const std::shared_ptr<Entry> entry, Built(problem, ordinal));
  absl::MutexLock lock(&entry->mu);
  return static_cast<int>(entry->graph.plans.size());
}

// Queues plan `plan_index` of the problem's graph with the tensors of `pack`.
template <typename P>
absl::Status Enqueue(const P& problem, int plan_index, std::unordered_map<int64_t, void*>& pack,
                     int ordinal, cudaStream_t stream) {
  KS_ASSIGN_OR_RETURN(const std::shared_ptr<Entry> entry, Built(problem, ordinal));
  KS_ASSIGN_OR_RETURN(const Handle handle, ThisThreadHandle(ordinal));
  absl::MutexLock lock(&entry->mu);
  const Graph& graph = entry->graph;
  if (plan_index < 0 || plan_index >= static_cast<int>(graph.plans.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flash attention (cudnn): plan", plan_index, " does not exist; this problem has ",
        graph.plans.size(), " plan(s) (plan0..plan", graph.plans.size() - 1, ")"));
  }
  KS_ASSIGN_OR_RETURN(cuda::DeviceBuffer workspace,
                      cuda::DeviceBuffer::Allocate(ordinal, graph.workspace_bytes, stream));
  try {
    if (fe::detail::set_stream(handle, stream) != CUDNN_STATUS_SUCCESS) {
      return absl::InternalError("flash attention (cudnn): cudnnSetStream failed");
    }
    return FrontendStatus(
        graph.graph->execute_plan_at_index(handle, pack, workspace.get(), graph.plans[plan_index]),
        "execute");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("flash attention (cudnn): ", e.what()));
  }
}

}  // namespace

absl::Status CheckFlashGraph(const FlashAttentionProblem& problem, int ordinal) {
  return Built(problem, ordinal).status();
}

absl::StatusOr<int> FlashPlanCount(const FlashAttentionProblem& problem, int ordinal) {
  return PlanCount(problem, ordinal);
}

absl::Status EnqueueFlashGraph(const FlashAttentionProblem& problem, int plan_index,
                               const FlashPointers& pointers, int ordinal, cudaStream_t stream) {
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(pointers.q)},
                                             {kK, const_cast<void*>(pointers.k)},
                                             {kV, const_cast<void*>(pointers.v)},
                                             {kOut, pointers.out}};
  if (problem.has_bias) pack[kBias] = const_cast<float*>(pointers.bias);
  if (problem.return_lse) pack[kLse] = pointers.lse;
  return Enqueue(problem, plan_index, pack, ordinal, stream);
}

absl::Status CheckFlashGraph(const FlashAttentionBwdProblem& problem, int ordinal) {
  return Built(problem, ordinal).status();
}

absl::StatusOr<int> FlashPlanCount(const FlashAttentionBwdProblem& problem, int ordinal) {
  return PlanCount(problem, ordinal);
}

absl::Status EnqueueFlashGraph(const FlashAttentionBwdProblem& problem, int plan_index,
                               const FlashBwdPointers& pointers, int ordinal, cudaStream_t stream) {
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(pointers.q)},
                                             {kK, const_cast<void*>(pointers.k)},
                                             {kV, const_cast<void*>(pointers.v)},
                                             {kOut, const_cast<void*>(pointers.out)},
                                             {kDout, const_cast<void*>(pointers.dout)},
                                             {kLse, const_cast<float*>(pointers.lse)},
                                             {kDq, pointers.dq},
                                             {kDk, pointers.dk},
                                             {kDv, pointers.dv}};
  if (problem.fwd.has_bias) pack[kBias] = const_cast<float*>(pointers.bias);
  if (problem.return_dbias) pack[kDbias] = pointers.dbias;
  return Enqueue(problem, plan_index, pack, ordinal, stream);
}

FlashGraphCacheStats GetFlashGraphCacheStats() { return Cache().Stats(); }

void SetFlashGraphCacheCapacity(size_t entries) { Cache().SetCapacity(entries); }

}  // namespace kernelserve::cudnn
