#include "core/store/redis_store.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/store/json_depth.h"
#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/stored_config.h"

namespace kernelserve {
namespace {

using ::kernelserve::testing::RedisServerProcess;

using ::kernelserve::testing::SampleStoredConfig;

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status started = redis_.Start();
    if (absl::IsNotFound(started)) GTEST_SKIP() << started.message();
    ASSERT_TRUE(started.ok()) << started;
  }

  RedisStoreOptions Options() const {
    RedisStoreOptions options;
    options.port = redis_.port();
    return options;
  }

  std::unique_ptr<RedisStore> ConnectOrDie(RedisStoreOptions options) {
    absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Connect(std::move(options));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  RedisServerProcess redis_;
  std::mt19937 rng_{2024};
};

TEST_F(RedisStoreTest, PutGetDeleteRoundTrip) {
  auto store = ConnectOrDie(Options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->name(), "redis");
  EXPECT_EQ(store->source(), ConfigSource::kRedis);
  EXPECT_EQ(store->location(), absl::StrFormat("redis://127.0.0.1:%d/0", redis_.port()));
  ASSERT_TRUE(store->Ping().ok());

  const StoredConfig value = SampleStoredConfig(rng_, "flash_attention@v1", "0123456789abcdef");
  EXPECT_EQ(store->Get(value.fingerprint_hash, value.cache_key).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Put(value).ok());
  absl::StatusOr<StoredConfig> got = store->Get(value.fingerprint_hash, value.cache_key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ToJson(), value.ToJson());

  // Stored under the documented key, as StoredConfig JSON.
  const std::string key = "kernelserve:v1:cfg:0123456789abcdef:" + value.cache_key;
  EXPECT_EQ(store->ConfigKey(value.fingerprint_hash, value.cache_key), key);
  absl::StatusOr<std::string> raw = redis_.Command({"GET", key});
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, value.ToJson());

  ASSERT_TRUE(store->Delete(value.fingerprint_hash, value.cache_key).ok());
  EXPECT_EQ(store->Get(value.fingerprint_hash, value.cache_key).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Delete(value.fingerprint_hash, value.cache_key).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RedisStoreTest, ListFiltersByKernelPrefix) {
  auto store = ConnectOrDie(Options());
  ASSERT_NE(store, nullptr);
  std::vector<StoredConfig> pooling;
  for (int i = 0; i < 700; ++i) {  // more than one SCAN batch
    pooling.push_back(SampleStoredConfig(rng_, "mean_pooling@v1",
                                         i % 2 ? "1111111111111111" : "2222222222222222"));
    ASSERT_TRUE(store->Put(pooling.back()).ok());
  }
  ASSERT_TRUE(store->Put(SampleStoredConfig(rng_, "flash_attention@v1", "1111111111111111")).ok());
  // Keys outside the prefix and values that do not decode are left out.
  ASSERT_TRUE(redis_.Command({"SET", "unrelated:key", "x"}).ok());
  ASSERT_TRUE(
      redis_.Command({"SET", "kernelserve:v1:cfg:3333333333333333:mean_pooling@v1:0", "{not json"})
          .ok());

  absl::StatusOr<std::vector<StoredConfig>> all = store->List("");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), pooling.size() + 1);
  absl::StatusOr<std::vector<StoredConfig>> mean = store->List("mean");
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(mean->size(), pooling.size());
  for (const StoredConfig& value : *mean) EXPECT_EQ(value.kernel_id, "mean_pooling@v1");
  EXPECT_EQ(store->List("flash_attention@v1")->size(), 1u);
  EXPECT_EQ(store->List("flash_attention@v2")->size(), 0u);
}

TEST_F(RedisStoreTest, ValueThatDoesNotDecodeIsDataLoss) {
  auto store = ConnectOrDie(Options());
  ASSERT_NE(store, nullptr);
  const std::string fp = "aaaaaaaaaaaaaaaa";
  ASSERT_TRUE(redis_.Command({"SET", store->ConfigKey(fp, "k@v1:1"), "{\"schema\":7}"}).ok());
  EXPECT_EQ(store->Get(fp, "k@v1:1").status().code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(redis_.Command({"HSET", store->ConfigKey(fp, "k@v1:2"), "f", "v"}).ok());
  EXPECT_EQ(store->Get(fp, "k@v1:2").status().code(), absl::StatusCode::kDataLoss);
  // The connection stays usable.
  const StoredConfig value = SampleStoredConfig(rng_, "k@v1", fp);
  ASSERT_TRUE(store->Put(value).ok());
  EXPECT_TRUE(store->Get(fp, value.cache_key).ok());
}

TEST_F(RedisStoreTest, ValueNested64LevelsIsReadAnd65IsDataLoss) {
  auto store = ConnectOrDie(Options());
  ASSERT_NE(store, nullptr);
  const StoredConfig value = SampleStoredConfig(rng_, "k@v1", "cccccccccccccccc");
  const std::string json = value.ToJson();
  // The value's object is level 1; a field the decoder ignores holds the other levels.
  const auto nested = [&json](int levels) {
    return R"({"extra":)" + std::string(levels - 1, '[') + std::string(levels - 1, ']') + "," +
           json.substr(1);
  };
  const std::string key = store->ConfigKey(value.fingerprint_hash, value.cache_key);
  ASSERT_TRUE(redis_.Command({"SET", key, nested(kMaxJsonDepth)}).ok());
  absl::StatusOr<StoredConfig> got = store->Get(value.fingerprint_hash, value.cache_key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ToJson(), json);
  ASSERT_TRUE(redis_.Command({"SET", key, nested(kMaxJsonDepth + 1)}).ok());
  got = store->Get(value.fingerprint_hash, value.cache_key);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("JSON nested more than 64 levels deep"),
            std::string_view::npos)
      << got.status();
}

TEST_F(RedisStoreTest, SelectsTheConfiguredDatabase) {
  RedisStoreOptions options = Options();
  options.db = 3;
  auto db3 = ConnectOrDie(options);
  auto db0 = ConnectOrDie(Options());
  ASSERT_NE(db3, nullptr);
  ASSERT_NE(db0, nullptr);
  EXPECT_EQ(db3->location(), absl::StrFormat("redis://127.0.0.1:%d/3", redis_.port()));
  const StoredConfig value = SampleStoredConfig(rng_, "mean_pooling@v1", "bbbbbbbbbbbbbbbb");
  ASSERT_TRUE(db3->Put(value).ok());
  EXPECT_TRUE(db3->Get(value.fingerprint_hash, value.cache_key).ok());
  EXPECT_EQ(db0->Get(value.fingerprint_hash, value.cache_key).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RedisStoreTest, SendsAuth) {
  ASSERT_TRUE(redis_.Command({"CONFIG", "SET", "requirepass", "s3cret"}).ok());
  auto anonymous = ConnectOrDie(Options());
  ASSERT_NE(anonymous, nullptr);
  EXPECT_EQ(anonymous->Ping().code(), absl::StatusCode::kPermissionDenied);
  RedisStoreOptions wrong = Options();
  wrong.password = "guess";
  auto guesser = ConnectOrDie(wrong);
  ASSERT_NE(guesser, nullptr);
  EXPECT_EQ(guesser->Ping().code(), absl::StatusCode::kPermissionDenied);
  RedisStoreOptions right = Options();
  right.password = "s3cret";
  auto store = ConnectOrDie(right);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Ping().ok());
  const StoredConfig value = SampleStoredConfig(rng_, "mean_pooling@v1", "cccccccccccccccc");
  ASSERT_TRUE(store->Put(value).ok());
  EXPECT_TRUE(store->Get(value.fingerprint_hash, value.cache_key).ok());
}

// Runs `call` and checks that it answered Unavailable in under a second.
template <typename Call>
void ExpectQuickUnavailable(Call call, const char* what) {
  const absl::Time start = absl::Now();
  const absl::Status status = call();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << what << ": " << status;
  EXPECT_LT(took, absl::Seconds(1)) << what;
}

TEST_F(RedisStoreTest, StoppedRedisIsUnavailableQuicklyAndRecovers) {
  RedisStoreOptions options = Options();
  options.reconnect_backoff = absl::Seconds(2);
  auto store = ConnectOrDie(options);
  ASSERT_NE(store, nullptr);
  const StoredConfig value = SampleStoredConfig(rng_, "mean_pooling@v1", "dddddddddddddddd");
  ASSERT_TRUE(store->Put(value).ok());

  ASSERT_TRUE(redis_.Stop().ok());
  const std::string fp = value.fingerprint_hash;
  const std::string key = value.cache_key;
  ExpectQuickUnavailable([&] { return store->Get(fp, key).status(); }, "Get after stop");
  const absl::Time failed_at = absl::Now();
  for (int i = 0; i < 5; ++i) {
    ExpectQuickUnavailable([&] { return store->Get(fp, key).status(); }, "Get");
    ExpectQuickUnavailable([&] { return store->Put(value); }, "Put");
  }
  ExpectQuickUnavailable([&] { return store->Delete(fp, key); }, "Delete");
  ExpectQuickUnavailable([&] { return store->List("").status(); }, "List");
  ExpectQuickUnavailable([&] { return store->TryAcquireLease(fp, key, absl::Seconds(5)).status(); },
                         "TryAcquireLease");

  ASSERT_TRUE(redis_.Restart().ok());
  // Inside the backoff the store does not even try.
  if (absl::Now() - failed_at < absl::Milliseconds(1500)) {
    ExpectQuickUnavailable([&] { return store->Get(fp, key).status(); }, "Get inside backoff");
  }
  absl::SleepFor(options.reconnect_backoff + absl::Milliseconds(100));
  // The restarted server is empty (nothing persisted), and usable again.
  EXPECT_EQ(store->Get(fp, key).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Put(value).ok());
  EXPECT_TRUE(store->Get(fp, key).ok());
}

TEST_F(RedisStoreTest, HungRedisTimesOut) {
  RedisStoreOptions options = Options();
  options.reconnect_backoff = absl::Milliseconds(300);
  auto store = ConnectOrDie(options);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Ping().ok());
  ASSERT_TRUE(redis_.Pause().ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ(store->Ping().code(), absl::StatusCode::kUnavailable);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, options.command_timeout - absl::Milliseconds(20));
  EXPECT_LT(took, absl::Seconds(1));
  ASSERT_TRUE(redis_.Resume().ok());
  absl::SleepFor(options.reconnect_backoff + absl::Milliseconds(100));
  EXPECT_TRUE(store->Ping().ok());
}

TEST_F(RedisStoreTest, ConnectSucceedsWhileRedisIsDown) {
  RedisStoreOptions options = Options();
  ASSERT_TRUE(redis_.Stop().ok());
  auto store = ConnectOrDie(options);
  ASSERT_NE(store, nullptr);
  ExpectQuickUnavailable([&] { return store->Get("eeeeeeeeeeeeeeee", "k@v1:1").status(); }, "Get");
}

TEST_F(RedisStoreTest, LeaseIsExclusiveUntilReleasedOrExpired) {
  auto a = ConnectOrDie(Options());
  auto b = ConnectOrDie(Options());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(a->options().owner_id, b->options().owner_id);
  const std::string fp = "ffffffffffffffff";
  const std::string key = "mean_pooling@v1:0011223344556677";

  ASSERT_EQ(a->TryAcquireLease(fp, key, absl::Seconds(30)).value(), true);
  EXPECT_EQ(redis_.Command({"GET", "kernelserve:v1:lease:" + fp + ":" + key}).value(),
            a->options().owner_id);
  EXPECT_EQ(a->TryAcquireLease(fp, key, absl::Seconds(30)).value(), false);
  EXPECT_EQ(b->TryAcquireLease(fp, key, absl::Seconds(30)).value(), false);
  // Another key is independent.
  EXPECT_EQ(b->TryAcquireLease(fp, key + "x", absl::Seconds(30)).value(), true);
  // Releasing someone else's lease leaves it alone.
  ASSERT_TRUE(b->ReleaseLease(fp, key).ok());
  EXPECT_EQ(b->TryAcquireLease(fp, key, absl::Seconds(30)).value(), false);
  ASSERT_TRUE(a->ReleaseLease(fp, key).ok());
  EXPECT_EQ(b->TryAcquireLease(fp, key, absl::Seconds(30)).value(), true);
  ASSERT_TRUE(b->ReleaseLease(fp, key).ok());

  // Expiry frees a lease whose holder never releases it.
  ASSERT_EQ(a->TryAcquireLease(fp, key, absl::Milliseconds(200)).value(), true);
  EXPECT_EQ(b->TryAcquireLease(fp, key, absl::Seconds(30)).value(), false);
  absl::SleepFor(absl::Milliseconds(350));
  EXPECT_EQ(b->TryAcquireLease(fp, key, absl::Seconds(30)).value(), true);

  EXPECT_EQ(a->TryAcquireLease(fp, key, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RedisStoreTest, ConcurrentUse) {
  auto store = ConnectOrDie(Options());
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  std::vector<std::vector<StoredConfig>> values(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      values[t].push_back(SampleStoredConfig(rng_, "flash_attention@v1", "abababababababab"));
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, &values, t] {
      for (const StoredConfig& value : values[t]) {
        EXPECT_TRUE(store->Put(value).ok());
        absl::StatusOr<StoredConfig> got = store->Get(value.fingerprint_hash, value.cache_key);
        EXPECT_TRUE(got.ok() && got->ToJson() == value.ToJson());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(store->List("flash")->size(), static_cast<size_t>(kThreads * kPerThread));
}

TEST(RedisStoreOptionsTest, ConnectValidatesOptions) {
  const auto code = [](auto mutate) {
    RedisStoreOptions options;
    mutate(options);
    return RedisStore::Connect(options).status().code();
  };
  EXPECT_EQ(code([](RedisStoreOptions&) {}), absl::StatusCode::kOk);
  EXPECT_EQ(code([](RedisStoreOptions& o) { o.port = 0; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](RedisStoreOptions& o) { o.port = 70000; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](RedisStoreOptions& o) { o.db = -1; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](RedisStoreOptions& o) { o.host = ""; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](RedisStoreOptions& o) { o.command_timeout = absl::ZeroDuration(); }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code([](RedisStoreOptions& o) { o.key_prefix = ""; }),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseRedisUrlTest, AcceptsTheDocumentedForms) {
  absl::StatusOr<RedisStoreOptions> full = ParseRedisUrl("redis://:pw@cache.internal:6380/2");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->host, "cache.internal");
  EXPECT_EQ(full->port, 6380);
  EXPECT_EQ(full->db, 2);
  EXPECT_EQ(full->password, "pw");

  absl::StatusOr<RedisStoreOptions> plain = ParseRedisUrl("redis://10.0.0.5:7000/0");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->host, "10.0.0.5");
  EXPECT_EQ(plain->port, 7000);
  EXPECT_EQ(plain->db, 0);
  EXPECT_EQ(plain->password, "");

  absl::StatusOr<RedisStoreOptions> bare = ParseRedisUrl("redis://localhost");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->port, 6379);
  EXPECT_EQ(bare->db, 0);

  absl::StatusOr<RedisStoreOptions> v6 = ParseRedisUrl("redis://[::1]:6390/1");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 6390);
  EXPECT_EQ(v6->db, 1);
}

TEST(ParseRedisUrlTest, RejectsJunk) {
  for (const char* url :
       {"", "redis:/host:1/0", "http://host:6379/0", "redis://", "redis://:6379/0",
        "redis://host:port/0", "redis://host:0/0", "redis://host:65536/0", "redis://host:6379/x",
        "redis://host:6379/-1", "redis://host:6379/0?x=1", "redis://user:pw@host:6379/0",
        "redis://host:", "redis://[::1/0", "redis://::1:6379/0"}) {
    EXPECT_EQ(ParseRedisUrl(url).status().code(), absl::StatusCode::kInvalidArgument) << url;
  }
  // The password is not echoed in the error.
  absl::Status status = ParseRedisUrl("redis://:hunter2@host:bad/0").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(status.message()).find("hunter2"), std::string::npos) << status;
}

}  // namespace
}  // namespace kernelserve
