// What the service's handlers share, in three parts by who uses them: AccessDeps (the Admit
// step: who calls and at what rate), CallDeps (the steps that plan, take inputs, dispatch and
// run a kernel call) and ServerInfo (what the server says of itself). A step takes the smallest
// part it uses, or the single pointers; a handler holds the whole ServiceDeps, which converts to
// each part.
#ifndef KERNELSERVE_SERVER_SERVICE_DEPS_H_
#define KERNELSERVE_SERVER_SERVICE_DEPS_H_

#include <atomic>
#include <string>

#include "absl/time/time.h"
#include "core/executor.h"
#include "core/host_buffer.h"
#include "server/auth.h"
#include "server/budget.h"
#include "server/identity.h"
#include "server/metrics.h"
#include "server/model_stats.h"
#include "server/options.h"
#include "server/resident.h"
#include "server/shared_memory.h"
#include "server/tenants.h"
#include "server/worker_pool.h"

namespace kernelserve::server {

// Who may call, and how often. The pointers are borrowed from the Server, which outlives the
// services. A value type.
struct AccessDeps {
  // Who calls (identities and roles); nullptr = every caller is the anonymous admin.
  const Authenticator* auth = nullptr;
  // Per-identity quotas and metrics; nullptr = none.
  Tenants* tenants = nullptr;
  // The process on the other end of a call, from its peer string (ServerContextBase::peer());
  // nullptr = unknown.
  const PeerLookup* peers = nullptr;
};

// What a kernel call is planned, fed, queued and run with. The pointers are borrowed from the
// Server, which outlives the services. A value type.
struct CallDeps {
  const Executor* executor = nullptr;      // REQUIRED
  WorkerPool* pool = nullptr;              // REQUIRED
  Metrics* metrics = nullptr;              // REQUIRED
  InflightBudget* budget = nullptr;        // REQUIRED
  const ServerOptions* options = nullptr;  // REQUIRED
  // Where the large tensor bytes of Execute and ExecuteStream requests are parsed into (the
  // CUDA platform's pool of page-locked memory when serving GPUs); nullptr = the heap.
  HostAllocator* host_allocator = nullptr;
  // The inference statistics of ModelStatistics (RecordInference); nullptr = not kept.
  ModelStats* stats = nullptr;
  // The shared-memory regions clients registered; nullptr = none can be.
  SharedMemoryRegistry* shared_memory = nullptr;
  // The resident tensors clients created; nullptr = none can be.
  ResidentTensors* resident = nullptr;
};

// What the server reports of itself (GetServerInfo, ServerReady, ModelReady). A value type.
struct ServerInfo {
  std::string store_location;          // "memory (none)" without a store
  bool built_with_cuda = false;        // this build has the CUDA platform
  std::string cudnn_version = "none";  // LoadedCudnnVersion()
  // True once the server drains (ServerReady answers false); nullptr = never.
  const std::atomic<bool>* draining = nullptr;
  absl::Time started;  // when the server started (its resident tensors live since)
};

// Everything a service's handlers use: each part's fields are the handler's own (deps_.executor),
// and the whole binds to a step's `const CallDeps&` or `const AccessDeps&`. A value type.
struct ServiceDeps : AccessDeps, CallDeps, ServerInfo {};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_SERVICE_DEPS_H_
