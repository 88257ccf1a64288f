#include "core/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "core/store/json_depth.h"

namespace kernelserve {
namespace {

constexpr int kFileSchema = 1;

using Json = nlohmann::json;

absl::Status ErrnoError(const char* what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat("file store: ", what, " '", path, "': ", strerror(err)));
}

// Closes a descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  // Closes now; the error of close(2) matters for writes.
  int Close() {
    int rc = close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Holds an exclusive advisory lock on "<path>.lock" (shared by every process using the file).
absl::StatusOr<std::unique_ptr<ScopedFd>> LockFile(const std::string& path) {
  const std::string lock_path = path + ".lock";
  auto fd = std::make_unique<ScopedFd>(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd->get() < 0) return ErrnoError("cannot open lock file", lock_path, errno);
  while (flock(fd->get(), LOCK_EX) != 0) {
    if (errno != EINTR) return ErrnoError("cannot lock", lock_path, errno);
  }
  return fd;  // closing the descriptor releases the lock
}

absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Moves a file that does not parse out of the way; returns the new name.
std::string RenameAside(const std::string& path) {
  const std::string base = absl::StrCat(path, ".corrupt-", absl::ToUnixSeconds(absl::Now()));
  std::string target = base;
  for (int i = 1; access(target.c_str(), F_OK) == 0; ++i) target = absl::StrCat(base, "-", i);
  if (rename(path.c_str(), target.c_str()) != 0) return "";
  return target;
}

}  // namespace

std::string DefaultFileStorePath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/kernelserve/configs.json");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/')
    return absl::StrCat(home, "/.cache/kernelserve/configs.json");
  return "/tmp/kernelserve/configs.json";
}

bool FileStore::FileVersion::operator==(const FileVersion& other) const {
  return exists == other.exists && device == other.device && inode == other.inode &&
         size == other.size && mtime.tv_sec == other.mtime.tv_sec &&
         mtime.tv_nsec == other.mtime.tv_nsec;
}

FileStore::FileStore(std::string path) : path_(std::move(path)) {}

FileStore::~FileStore() {
  absl::MutexLock lock(&mu_);
  if (pinned_fd_ >= 0) close(pinned_fd_);
}

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(std::string path) {
  if (path.empty()) return absl::InvalidArgumentError("file store: expected a file path, got ''");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("file store: cannot create directory '",
                                              parent.string(), "': ", ec.message()));
    }
  }
  std::unique_ptr<FileStore> store(new FileStore(std::move(path)));
  absl::MutexLock lock(&store->mu_);
  absl::Status loaded = store->LoadLocked();
  if (absl::IsInvalidArgument(loaded)) {
    const std::string aside = RenameAside(store->path_);
    store->warnings_.push_back(absl::StrCat(
        loaded.message(), aside.empty() ? "; could not rename it aside" : "; renamed to " + aside,
        "; starting empty"));
    store->entries_.clear();
    store->loaded_ = store->StatFile();
  } else if (!loaded.ok()) {
    return loaded;
  }
  return store;
}

std::string FileStore::EntryKey(const std::string& fingerprint_hash, const std::string& cache_key) {
  return absl::StrCat(fingerprint_hash, "/", cache_key);
}

FileStore::FileVersion FileStore::VersionOf(const struct stat& st) {
  return {true, st.st_dev, st.st_ino, st.st_size, st.st_mtim};
}

FileStore::FileVersion FileStore::StatFile() const {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) return FileVersion();
  return VersionOf(st);
}

void FileStore::PinLocked(int fd, const struct stat& st) {
  if (pinned_fd_ >= 0) close(pinned_fd_);
  pinned_fd_ = fd;
  loaded_ = VersionOf(st);
}

absl::Status FileStore::LoadLocked() {
  ScopedFd fd(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno != ENOENT) return ErrnoError("cannot open", path_, errno);
    entries_.clear();
    if (pinned_fd_ >= 0) close(pinned_fd_);
    pinned_fd_ = -1;
    loaded_ = FileVersion();
    return absl::OkStatus();
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat", path_, errno);
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot read", path_, errno);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  KS_RETURN_IF_ERROR(CheckJsonDepth(text, absl::StrCat("file store '", path_, "'")));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("file store '", path_, "': not a JSON object"));
  }
  auto schema = j.find("schema");
  auto entries = j.find("entries");
  if (schema == j.end() || *schema != kFileSchema || entries == j.end() || !entries->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file store '", path_, "': expected {\"schema\":", kFileSchema, ",\"entries\":{..}}"));
  }
  entries_.clear();
  for (const auto& [key, value] : entries->items()) entries_[key] = value.dump();
  PinLocked(dup(fd.get()), st);
  return absl::OkStatus();
}

void FileStore::ReloadIfChangedLocked() {
  const FileVersion now = StatFile();
  if (now == loaded_) return;
  absl::Status status = LoadLocked();
  if (!status.ok()) {
    // Keep serving what was loaded before; do not retry until the file changes again.
    warnings_.push_back(
        absl::StrCat("reload failed, keeping ", entries_.size(), " entries: ", status.message()));
    loaded_ = now;
  }
}

absl::Status FileStore::WriteLocked() {
  Json entries = Json::object();
  for (const auto& [key, text] : entries_) {
    Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!value.is_discarded()) entries[key] = std::move(value);
  }
  const std::string content = Json{{"schema", kFileSchema}, {"entries", entries}}.dump(2) + "\n";

  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path_, ".tmp-", getpid(), "-", counter++);
  ScopedFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoError("cannot create", tmp, errno);
  absl::Status status = WriteAll(fd.get(), content, tmp);
  if (status.ok() && fsync(fd.get()) != 0) status = ErrnoError("cannot fsync", tmp, errno);
  if (fd.Close() != 0 && status.ok()) status = ErrnoError("cannot close", tmp, errno);
  if (status.ok() && rename(tmp.c_str(), path_.c_str()) != 0) {
    status = ErrnoError("cannot rename over", path_, errno);
  }
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  // Make the rename itself durable.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  ScopedFd dir_fd(open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) fsync(dir_fd.get());
  // Pin what was just written (the file lock keeps other writers out meanwhile).
  const int written = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (written >= 0 && fstat(written, &st) == 0) {
    PinLocked(written, st);
  } else {
    if (written >= 0) close(written);
    loaded_ = FileVersion();  // forces a reload on the next call
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredConfig> FileStore::Get(const std::string& fingerprint_hash,
                                            const std::string& cache_key) {
  absl::MutexLock lock(&mu_);
  ReloadIfChangedLocked();
  auto it = entries_.find(EntryKey(fingerprint_hash, cache_key));
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("file store: no config for '", cache_key, "' on device ", fingerprint_hash));
  }
  absl::StatusOr<StoredConfig> value = StoredConfig::FromJson(it->second);
  if (absl::IsNotFound(value.status())) {  // a config of another config schema: a miss
    return absl::NotFoundError(absl::StrCat("file store '", path_, "': entry '", it->first,
                                            "': ", value.status().message()));
  }
  if (!value.ok()) {
    return absl::DataLossError(absl::StrCat("file store '", path_, "': entry '", it->first,
                                            "' does not decode: ", value.status().message()));
  }
  return value;
}

absl::Status FileStore::Put(const StoredConfig& value) {
  absl::MutexLock lock(&mu_);
  KS_ASSIGN_OR_RETURN(std::unique_ptr<ScopedFd> file_lock, LockFile(path_));
  ReloadIfChangedLocked();
  const std::string key = EntryKey(value.fingerprint_hash, value.cache_key);
  std::optional<std::string> previous;
  if (auto it = entries_.find(key); it != entries_.end()) previous = it->second;
  entries_[key] = value.ToJson();
  absl::Status status = WriteLocked();
  if (!status.ok()) {
    if (previous.has_value()) {
      entries_[key] = *std::move(previous);
    } else {
      entries_.erase(key);
    }
  }
  return status;
}

absl::Status FileStore::Delete(const std::string& fingerprint_hash, const std::string& cache_key) {
  absl::MutexLock lock(&mu_);
  KS_ASSIGN_OR_RETURN(std::unique_ptr<ScopedFd> file_lock, LockFile(path_));
  ReloadIfChangedLocked();
  auto it = entries_.find(EntryKey(fingerprint_hash, cache_key));
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat("file store: no config for '", cache_key, "' on device ", fingerprint_hash));
  }
  std::pair<std::string, std::string> removed = *it;
  entries_.erase(it);
  absl::Status status = WriteLocked();
  if (!status.ok()) entries_.insert(std::move(removed));
  return status;
}

absl::StatusOr<std::vector<StoredConfig>> FileStore::List(std::string_view kernel_prefix) {
  absl::MutexLock lock(&mu_);
  ReloadIfChangedLocked();
  std::vector<StoredConfig> out;
  for (const auto& [key, text] : entries_) {
    absl::StatusOr<StoredConfig> value = StoredConfig::FromJson(text);
    if (value.ok() && value->kernel_id.starts_with(kernel_prefix)) {
      out.push_back(*std::move(value));
    }
  }
  return out;
}

std::vector<std::string> FileStore::warnings() const {
  absl::MutexLock lock(&mu_);
  return warnings_;
}

}  // namespace kernelserve
