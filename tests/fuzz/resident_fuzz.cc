// resident_fuzz: the server's resident tensors (server/resident.h) under any sequence of what
// callers may ask: creates (any name, dtype, shape, device, ttl), copies in and out at any
// offset the handlers would allow, deletes (own, another owner's, every one), expiry at any
// time, leases of any mix of tensors read and written, and calls holding tensors (CallRegions).
// Two callers and an admin; GPU 0 is host memory standing for a GPU (a fake GpuMemoryAccess).
//
// Checked after each step against a model kept here: the bytes and count the registry reports
// are those of the tensors it lists; the caps (in all, per owner, per GPU) are never passed; a
// tensor a call or lease holds is never deleted or expired; a caller never finds another's
// tensor; a create of a name the caller has gives that tensor or AlreadyExists; bytes copied in
// read back; a lease never holds a written tensor with another holder. Any disagreement aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "server/resident.h"
#include "tests/fuzz/byte_reader.h"

namespace kernelserve::server {
namespace {

constexpr int64_t kMaxBytes = 1 << 16;
constexpr int64_t kQuotaBytes = 40000;
constexpr int64_t kGpuRoom = 20000;
constexpr int kMaxTensors = 12;

void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "resident_fuzz: %s %s\n", what, detail.c_str());
  std::abort();
}

class FakeGpu final : public GpuMemoryAccess {
 public:
  absl::StatusOr<std::shared_ptr<void>> Open(std::string_view, int, uint64_t) override {
    return absl::UnimplementedError("");
  }
  absl::Status CopyToHost(void* host, const void* gpu, size_t bytes) override {
    std::memcpy(host, gpu, bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<void>> Pin(void*, size_t) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<std::shared_ptr<void>> Allocate(int device, uint64_t bytes) override {
    if (device != 0) return absl::InvalidArgumentError("no such GPU");
    auto* memory = new std::vector<char>(bytes, 0);
    return std::shared_ptr<void>(memory->data(), [memory](void*) { delete memory; });
  }
  absl::Status CopyFromHost(void* gpu, const void* host, size_t bytes) override {
    std::memcpy(gpu, host, bytes);
    return absl::OkStatus();
  }
};

Caller CallerOf(uint8_t which) {
  Caller caller;
  caller.identity = which % 3 == 0 ? "alice" : which % 3 == 1 ? "bob" : "ops";
  caller.role = which % 3 == 2 ? Role::kAdmin : Role::kCaller;
  return caller;
}

std::string NameOf(fuzz::ByteReader& in) {
  const uint8_t pick = in.U8();
  if (pick < 200) return std::string(1, static_cast<char>('a' + pick % 4));  // few names
  return in.String();  // anything: spaces, control bytes, empty, long
}

struct Run {
  FakeGpu gpu;
  ResidentTensors registry;
  absl::Time now = absl::Now();
  // Held by "calls" and leases, in the order taken.
  std::vector<std::unique_ptr<CallRegions>> calls;
  std::vector<std::unique_ptr<ResidentLease>> leases;
  // What each tensor (by owner/name) should hold: its bytes as copied in.
  std::map<std::string, std::string> model;

  static ResidentOptions Options() {
    ResidentOptions options;
    options.max_bytes = kMaxBytes;
    options.quota_bytes = kQuotaBytes;
    options.max_tensors = kMaxTensors;
    options.default_ttl = absl::Seconds(10);
    options.max_ttl = absl::Seconds(100);
    options.gpu_room = [](int device) { return device == 0 ? kGpuRoom : int64_t{0}; };
    return options;
  }
  Run() : registry(Options(), &gpu) {}

  static std::string Key(const ResidentTensor& t) { return t.owner() + "/" + t.name(); }

  void Create(fuzz::ByteReader& in) {
    const Caller caller = CallerOf(in.U8());
    ResidentCreate create;
    create.name = NameOf(in);
    create.spec.dtype = kAllDTypes[in.U8() % std::size(kAllDTypes)];
    const int rank = in.U8() % 4;
    for (int d = 0; d < rank; ++d) create.spec.shape.push_back(in.I64() % 70);
    const uint8_t device = in.U8();
    create.any_device = device % 4 == 3;
    create.device = create.any_device ? -1 : static_cast<int>(device % 3) - 1;  // -1, 0, 1
    create.ttl = absl::Seconds(in.I64() % 200);
    bool created = false;
    absl::StatusOr<std::shared_ptr<ResidentTensor>> tensor =
        registry.Create(caller, create, &created);
    if (!tensor.ok()) return;
    const std::string key = Key(**tensor);
    if ((*tensor)->owner() != caller.identity) Fail("created for another owner", key);
    if ((*tensor)->spec() != create.spec) Fail("an existing tensor of another spec was given", key);
    if (created) {
      if (model.contains(key)) Fail("created a name the caller has", key);
      if (std::string((*tensor)->data(), (*tensor)->byte_size()) !=
          std::string((*tensor)->byte_size(), '\0')) {
        Fail("a new tensor is not zeroed", key);
      }
      model[key] = std::string((*tensor)->byte_size(), '\0');
    } else if (!model.contains(key)) {
      Fail("an existing tensor the model lacks", key);
    }
  }

  // Finds one of the model's tensors from the input; null when there is none.
  std::shared_ptr<ResidentTensor> Pick(fuzz::ByteReader& in, const Caller& caller) {
    absl::StatusOr<std::shared_ptr<ResidentTensor>> found = registry.Find(caller, NameOf(in));
    if (!found.ok()) return nullptr;
    if ((*found)->owner() != caller.identity) Fail("found another owner's tensor");
    return *found;
  }

  void Copy(fuzz::ByteReader& in) {
    const Caller caller = CallerOf(in.U8());
    std::shared_ptr<ResidentTensor> tensor = Pick(in, caller);
    if (tensor == nullptr) return;
    const uint64_t size = tensor->byte_size();
    const uint64_t offset = static_cast<uint64_t>(in.I64()) % (size + 1);
    const uint64_t bytes = static_cast<uint64_t>(in.I64()) % (size - offset + 1);
    ResidentLease lease(&registry);
    const bool write = in.U8() % 2 == 0;
    lease.Add(tensor, write);
    if (!lease.Acquire(absl::Now())) return;  // held by a writer (or readers, to write)
    std::string& bytes_now = model[Key(*tensor)];
    if (write) {
      std::string data(bytes, '\0');
      for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(in.U8());
      if (!registry.CopyIn(*tensor, offset, data.data(), bytes).ok()) Fail("CopyIn failed");
      bytes_now.replace(offset, bytes, data);
    } else {
      std::string out(bytes, '\0');
      if (!registry.CopyOut(*tensor, offset, out.data(), bytes).ok()) Fail("CopyOut failed");
      if (out != bytes_now.substr(offset, bytes)) Fail("read back other bytes", Key(*tensor));
    }
  }

  void Hold(fuzz::ByteReader& in) {
    const Caller caller = CallerOf(in.U8());
    const uint8_t how = in.U8();
    if (how % 3 == 0 && !calls.empty()) {  // a call ends
      calls.erase(calls.begin() + how % calls.size());
      return;
    }
    if (how % 3 == 1 && !leases.empty()) {  // a lease ends
      leases.erase(leases.begin() + how % leases.size());
      return;
    }
    auto call = std::make_unique<CallRegions>();
    auto lease = std::make_unique<ResidentLease>(&registry);
    const int n = 1 + in.U8() % 3;
    for (int i = 0; i < n; ++i) {
      std::shared_ptr<ResidentTensor> tensor = Pick(in, caller);
      if (tensor == nullptr) continue;
      call->Add(tensor->Span());
      lease->Add(tensor, in.U8() % 2 == 0);
    }
    if (lease->Acquire(absl::Now())) leases.push_back(std::move(lease));
    calls.push_back(std::move(call));
  }

  void Delete(fuzz::ByteReader& in) {
    const Caller caller = CallerOf(in.U8());
    const uint8_t whose = in.U8();
    const std::string owner = whose % 4 == 0 ? "" : whose % 4 == 1 ? "*" : CallerOf(whose).identity;
    const std::string name = in.U8() % 2 == 0 ? "" : NameOf(in);
    (void)registry.Delete(caller, owner, name);
  }

  // The model's view of what the registry holds now: held tensors are all still there, the
  // totals are the listed tensors', the caps hold.
  void Check() {
    Caller admin = CallerOf(2);
    absl::StatusOr<std::vector<std::shared_ptr<const ResidentTensor>>> listed =
        registry.List(admin, kEveryOwner, "");
    if (!listed.ok()) Fail("an admin cannot list");
    int64_t bytes = 0;
    std::map<std::string, int64_t> owners;
    int64_t on_gpu = 0;
    std::map<std::string, bool> present;
    for (const auto& tensor : *listed) {
      bytes += static_cast<int64_t>(tensor->byte_size());
      owners[tensor->owner()] += static_cast<int64_t>(tensor->byte_size());
      if (tensor->device() == 0) on_gpu += static_cast<int64_t>(tensor->byte_size());
      present[Key(*tensor)] = true;
      if (tensor->calls() < 0) Fail("a negative count of calls");
    }
    if (bytes != registry.bytes() || static_cast<int>(listed->size()) != registry.count()) {
      Fail("the totals are not the listed tensors'");
    }
    if (bytes > kMaxBytes || on_gpu > kGpuRoom || registry.count() > kMaxTensors) {
      Fail("a cap passed");
    }
    for (const auto& [owner, held] : owners) {
      if (held > kQuotaBytes) Fail("a quota passed", owner);
    }
    for (auto it = model.begin(); it != model.end();) {
      it = present.contains(it->first) ? std::next(it) : model.erase(it);
    }
  }
};

}  // namespace
}  // namespace kernelserve::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kernelserve::server::Run;
  kernelserve::fuzz::ByteReader in(data, size);
  Run run;
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    // Tensors held by a call or a lease must survive whatever comes.
    std::vector<std::string> held;
    const auto listed = run.registry.List(kernelserve::server::CallerOf(2), "*", "");
    if (!listed.ok()) kernelserve::server::Fail("an admin cannot list");
    for (const auto& tensor : *listed) {
      if (tensor->calls() > 0) held.push_back(Run::Key(*tensor));
    }
    switch (in.U8() % 6) {
      case 0:
      case 1:
        run.Create(in);
        break;
      case 2:
        run.Copy(in);
        break;
      case 3:
        run.Hold(in);
        break;
      case 4:
        run.Delete(in);
        break;
      case 5:
        run.now += absl::Seconds(in.I64() % 300);
        run.registry.Expire(run.now);
        break;
    }
    run.Check();
    for (const std::string& key : held) {
      if (!run.model.contains(key)) kernelserve::server::Fail("a held tensor went", key);
    }
  }
  return 0;
}
