// store_fuzz: the decoders of the persistent config tiers, on any bytes a store could hand
// back: KernelConfig::FromJson, StoredConfig::FromJson, the FileStore's loading of its file,
// the decoding of Redis replies (any tree of hiredis reply objects) and ParseRedisUrl.
//
// Input: byte 0 picks the decoder (mod 5); see each function for the rest. A value that
// decodes must encode and decode again to the same value.
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/kernel_config.h"
#include "core/store/file_store.h"
#include "core/store/persistent_store.h"
#include "core/store/redis_store.h"
#include "tests/fuzz/byte_reader.h"

namespace kernelserve {
namespace {

using fuzz::ByteReader;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "store_fuzz: %s\n", what);
  std::abort();
}

// The rest of the input as a config's JSON.
void KernelConfigJson(ByteReader& in) {
  absl::StatusOr<KernelConfig> config = KernelConfig::FromJson(in.Rest());
  if (!config.ok()) return;
  absl::StatusOr<KernelConfig> again = KernelConfig::FromJson(config->ToJson());
  Check(again.ok() && *again == *config, "KernelConfig does not survive ToJson/FromJson");
}

// Decodes `json` as a stored config; one that decodes must survive a round trip (a time that
// is not finite has no JSON form and is left out of that check).
void StoredConfigJson(const std::string& json) {
  absl::StatusOr<StoredConfig> value = StoredConfig::FromJson(json);
  if (!value.ok() || !std::isfinite(value->measured_seconds)) return;
  const std::string text = value->ToJson();
  absl::StatusOr<StoredConfig> again = StoredConfig::FromJson(text);
  Check(again.ok() && again->ToJson() == text, "StoredConfig does not survive ToJson/FromJson");
}

// A fingerprint and a cache key (two strings), then the file's content: opened as a FileStore
// (a file that does not parse is renamed aside), then read with Get and List.
void FileStoreContent(ByteReader& in) {
  static const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                           ("kernelserve-store-fuzz-" + std::to_string(getpid()));
  const std::string fingerprint = in.String();
  const std::string key = in.String();
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "configs.json").string();
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    const std::string content = in.Rest();
    file.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  {
    absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(path);
    Check(store.ok(), "FileStore::Open fails on a readable file");
    (void)(*store)->Get(fingerprint, key);
    (void)(*store)->List("");
    (void)(*store)->List(key);
    (void)(*store)->warnings();
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// A hiredis reply tree that owns its strings and elements (the decoders only read it).
struct ReplyTree {
  redisReply reply = {};
  std::string text;
  std::vector<std::unique_ptr<ReplyTree>> children;
  std::vector<redisReply*> elements;
};

// A reply of any type (the six of hiredis and one it never makes), with up to 8 elements and
// strings of up to 64 KiB, nested at most `depth` deep.
std::unique_ptr<ReplyTree> ReadReply(ByteReader& in, int depth) {
  auto tree = std::make_unique<ReplyTree>();
  tree->reply.type = 1 + in.U8() % 7;  // REDIS_REPLY_STRING .. REDIS_REPLY_ERROR, then 7
  tree->reply.integer = in.I64();
  if (tree->reply.type == REDIS_REPLY_ARRAY && depth > 0) {
    for (int n = in.U8() % 9; n > 0; --n) {
      tree->children.push_back(ReadReply(in, depth - 1));
      tree->elements.push_back(&tree->children.back()->reply);
    }
  } else {
    tree->text = in.LongString();
  }
  tree->reply.str = tree->text.data();
  tree->reply.len = tree->text.size();
  tree->reply.element = tree->elements.data();
  tree->reply.elements = tree->elements.size();
  return tree;
}

// A key count and a kernel prefix, then a reply: decoded as a GET, a SCAN and an MGET reply.
void RedisReplies(ByteReader& in) {
  const size_t count = in.U8() % 9;
  const std::string prefix = in.String();
  const std::unique_ptr<ReplyTree> tree = ReadReply(in, 3);
  const redisReply& reply = tree->reply;
  (void)DecodeRedisGet(reply, "redis://fuzz", "key");
  std::string cursor;
  std::set<std::string> keys;
  (void)DecodeRedisScan(reply, "redis://fuzz", &cursor, &keys);
  std::vector<StoredConfig> values;
  (void)DecodeRedisMget(reply, "redis://fuzz", count, prefix, &values);
  (void)DecodeRedisMget(reply, "redis://fuzz", reply.elements, prefix, &values);
}

// The rest as a Redis URL; one that parses must give options Connect accepts (Connect does not
// connect).
void RedisUrl(ByteReader& in) {
  absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(in.Rest());
  if (!options.ok()) return;
  absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Connect(*options);
  Check(store.ok(), "ParseRedisUrl accepts options that Connect refuses");
  (void)(*store)->location();
}

}  // namespace
}  // namespace kernelserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kernelserve::fuzz::ByteReader in(data, size);
  switch (in.U8() % 5) {
    case 0:
      kernelserve::KernelConfigJson(in);
      break;
    case 1:
      kernelserve::StoredConfigJson(in.Rest());
      break;
    case 2:
      kernelserve::FileStoreContent(in);
      break;
    case 3:
      kernelserve::RedisReplies(in);
      break;
    case 4:
      kernelserve::RedisUrl(in);
      break;
  }
  return 0;
}
