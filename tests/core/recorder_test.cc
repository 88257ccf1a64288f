#include "core/recorder.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace {

RecordedCall Call(const std::string& key) {
  RecordedCall c;
  c.kernel = "mean_pooling";
  c.inputs = {{"x", TensorSpec{DType::kF32, {1, 2, 3}}}};
  c.cache_key = key;
  c.options.config = KernelConfig{};  // an override is never kept
  return c;
}

TEST(RecorderTest, KeepsDistinctCallsInOrderAndCounts) {
  Recorder recorder(/*capacity=*/2);
  recorder.Record(Call("b"));
  recorder.Record(Call("a"));
  recorder.Record(Call("b"));
  recorder.Record(Call("c"));  // over capacity: counted as dropped
  std::vector<RecordedCall> calls = recorder.List();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].cache_key, "b");
  EXPECT_EQ(calls[0].count, 2);
  EXPECT_EQ(calls[1].cache_key, "a");
  EXPECT_FALSE(calls[0].options.config.has_value());
  EXPECT_EQ(recorder.dropped(), 1u);
  recorder.Clear();
  EXPECT_TRUE(recorder.List().empty());
  EXPECT_EQ(recorder.dropped(), 0u);
}

TEST(RecorderTest, ConcurrentRecordsAreAllCounted) {
  Recorder recorder;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&recorder] {
      for (int i = 0; i < 1000; ++i) recorder.Record(Call(std::to_string(i % 10)));
    });
  }
  for (std::thread& t : threads) t.join();
  int64_t total = 0;
  for (const RecordedCall& c : recorder.List()) total += c.count;
  EXPECT_EQ(recorder.List().size(), 10u);
  EXPECT_EQ(total, 4000);
}

}  // namespace
}  // namespace kernelserve
