#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/config_tiers.h"
#include "core/status_macros.h"
#include "core/utils/log.h"
#include "kernels/register.h"
#include "kernels/runtime/cpu/host_copy.h"
#include "proto/parse_copy.h"
#include "server/build_info.h"
#include "server/device_memory.h"
#include "server/listen_check.h"
#include "server/listener.h"
#include "server/process_tuning.h"

namespace kernelserve::server {
namespace {

// "system cuda", "system", "cuda" or "off": the kinds of region clients may register.
std::string SharedMemoryLabel(const SharedMemoryRegistry* registry) {
  std::vector<std::string> kinds;
  if (registry != nullptr && registry->system()) kinds.push_back("system");
  if (registry != nullptr && registry->cuda()) kinds.push_back("cuda");
  return kinds.empty() ? std::string("off") : absl::StrJoin(kinds, " ");
}

constexpr char kServiceName[] = "kernelserve.v1.KernelService";
// The smallest resource quota gRPC gets, whatever --max-inflight-bytes says.
constexpr int64_t kMinGrpcQuotaBytes = int64_t{64} << 20;

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, "=", path, ": cannot open the file"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The one token a file holds (surrounding white space dropped); InvalidArgument when empty.
absl::StatusOr<std::string> ReadToken(const std::string& path, const std::string& flag) {
  KS_ASSIGN_OR_RETURN(std::string text, ReadFile(path, flag));
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", path, ": the file is empty"));
  }
  return token;
}

// The GPU ordinals --devices names, checked against the `detected` count.
absl::StatusOr<std::vector<int>> ParseDevices(const std::string& spec, int detected) {
  std::vector<int> gpus;
  if (spec == "all") {
    for (int i = 0; i < detected; ++i) gpus.push_back(i);
    return gpus;
  }
  if (spec == "cpu") return gpus;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--devices=", spec, ": expected all, cpu or GPU ordinals like 0,1; got '", part, "'"));
    }
    if (ordinal >= detected) {
      return absl::InvalidArgumentError(absl::StrCat("--devices=", spec, ": GPU ", ordinal,
                                                     " does not exist (", detected, " found)"));
    }
    gpus.push_back(ordinal);
  }
  return gpus;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& o) {
  if (o.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  KS_ASSIGN_OR_RETURN(pair.private_key, ReadFile(o.tls_key, "--tls-key"));
  KS_ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(o.tls_cert, "--tls-cert"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!o.tls_client_ca.empty()) {
    KS_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFile(o.tls_client_ca, "--tls-client-ca"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// This process's resident memory (/proc/self/statm); 0 when unknown.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

// `address` with its port replaced by `port` (the port a ":0" address got); Unix socket
// addresses ("unix:PATH", "unix-abstract:NAME") have no port and come back unchanged.
std::string WithPort(const std::string& address, int port) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return address;
  }
  const size_t colon = address.rfind(':');
  return absl::StrCat(colon == std::string::npos ? address : address.substr(0, colon), ":", port);
}

// `limit` in whole milliseconds for a gRPC channel argument: at least 1, at most INT_MAX
// (which gRPC reads as no limit).
int ChannelArgMillis(absl::Duration limit) {
  const int64_t millis = absl::ToInt64Milliseconds(absl::Ceil(limit, absl::Milliseconds(1)));
  return static_cast<int>(std::clamp<int64_t>(millis, 1, INT_MAX));
}

// --max-connection-idle, --max-connection-age and --max-connection-age-grace (zero: gRPC's
// default, no limit).
void SetConnectionLimits(const ServerOptions& options, grpc::ServerBuilder* builder) {
  const std::pair<const char*, absl::Duration> limits[] = {
      {GRPC_ARG_MAX_CONNECTION_IDLE_MS, options.max_connection_idle},
      {GRPC_ARG_MAX_CONNECTION_AGE_MS, options.max_connection_age},
      {GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, options.max_connection_age_grace}};
  for (const auto& [arg, limit] : limits) {
    if (limit > absl::ZeroDuration()) builder->AddChannelArgument(arg, ChannelArgMillis(limit));
  }
}

// "; fds 1048576": the open files the process may have.
std::string FileLimitLabel(uint64_t limit) {
  return limit == RLIM_INFINITY ? std::string("; fds unlimited") : absl::StrCat("; fds ", limit);
}

}  // namespace

Server::Server(const ServerOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  return Start(options, {});
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    const ServerOptions& options,
    const std::vector<std::function<std::unique_ptr<Kernel>()>>& extra_kernels) {
  std::unique_ptr<Server> server(new Server(options));
  KS_RETURN_IF_ERROR(server->Init(extra_kernels));
  return server;
}

absl::Status Server::Init(
    const std::vector<std::function<std::unique_ptr<Kernel>()>>& extra_kernels) {
  file_limit_ = RaiseFileLimit();
  ChainOptions chain_options;
  chain_options.on_store_error = [this](std::string_view store, std::string_view op) {
    metrics_.StoreError(store, op);
  };
  KS_ASSIGN_OR_RETURN(tiers_, OpenConfigTiers(options_.cache, std::move(chain_options)));
  KS_RETURN_IF_ERROR(RegisterBuiltinKernels(&registry_));
  for (const auto& make : extra_kernels) KS_RETURN_IF_ERROR(registry_.Register(make()));
  std::vector<DeviceInfo> detected = DetectGpus();
  KS_ASSIGN_OR_RETURN(std::vector<int> gpus,
                      ParseDevices(options_.devices, static_cast<int>(detected.size())));
  if (gpus.empty()) detected.clear();  // CPU only: "auto" then resolves to the cpu
  if (const std::string why = CudnnUnavailableReason(); !why.empty() && !detected.empty()) {
    KS_LOG(WARNING) << "kernelserve-server: no cudnn platform: " << why;
  }

  ExecutorOptions executor_options;
  executor_options.policy.allow_autotune = options_.autotune;
  executor_options.policy.time_budget = options_.autotune_budget == absl::ZeroDuration()
                                            ? absl::InfiniteDuration()
                                            : options_.autotune_budget;
  // Tuning times candidates with the GPU to itself (pool_ exists before any call runs).
  executor_options.hold_device = [this](int device) -> std::unique_ptr<DeviceHold> {
    return pool_->HoldExclusive(device);
  };
  // A call waiting for another's tuning of its key steps aside, so that hold is granted.
  executor_options.step_aside = [this](int device) { return pool_->StepAside(device); };
  executor_ = std::make_unique<Executor>(&registry_, tiers_.chain.get(), std::move(detected),
                                         executor_options);

  devices_ = {-1};
  devices_.insert(devices_.end(), gpus.begin(), gpus.end());
  if (!gpus.empty()) {
    host_pool_ = ConfigureGpuHostMemory(static_cast<size_t>(options_.max_pinned_bytes));
    SetGpuLaunchGate(options_.launch_gate_min_bytes);
    // Large tensors are parsed into the pool on the host copier's threads.
    wire::SetScatterCopy(
        [](const std::vector<CopyPiece>& pieces) { cpu::SharedHostCopier().CopyPieces(pieces); });
  }
  WorkerPoolOptions pool_options;
  pool_options.max_queue = options_.max_queue;
  pool_options.gpu_lanes = options_.gpu_lanes;
  pool_options.on_depth = [this](int device, int depth) {
    metrics_.QueueDepth(DeviceLabel(device), depth);
  };
  pool_options.on_start = [this](int device, int64_t queue_us) {
    metrics_.QueueWait(DeviceLabel(device), static_cast<double>(queue_us) * 1e-6);
  };
  pool_ = std::make_unique<WorkerPool>(devices_, pool_options);
  budget_ = std::make_unique<InflightBudget>(options_.max_inflight_bytes);
  KS_RETURN_IF_ERROR(InitAuth());
  metrics_.InflightRequestsAdd(0);  // exported from the start
  metrics_.ExportKnownSeries(KnownLabels());

  if (!options_.metrics_listen.empty()) {
    std::string metrics_token;
    if (!options_.metrics_auth_token_file.empty()) {
      KS_ASSIGN_OR_RETURN(metrics_token,
                          ReadToken(options_.metrics_auth_token_file, "--metrics-auth-token-file"));
    }
    KS_ASSIGN_OR_RETURN(metrics_port_, metrics_.Serve(options_.metrics_listen, metrics_token));
  }
  SampleDevices();
  sampler_ = std::thread([this] {
    while (!stop_sampler_.WaitForNotificationWithTimeout(absl::Seconds(2))) {
      SampleDevices();
      MaybeReleaseMemory();
      if (host_pool_ != nullptr) host_pool_->Trim();  // blocks idle for 30 s go back
    }
  });
  return StartGrpc();
}

std::unique_ptr<ResidentTensors> Server::MakeResidentTensors() {
  ResidentOptions resident;
  resident.max_bytes = options_.max_resident_bytes;
  resident.quota_bytes = options_.quota_resident_bytes;
  resident.max_tensors = options_.max_resident_tensors;
  resident.default_ttl = options_.resident_ttl;
  resident.max_ttl = options_.max_resident_ttl;
  // A GPU keeps room for its calls: their inputs and outputs are at most the in-flight budget,
  // twice it leaving room for their workspaces.
  resident.gpu_room = [reserve = 2 * options_.max_inflight_bytes](int device) -> int64_t {
    absl::StatusOr<DeviceMemory> memory = QueryDeviceMemory(device);
    return memory.ok() ? memory->total_bytes - reserve : 0;
  };
  resident.on_refusal = [this](const std::string& /*owner*/, const char* cap) {
    metrics_.ResidentRefused(cap);
  };
  return std::make_unique<ResidentTensors>(std::move(resident), gpu_memory_.get());
}

absl::Status Server::InitAuth() {
  AuthOptions auth;
  if (!options_.auth_token_file.empty()) {
    KS_ASSIGN_OR_RETURN(std::string text, ReadFile(options_.auth_token_file, "--auth-token-file"));
    KS_ASSIGN_OR_RETURN(auth.tokens, ParseTokenFile(text, options_.auth_token_file));
  }
  for (absl::string_view name :
       absl::StrSplit(options_.admin_identities, ',', absl::SkipWhitespace())) {
    auth.admin_identities.emplace_back(absl::StripAsciiWhitespace(name));
  }
  auth.anonymous_role = options_.anonymous_role == "caller" ? Role::kCaller : Role::kAdmin;
  auth.client_certificates = !options_.tls_client_ca.empty();
  QuotaOptions quota;
  quota.inflight_bytes = options_.quota_inflight_bytes;
  quota.requests_per_second = options_.quota_requests_per_second;
  quota.request_burst = options_.quota_request_burst;
  std::vector<std::string> known;
  for (const TokenEntry& entry : auth.tokens) known.push_back(entry.identity);
  if (known.empty()) known.push_back("anonymous");
  tenants_ = std::make_unique<Tenants>(
      quota, known,
      [this](const std::string& label, const char* what) { metrics_.QuotaRefusal(label, what); });
  auth_options_ = std::move(auth);
  return absl::OkStatus();
}

absl::Status Server::Listen(std::shared_ptr<grpc::ServerCredentials> credentials) {
  KS_RETURN_IF_ERROR(CheckUnixSocketFree(options_.listen));
  ListenerOptions listener_options;
  if (!options_.tls_cert.empty()) listener_options.tls = std::move(credentials);
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      Listener::Bind(options_.listen, std::move(listener_options));
  if (!listener.ok()) {
    return {listener.status().code(),
            absl::StrCat("--listen=", options_.listen, ": ", listener.status().message())};
  }
  listener_ = *std::move(listener);
  port_ = listener_->port();
  return absl::OkStatus();
}

absl::Status Server::StartGrpc() {
  KS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, Credentials(options_));
  KS_RETURN_IF_ERROR(Listen(credentials));
  // What the handlers share (server/service_deps.h): the call part now, its shared memory and
  // the access part once the listener and the registry exist.
  ServiceDeps deps;
  deps.executor = executor_.get();
  deps.pool = pool_.get();
  deps.metrics = &metrics_;
  deps.budget = budget_.get();
  deps.options = &options_;
  deps.host_allocator = host_pool_;
  deps.stats = &model_stats_;
  deps.store_location = tiers_.StoreLocation();
  deps.built_with_cuda = BuiltWithCuda();
  deps.cudnn_version = LoadedCudnnVersion();
  deps.draining = &draining_;
  const std::string& mode = options_.shared_memory;
  const bool local = mode == "auto" && IsLocalListener(options_.listen);
  SharedMemoryOptions shared;
  // A server running as root could open any user's object: system regions only when asked.
  const bool root_refuses = geteuid() == 0 && !options_.shared_memory_as_root;
  shared.system = (mode == "system" || mode == "all" || local) && !root_refuses;
  shared.cuda = mode == "cuda" || mode == "all" || local;
  shared.max_bytes = options_.max_shared_memory_bytes;
  shared.max_regions = options_.max_shared_memory_regions;
  shared.quota_regions = options_.quota_shared_memory_regions;
  shared.quota_bytes = options_.quota_shared_memory_bytes;
  shared.max_pinned_bytes = options_.max_pinned_shared_memory_bytes;
  shared.quota_pinned_bytes = options_.quota_pinned_bytes;
  shared.on_quota_refusal = [this](const std::string& owner, const char* quota) {
    metrics_.QuotaRefusal(tenants_->Of(owner)->label(), quota);
  };
  shared.off_reason =
      root_refuses     ? "the server runs as root; --shared-memory-as-root serves it anyway"
      : mode == "auto" ? "--shared-memory=auto serves it on loopback and unix listeners only"
                       : absl::StrCat("--shared-memory=", mode);
  shared_memory_root_off_ = root_refuses && (mode == "system" || mode == "all" || local);
  if (devices_.size() > 1) gpu_memory_ = RuntimeGpuMemoryAccess();
  shared_memory_ = std::make_unique<SharedMemoryRegistry>(shared, gpu_memory_.get());
  deps.shared_memory = shared_memory_.get();
  resident_ = MakeResidentTensors();
  deps.resident = resident_.get();
  deps.started = started_;
  // The authenticator asks the listener who is on the other end of a connection.
  KS_ASSIGN_OR_RETURN(auth_, Authenticator::Create(std::move(auth_options_), listener_.get()));
  deps.auth = auth_.get();
  deps.tenants = tenants_.get();
  deps.peers = listener_.get();
  kserve_service_ = std::make_unique<InferenceServiceImpl>(deps);
  service_ = std::make_unique<KernelServiceImpl>(std::move(deps));

  grpc::EnableDefaultHealthCheckService(true);
  if (options_.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The listener binds the address (refusing one in use) and accepts the connections itself;
  // gRPC serves them.
  grpc::ServerBuilder builder;
  if (options_.reflection && !options_.auth_token_file.empty()) {
    // Reflection is gRPC's own service: its calls get the token rule through an interceptor.
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guards;
    guards.push_back(ReflectionGuard(auth_.get()));
    builder.experimental().SetInterceptorCreators(std::move(guards));
  }
  listener_->AddTo(&builder);
  SetConnectionLimits(options_, &builder);
  // A request larger than the in-flight budget could never be accepted: gRPC refuses it as it
  // arrives ("larger than max"), before buffering it whole.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min(options_.max_message_bytes, options_.max_inflight_bytes)));
  builder.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
  // gRPC's own buffers of requests being received (until a handler parses them) are held to a
  // quota the size of the in-flight budget (at least kMinGrpcQuotaBytes, which gRPC's own
  // connection buffers need); past it gRPC resets the call's stream. Request memory so stays
  // under about twice --max-inflight-bytes: the bytes being received plus the calls accepted
  // (docs/SERVER.md, "Limits").
  grpc::ResourceQuota quota("kernelserve");
  quota.Resize(static_cast<size_t>(std::max(options_.max_inflight_bytes, kMinGrpcQuotaBytes)));
  builder.SetResourceQuota(quota);
  builder.RegisterService(service_.get());
  builder.RegisterService(kserve_service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("--listen=", options_.listen, ": gRPC could not start the server"));
  }
  listener_->Start(grpc_server_.get());
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
  return absl::OkStatus();
}

void Server::MaybeReleaseMemory() {
  // main() keeps freed memory for reuse (server/process_tuning.h). Once per idle time, 30 s with
  // nothing in the in-flight budget (no call in flight, and no stream answer waiting to be
  // written: those stay there as bytes), what grew past the RSS a release came back to goes
  // back to the kernel. The budget holds what the server keeps for its clients, so a release
  // never runs while that memory is in use; the baseline is the lowest RSS a release reached.
  constexpr int kIdleSamples = 15;                    // of the sampler's 2 s
  constexpr int64_t kSlackBytes = int64_t{64} << 20;  // RSS growth worth a malloc_trim
  if (budget_->requests() > 0 || budget_->bytes() > 0) {
    idle_samples_ = 0;
    return;
  }
  if (idle_samples_ >= kIdleSamples) return;  // this idle time had its turn
  if (++idle_samples_ < kIdleSamples) return;
  if (ResidentBytes() <= resident_after_release_ + kSlackBytes) return;
  ReleaseRetainedMemory();
  const int64_t after = ResidentBytes();
  resident_after_release_ =
      resident_after_release_ > 0 ? std::min(resident_after_release_, after) : after;
}

void Server::SampleDevices() {
  for (int device : devices_) {
    absl::StatusOr<DeviceMemory> memory = QueryDeviceMemory(device);
    if (memory.ok()) {
      metrics_.DeviceMemory(DeviceLabel(device), memory->used_bytes, memory->total_bytes);
    }
  }
  if (host_pool_ != nullptr) {
    const HostPoolStats pinned = host_pool_->stats();
    metrics_.PinnedHost(
        static_cast<int64_t>(pinned.in_use_bytes), static_cast<int64_t>(pinned.cached_bytes),
        pinned.allocations - pinned_allocations_seen_, pinned.refusals - pinned_refusals_seen_);
    pinned_allocations_seen_ = pinned.allocations;
    pinned_refusals_seen_ = pinned.refusals;
  }
  if (resident_ != nullptr) {
    if (const int expired = resident_->Expire(absl::Now()); expired > 0) {
      metrics_.ResidentExpired(expired);
    }
    const std::map<int, std::pair<int64_t, int>> held = resident_->ByDevice();
    for (int device : devices_) {
      auto there = held.find(device);
      metrics_.Resident(DeviceLabel(device), there == held.end() ? 0 : there->second.first,
                        there == held.end() ? 0 : there->second.second);
    }
  }
}

KnownSeries Server::KnownLabels() const {
  KnownSeries known;
  for (const Kernel* kernel : registry_.kernels()) {
    known.kernels.push_back(kernel->name());
    for (Platform platform : kernel->platforms()) {
      if (platform == Platform::kCpu || !executor_->gpus().empty()) {
        known.kernel_platforms.emplace_back(kernel->name(), std::string(PlatformName(platform)));
      }
    }
  }
  for (int device : devices_) known.devices.push_back(DeviceLabel(device));
  known.identities = tenants_->Labels();
  if (const PersistentStore* store = tiers_.chain->store()) known.store = store->name();
  for (ConfigSource source :
       {ConfigSource::kOverride, ConfigSource::kOverlay, ConfigSource::kMemory, ConfigSource::kFile,
        ConfigSource::kRedis, ConfigSource::kAutotune, ConfigSource::kHeuristic}) {
    const bool a_store = source == ConfigSource::kFile || source == ConfigSource::kRedis;
    if (!a_store || ConfigSourceName(source) == known.store) {
      known.config_sources.emplace_back(ConfigSourceName(source));
    }
  }
  const BuildInfo& build = GetBuildInfo();
  known.version = build.version;
  known.cuda = build.cuda;
  known.git = build.git;
  return known;
}

std::string Server::StartupLine() const {
  std::vector<std::string> devices;
  for (int device : devices_) devices.push_back(DeviceLabel(device));
  std::vector<std::string> protocols = {"kernelserve.v1", "kserve.v2", "grpc.health.v1"};
  if (options_.reflection) protocols.push_back("grpc.reflection");
  const char* security = options_.tls_cert.empty()        ? "plaintext"
                         : options_.tls_client_ca.empty() ? "tls"
                                                          : "mtls";
  return absl::StrCat(
      "kernelserve-server ", BuildInfoString(), ": listening on ", WithPort(options_.listen, port_),
      " (", security, options_.auth_token_file.empty() ? "" : ", bearer token", "), metrics ",
      metrics_port_ > 0 ? absl::StrCat("on ", WithPort(options_.metrics_listen, metrics_port_))
                        : std::string("off"),
      "; protocols ", absl::StrJoin(protocols, " "), "; devices ", absl::StrJoin(devices, ","),
      "; store ", tiers_.StoreLocation(), "; autotune on a miss ", options_.autotune ? "on" : "off",
      host_pool_ != nullptr
          ? absl::StrCat("; pinned host memory up to ", options_.max_pinned_bytes >> 20, " MiB")
          : std::string(),
      devices_.size() > 1 ? absl::StrCat("; ", options_.gpu_lanes, " calls at once per GPU")
                          : std::string(),
      "; shared memory ", SharedMemoryLabel(shared_memory_.get()),
      shared_memory_root_off_ ? " (system off as root: --shared-memory-as-root)" : "",
      FileLimitLabel(file_limit_), "; auth ", auth_->Describe());
}

absl::Status Server::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  draining_ = true;
  if (grpc_server_ != nullptr) {
    grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
    health->SetServingStatus(kServiceName, false);
    health->SetServingStatus(false);
    // New kernel calls are refused with UNAVAILABLE by our handlers while the held ones
    // finish; only then does gRPC stop taking calls (those arriving as it stops may see
    // CANCELLED from gRPC itself instead of a refusal).
    const absl::Time deadline = absl::Now() + options_.grace_period;
    budget_->Close();
    while (budget_->requests() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    // New connections are refused from here, as gRPC refuses new calls.
    listener_->Stop();
    grpc_server_->Shutdown(absl::ToChronoTime(deadline));
  }
  if (pool_ != nullptr) pool_->Shutdown();
  if (grpc_server_ != nullptr) grpc_server_->Wait();
  stop_sampler_.Notify();
  if (sampler_.joinable()) sampler_.join();
  return tiers_.store != nullptr ? tiers_.store->Flush() : absl::OkStatus();
}

Server::~Server() { (void)Shutdown(); }

}  // namespace kernelserve::server
