#include "server/metric_series.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kernelserve::server {
namespace {

// The counter values of `family`'s series as a scrape sees them, by their labels.
std::map<std::map<std::string, std::string>, double> Collected(prometheus::Registry& registry) {
  std::map<std::map<std::string, std::string>, double> values;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::map<std::string, std::string> labels;
      for (const prometheus::ClientMetric::Label& label : metric.label) {
        labels[label.name] = label.value;
      }
      values[labels] = metric.counter.value;
    }
  }
  return values;
}

TEST(SeriesCacheTest, OneSeriesPerCombinationWithTheGivenLabels) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter().Name("calls_total").Help("h").Register(registry);
  SeriesCache<prometheus::Counter, 2> cache(family, {"kernel", "code"});
  prometheus::Counter& a = cache.Get({"mean_pooling", "OK"});
  EXPECT_EQ(&cache.Get({"mean_pooling", "OK"}), &a);
  // Values that would join to the same text without a separator are different series.
  prometheus::Counter& b = cache.Get({"mean_poolingO", "K"});
  EXPECT_NE(&b, &a);
  a.Increment();
  a.Increment();
  b.Increment(5);
  cache.Get({"flash_attention", "INTERNAL"}).Increment();
  // The family's own series: a scrape shows them under their label names.
  EXPECT_EQ(&family.Add({{"kernel", "mean_pooling"}, {"code", "OK"}}), &a);
  const auto values = Collected(registry);
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values.at({{"kernel", "mean_pooling"}, {"code", "OK"}}), 2.0);
  EXPECT_EQ(values.at({{"kernel", "mean_poolingO"}, {"code", "K"}}), 5.0);
  EXPECT_EQ(values.at({{"kernel", "flash_attention"}, {"code", "INTERNAL"}}), 1.0);
}

TEST(SeriesCacheTest, SeriesAddedBeforeAreFound) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter().Name("calls_total").Help("h").Register(registry);
  prometheus::Counter& exported = family.Add({{"device", "cpu"}});  // as ExportKnownSeries does
  SeriesCache<prometheus::Counter, 1> cache(family, {"device"});
  EXPECT_EQ(&cache.Get({"cpu"}), &exported);
}

TEST(SeriesCacheTest, HistogramBucketsGoToTheNewSeries) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildHistogram().Name("seconds").Help("h").Register(registry);
  SeriesCache<prometheus::Histogram, 1> cache(family, {"kernel"});
  cache.Get({"k"}, prometheus::Histogram::BucketBoundaries{1.0, 2.0}).Observe(1.5);
  const prometheus::ClientMetric metric =
      cache.Get({"k"}, prometheus::Histogram::BucketBoundaries{1.0, 2.0}).Collect();
  ASSERT_EQ(metric.histogram.bucket.size(), 3u);  // 1, 2, +Inf
  EXPECT_EQ(metric.histogram.bucket[0].cumulative_count, 0u);
  EXPECT_EQ(metric.histogram.bucket[1].cumulative_count, 1u);
  EXPECT_EQ(metric.histogram.sample_count, 1u);
}

TEST(SeriesCacheTest, ConcurrentCallersShareEachSeries) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildCounter().Name("calls_total").Help("h").Register(registry);
  SeriesCache<prometheus::Counter, 2> cache(family, {"kernel", "code"});
  constexpr int kThreads = 8;
  constexpr int kCalls = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < kCalls; ++i) {
        cache.Get({"k" + std::to_string(i % 4), t % 2 == 0 ? "OK" : "INTERNAL"}).Increment();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const auto values = Collected(registry);
  ASSERT_EQ(values.size(), 8u);
  double total = 0;
  for (const auto& [labels, value] : values) total += value;
  EXPECT_EQ(total, static_cast<double>(kThreads * kCalls));
  EXPECT_EQ(values.at({{"kernel", "k0"}, {"code", "OK"}}), kThreads / 2 * kCalls / 4.0);
}

}  // namespace
}  // namespace kernelserve::server
