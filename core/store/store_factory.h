// OpenStore: builds the persistent tier from a one-line spec (a flag value).
#ifndef KERNELSERVE_CORE_STORE_STORE_FACTORY_H_
#define KERNELSERVE_CORE_STORE_STORE_FACTORY_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/store/persistent_store.h"

namespace kernelserve {

// The accepted specs, for help texts: "memory | file | file:PATH | redis://...".
inline constexpr std::string_view kStoreSpecForms =
    "memory, file, file:PATH or redis://[:password@]host[:port][/db]";

// Opens the store named by `spec`:
//   "memory"        -> OK holding nullptr: there is no persistent tier (the in-memory cache
//                      is the only one). Callers must check the pointer.
//   "file"          -> FileStore at DefaultFileStorePath().
//   "file:PATH"     -> FileStore at PATH.
//   "redis://..."   -> RedisStore (see ParseRedisUrl); succeeds while Redis is down.
// InvalidArgument for anything else, naming the accepted forms. The caller owns the store.
absl::StatusOr<std::unique_ptr<PersistentStore>> OpenStore(std::string_view spec);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_STORE_STORE_FACTORY_H_
