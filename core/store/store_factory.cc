#include "core/store/store_factory.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/store/file_store.h"
#include "core/store/redis_store.h"

namespace kernelserve {

absl::StatusOr<std::unique_ptr<PersistentStore>> OpenStore(std::string_view spec) {
  if (spec == "memory") return std::unique_ptr<PersistentStore>();
  if (spec == "file") {
    KS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Open(DefaultFileStorePath()));
    return std::unique_ptr<PersistentStore>(std::move(store));
  }
  if (spec.starts_with("file:") && spec.size() > 5) {
    KS_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store,
                        FileStore::Open(std::string(spec.substr(5))));
    return std::unique_ptr<PersistentStore>(std::move(store));
  }
  if (spec.starts_with("redis://")) {
    KS_ASSIGN_OR_RETURN(RedisStoreOptions options, ParseRedisUrl(spec));
    KS_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> store, RedisStore::Connect(std::move(options)));
    return std::unique_ptr<PersistentStore>(std::move(store));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "store spec '", absl::string_view(spec.data(), spec.size()), "': expected one of ",
      absl::string_view(kStoreSpecForms.data(), kStoreSpecForms.size())));
}

}  // namespace kernelserve
