#include "client/cli/auto_shm.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/status_macros.h"

namespace kernelserve::cli {
namespace {

constexpr uint64_t kAlign = 256;  // every tensor's offset, past what the server needs (16)

uint64_t Aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// "127.0.0.1" and the rest of 127.0.0.0/8, written as a dotted quad.
bool IsLoopbackV4(absl::string_view host) {
  if (!absl::StartsWith(host, "127.")) return false;
  return std::all_of(host.begin(), host.end(),
                     [](char c) { return c == '.' || absl::ascii_isdigit(c); });
}

}  // namespace

absl::StatusOr<SharedMemoryMode> SharedMemoryModeFromArgs(const Args& args, bool cuda_allowed) {
  const std::string kind = args.Get("shared-memory", "auto");
  if (kind == "auto") return SharedMemoryMode::kAuto;
  if (kind == "none" || kind == "off") return SharedMemoryMode::kNone;
  if (kind == "system") return SharedMemoryMode::kSystem;
  if (kind == "cuda" && cuda_allowed) return SharedMemoryMode::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("--shared-memory=", kind,
                                                 ": expected auto, none, ",
                                                 cuda_allowed ? "system or cuda" : "or system"));
}

bool IsLocalTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) {
    return true;
  }
  for (absl::string_view scheme : {"dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) {
      target.remove_prefix(scheme.size());
      break;
    }
  }
  if (absl::StartsWith(target, "//")) {  // "dns:///host:port", "dns://resolver/host:port"
    const size_t slash = target.find('/', 2);
    if (slash == absl::string_view::npos) return false;
    target.remove_prefix(slash + 1);
  }
  absl::string_view host = target;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    host = host.substr(0, close + 1);
  } else if (const size_t colon = host.find(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "[::1]" || IsLoopbackV4(host);
}

uint64_t InlineInputBytes(const v1::ExecuteRequest& request) {
  uint64_t bytes = 0;
  for (const auto& [name, tensor] : request.inputs()) {
    if (!tensor.has_ref()) bytes += tensor.data().size();
  }
  return bytes;
}

bool AutoWantsSharedMemory(const Client& client, absl::string_view target,
                           const v1::ExecuteRequest& request) {
  if (!IsLocalTarget(target) || InlineInputBytes(request) < kAutoSharedMemoryMinBytes) {
    return false;
  }
  absl::StatusOr<v1::ServerInfo> info = client.ServerInfo();
  if (!info.ok()) return false;  // the call itself will say what is wrong
  return std::find(info->shared_memory().begin(), info->shared_memory().end(), "system") !=
         info->shared_memory().end();
}

absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> MoveInputsIntoSharedMemory(
    const Client& client, const std::string& name, v1::ExecuteRequest* request) {
  uint64_t size = 0;
  for (const auto& [input, tensor] : request->inputs()) {
    if (!tensor.has_ref()) size += Aligned(tensor.data().size());
  }
  KS_ASSIGN_OR_RETURN(std::unique_ptr<SharedMemoryRegion> region,
                      SharedMemoryRegion::CreateSystem(client, name, std::max<uint64_t>(size, 1)));
  uint64_t offset = 0;
  for (auto& [input, tensor] : *request->mutable_inputs()) {
    if (tensor.has_ref()) continue;  // a resident tensor's name: it stays where it is
    const uint64_t bytes = tensor.data().size();
    std::memcpy(region->data() + offset, tensor.data().data(), bytes);
    tensor.clear_data();
    v1::TensorRef* ref = tensor.mutable_ref();
    ref->set_region(name);
    ref->set_offset(offset);
    ref->set_byte_size(bytes);
    offset += Aligned(bytes);
  }
  return region;
}

void NoteSharedMemoryFallback(const absl::Status& refusal, std::ostream& err) {
  std::string why = absl::StrCat(absl::StatusCodeToString(refusal.code()), ": ", refusal.message());
  absl::StrReplaceAll({{"\n", " "}}, &why);
  err << "kernelserve: note: the server refused a shared-memory region (" << why
      << "); sending the tensors in the message instead (--shared-memory=none skips trying)\n";
}

}  // namespace kernelserve::cli
