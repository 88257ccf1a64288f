// FileStore: the persistent tier kept in one local JSON file.
#ifndef KERNELSERVE_CORE_STORE_FILE_STORE_H_
#define KERNELSERVE_CORE_STORE_FILE_STORE_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/store/persistent_store.h"

namespace kernelserve {

// $XDG_CACHE_HOME/kernelserve/configs.json, else $HOME/.cache/kernelserve/configs.json, else
// /tmp/kernelserve/configs.json.
std::string DefaultFileStorePath();

// All entries live in one file: {"schema":1,"entries":{"<fingerprint>/<cache_key>":
// <StoredConfig JSON>,...}}. Every Put/Delete rewrites the whole file atomically (temporary file
// in the same directory, fsync, rename), under an advisory lock on "<path>.lock" so that
// processes sharing the file do not lose each other's writes. Reads notice when the file changed
// on disk (a stat per call) and reload it.
//
// Thread safety: thread-safe.
class FileStore : public PersistentStore {
 public:
  // Opens the store at `path`, creating its parent directories. A missing file is an empty store
  // (the file is created by the first write). A file that does not parse is not fatal: it is
  // renamed to "<path>.corrupt-<unix seconds>", a line is added to warnings(), and the store
  // starts empty. Error when the directory cannot be created.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(std::string path);

  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  std::string_view name() const override { return "file"; }
  ConfigSource source() const override { return ConfigSource::kFile; }
  std::string location() const override { return path_; }

  absl::StatusOr<StoredConfig> Get(const std::string& fingerprint_hash,
                                   const std::string& cache_key) override;
  // Internal error when the file cannot be written; the entry is then not stored.
  absl::Status Put(const StoredConfig& value) override;
  absl::Status Delete(const std::string& fingerprint_hash, const std::string& cache_key) override;
  // Sorted by "<fingerprint>/<cache_key>".
  absl::StatusOr<std::vector<StoredConfig>> List(std::string_view kernel_prefix) override;

  // What went wrong while loading the file (corrupt content, failed reloads), oldest first.
  std::vector<std::string> warnings() const;

 private:
  // Identity of one version of the file. Writers rename a new file over the old one, so a new
  // version has a new inode; the inode of the version last seen is kept open (pinned_fd_) so
  // that its number cannot be reused by a later version.
  struct FileVersion {
    bool exists = false;
    dev_t device = 0;
    ino_t inode = 0;
    off_t size = 0;
    timespec mtime = {0, 0};
    bool operator==(const FileVersion& other) const;
  };

  explicit FileStore(std::string path);

  static std::string EntryKey(const std::string& fingerprint_hash, const std::string& cache_key);
  static FileVersion VersionOf(const struct stat& st);
  FileVersion StatFile() const;
  // Records `fd` (owned) as the version now in memory.
  void PinLocked(int fd, const struct stat& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parses the file into entries_. InvalidArgument when it does not parse.
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reloads when the file on disk is not the version last loaded or written.
  void ReloadIfChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes entries_ to the file atomically.
  absl::Status WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  // Entry key -> the entry's JSON text, kept even when it does not decode.
  std::map<std::string, std::string> entries_ ABSL_GUARDED_BY(mu_);
  FileVersion loaded_ ABSL_GUARDED_BY(mu_);
  int pinned_fd_ ABSL_GUARDED_BY(mu_) = -1;  // the loaded version, open read-only
  std::vector<std::string> warnings_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_STORE_FILE_STORE_H_
