// Server: the kernelserve gRPC server assembled from its options: config store, executor,
// device workers, service, health, reflection, metrics, and the drain on shutdown.
#ifndef KERNELSERVE_SERVER_SERVER_H_
#define KERNELSERVE_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "core/config_tiers.h"
#include "core/executor.h"
#include "core/host_pool.h"
#include "core/registry.h"
#include "server/auth.h"
#include "server/budget.h"
#include "server/kserve_service.h"
#include "server/listener.h"
#include "server/metrics.h"
#include "server/model_stats.h"
#include "server/options.h"
#include "server/service.h"
#include "server/tenants.h"
#include "server/worker_pool.h"

namespace kernelserve::server {

// Thread safety: Start and Shutdown from one thread; the server itself serves from many.
class Server {
 public:
  // Raises the open files limit, opens the store, detects devices, starts the workers, the
  // metrics endpoint and the gRPC server. InvalidArgument for bad options (naming the flag);
  // Unavailable when an address cannot be bound; NotFound/PermissionDenied for unreadable token or
  // TLS files.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  // The same, serving the kernels `extra_kernels` make besides the built-in ones (a binary of
  // its own kernels; the tests' toy kernel). AlreadyExists for a name taken.
  static absl::StatusOr<std::unique_ptr<Server>> Start(
      const ServerOptions& options,
      const std::vector<std::function<std::unique_ptr<Kernel>()>>& extra_kernels);
  // Shutdown() when not done yet.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Health goes NOT_SERVING, new calls are refused, accepted calls get the grace period to
  // finish (then are cancelled), the workers drain, the store is flushed. Idempotent.
  // Returns the store's flush status.
  absl::Status Shutdown();

  // "kernelserve-server: listening on 127.0.0.1:50051, metrics on ..., devices cpu, store ...,
  // fds 1048576"
  std::string StartupLine() const;
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  explicit Server(const ServerOptions& options);
  absl::Status Init(const std::vector<std::function<std::unique_ptr<Kernel>()>>& extra_kernels);
  absl::Status InitAuth();  // the authenticator and the per-identity state
  // Binds --listen (listener_, port_) after CheckUnixSocketFree; `credentials` are TLS's when
  // --tls-cert is set.
  absl::Status Listen(std::shared_ptr<grpc::ServerCredentials> credentials);
  absl::Status StartGrpc();
  void SampleDevices();  // device memory, the pinned pool and resident tensors, into the metrics
  // The resident tensors' registry, from the options (--max-resident-bytes...).
  std::unique_ptr<ResidentTensors> MakeResidentTensors();
  // The label values of the metrics series exported at startup.
  KnownSeries KnownLabels() const;
  // Gives freed memory back to the kernel when the server has been idle a while (nothing held
  // in the in-flight budget for 30 s; called by the sampler).
  void MaybeReleaseMemory();

  const ServerOptions options_;
  KernelRegistry registry_;
  Metrics metrics_;
  ConfigTiers tiers_;  // store (null = no persistent tier), memory cache, chain
  std::unique_ptr<Executor> executor_;
  std::vector<int> devices_;  // served: -1 (the CPU) then GPU ordinals
  // Page-locked memory for GPU calls (the CUDA platform's, process-wide); null without GPUs.
  HostBufferPool* host_pool_ = nullptr;
  AuthOptions auth_options_;  // from the flags (InitAuth), until StartGrpc makes auth_
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Tenants> tenants_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<InflightBudget> budget_;
  // Accepts the gRPC connections; the services' PeerLookup, so it outlives them.
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<KernelServiceImpl> service_;
  std::unique_ptr<InferenceServiceImpl> kserve_service_;  // the KServe v2 front door
  ModelStats model_stats_;
  std::unique_ptr<GpuMemoryAccess> gpu_memory_;  // CUDA regions' (null without GPUs)
  std::unique_ptr<SharedMemoryRegistry> shared_memory_;
  std::unique_ptr<ResidentTensors> resident_;  // made with shared_memory_
  absl::Time started_ = absl::Now();
  bool shared_memory_root_off_ = false;  // system regions refused for running as root
  std::atomic<bool> draining_{false};
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  int metrics_port_ = 0;
  uint64_t file_limit_ = 0;  // RLIMIT_NOFILE's soft limit, raised at startup
  absl::Notification stop_sampler_;
  std::thread sampler_;
  int idle_samples_ = 0;                 // sampler thread only
  int64_t resident_after_release_ = 0;   // sampler thread only: the lowest after a release
  int64_t pinned_allocations_seen_ = 0;  // SampleDevices only (startup, then the sampler)
  int64_t pinned_refusals_seen_ = 0;     // SampleDevices only
  bool shut_down_ = false;
};

}  // namespace kernelserve::server

#endif  // KERNELSERVE_SERVER_SERVER_H_
