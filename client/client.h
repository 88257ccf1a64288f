// kernelserve::Client: a C++ client of kernelserve.v1.KernelService.
//
//   ClientOptions options;
//   options.target = "host:50051";
//   KS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
//   KS_ASSIGN_OR_RETURN(RunResult r, client->MeanPooling(std::move(x)));
//   const Tensor& out = r.outputs.at("out");
//
// Every call returns absl::Status codes as the server sent them (INVALID_ARGUMENT naming the
// bad input, UNAUTHENTICATED, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED...).
#ifndef KERNELSERVE_CLIENT_CLIENT_H_
#define KERNELSERVE_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/attributes.h"
#include "core/config_source.h"
#include "core/kernel_config.h"
#include "core/policy.h"
#include "core/tensor.h"
#include "grpcpp/channel.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/kernel_service_grpc.h"

namespace kernelserve {

class SharedMemoryRegion;  // client/shared_memory.h

// TLS settings of a connection. Paths of PEM files.
struct TlsOptions {
  std::string ca_file;    // roots that verify the server; "" = the system's roots
  std::string cert_file;  // client certificate chain, for mTLS; "" = none
  std::string key_file;   // client private key, for mTLS; "" = none (set with cert_file)
};

// How to reach a server. Every field has a default.
struct ClientOptions {
  std::string target = "127.0.0.1:50051";  // gRPC target ("host:port", "unix:/path", ...)
  std::string token;     // bearer token ("authorization: Bearer <token>"); "" = none
  bool use_tls = false;  // a TLS channel (with `tls`), else plaintext
  TlsOptions tls;        // read when use_tls
  absl::Duration deadline = absl::Seconds(60);   // per call; InfiniteDuration() = none
  int64_t max_message_bytes = int64_t{1} << 30;  // largest message sent or received
};

// Per-call settings of the typed calls. Every field has a default.
struct RunOptions {
  std::optional<KernelConfig> config;  // set = explicit override of the config
  std::string platform;                // "", "auto", "cpu", "cuda", "cudnn"
  std::optional<int> device;           // GPU ordinal, -1 = the CPU; unset = the server picks
  PolicyPatch policy;                  // per-call changes to the server's tuning policy
  std::string request_id;              // echoed by the server
  absl::Duration deadline = absl::ZeroDuration();  // 0 = the client's default
  // Shared-memory regions of this process (not owned; they outlive the call). An input whose
  // bytes lie in one of them goes as a reference to them (Tensor.ref), not as its bytes.
  std::vector<const SharedMemoryRegion*> regions;
  // Outputs the server writes into one of `regions` instead of sending them, by name: a view
  // of the region (SharedMemoryRegion::View) with room for the output. The result's output is
  // then a view of those bytes with the output's dtype and shape.
  TensorMap outputs;
  // Inputs taken from the caller's resident tensors (CreateTensor), input name -> tensor name:
  // sent as that name (Tensor.ref.tensor), whole, with no bytes. The call's own tensor of such
  // an input, if it passes one (MeanPooling's x), must be empty (Tensor()): InvalidArgument
  // otherwise.
  std::map<std::string, std::string> resident_inputs;
  // Outputs the server writes into the caller's resident tensors in place, output name ->
  // tensor name (output_regions); each tensor must have the output's dtype and shape. They are
  // not in RunResult::outputs: ReadTensor reads them. An output also in `outputs` is
  // InvalidArgument.
  std::map<std::string, std::string> resident_outputs;
};

// Options of CreateTensor. Every field has a default.
struct CreateTensorOptions {
  std::optional<int> device;  // GPU ordinal, -1 = host memory; unset = the server places it
  // Idle seconds before the tensor expires; 0 = the server's default (--resident-ttl). More
  // than the server's maximum (--max-resident-ttl) is cut to it.
  uint32_t ttl_seconds = 0;
  // Shared-memory regions of this process (not owned): contents whose bytes lie in one of them
  // go as a reference to them, not as bytes.
  std::vector<const SharedMemoryRegion*> regions;
};

// Where WriteTensor writes. Every field has a default.
struct WriteTensorOptions {
  // Rows [row, row + contents.shape[0]) of dimension 0 (contents is [rows, shape[1:]...]).
  int64_t row = 0;
  // Set: contents' bytes go from this byte of the tensor on, whatever its shape (row unused).
  std::optional<uint64_t> byte_offset;
  std::vector<const SharedMemoryRegion*> regions;  // as CreateTensorOptions::regions
};

// Options of MeanPooling. Every field has a default.
struct MeanPoolingOptions {
  std::optional<Tensor> cu_seqlens;  // [N+1] i32/i64: varlen form, x is [T,H] or [1,T,H]
  std::optional<Tensor> mask;        // [B,S]: only rows whose mask is nonzero count
  int chunk_size = 0;                // rows per work item; 0 = the kernel's default (32)
  RunOptions run;
};

// Options of FlashAttention. Every field has a default.
struct FlashAttentionOptions {
  bool causal = false;              // query i sees keys j <= i + Sk - Sq
  float softmax_scale = 0.0f;       // 0 = 1/sqrt(D)
  std::optional<int> window_left;   // unset = unlimited
  std::optional<int> window_right;  // unset = unlimited
  float logits_soft_cap = 0.0f;     // 0 = off
  bool return_lse = false;          // also return "lse"
  // Optional inputs by name: cu_seqlens_q, cu_seqlens_k, q_segment_ids, kv_segment_ids, bias.
  TensorMap extra_inputs;
  RunOptions run;
};

// Microseconds the server spent in each phase of a call.
struct ServerTimings {
  int64_t queue_us = 0;
  int64_t select_us = 0;
  int64_t h2d_us = 0;
  int64_t kernel_us = 0;
  int64_t d2h_us = 0;
  int64_t total_us = 0;
  int64_t recv_us = 0;    // parsing the request on the server (before queue_us)
  int64_t launch_us = 0;  // queuing the kernel on a GPU (before kernel_us)
};

// The answer to one kernel call. A value type.
struct RunResult {
  TensorMap outputs;                   // "out", and "lse" when asked
  KernelConfig config;                 // the config that ran
  std::optional<ConfigSource> source;  // the tier that chose it; unset if the server left it out
  std::string platform;
  int device = -1;  // -1 = CPU
  std::string device_fingerprint;
  std::string cache_key;
  ServerTimings timings;
  std::string request_id;
  std::vector<std::string> warnings;
};

// The answer to ExecuteBatch. A value type.
struct BatchResult {
  std::vector<absl::StatusOr<RunResult>> items;  // in request order; failed items keep errors
  KernelConfig config;
  std::optional<ConfigSource> source;
};

// The status grpc.health.v1 reports.
enum class HealthStatus { kUnknown, kServing, kNotServing, kServiceUnknown };
// "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN".
std::string_view HealthStatusName(HealthStatus status);

// The core source of a wire source; nullopt for CONFIG_SOURCE_UNSPECIFIED or unknown values.
std::optional<ConfigSource> SourceFromProto(v1::ConfigSource source);
// Moves the outputs out of `response` and converts the rest. The in-band status, when not
// OK, is returned as the error. InvalidArgument if an output tensor is malformed.
absl::StatusOr<RunResult> TakeRunResult(v1::ExecuteResponse* response);

// A connection to one server.
// Thread safety: thread-safe; calls may run concurrently from many threads.
class Client {
 public:
  // Creates the channel (connection happens on the first call). InvalidArgument for an empty
  // target or max_message_bytes outside [1, 2^31 - 1]; NotFound when a TLS file is missing.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Any kernel the server lists (ListKernels): `inputs` by name, `params` by name (sent as
  // `parameters`; the kernel's schema on the server checks names, types and ranges).
  absl::StatusOr<RunResult> Call(const std::string& kernel, TensorMap inputs,
                                 const Attributes& params = {}, RunOptions run = {}) const;
  // mean_pooling of x [B,S,H] (or [T,H] with cu_seqlens) -> out.
  absl::StatusOr<RunResult> MeanPooling(Tensor x, MeanPoolingOptions options = {}) const;
  // flash_attention of q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D] -> out (and lse).
  absl::StatusOr<RunResult> FlashAttention(Tensor q, Tensor k, Tensor v,
                                           FlashAttentionOptions options = {}) const;

  // Raw calls: the request as written by the caller, the client's default deadline. Outputs
  // the request names in output_regions are in their regions, not in RunResult::outputs.
  absl::StatusOr<RunResult> Execute(const v1::ExecuteRequest& request) const;
  // Execute without copying the request's large tensor bytes into gRPC's buffers: they are
  // sent from `request` itself, which gRPC keeps alive (and which must not change) until sent.
  // The way to send one large request many times.
  absl::StatusOr<RunResult> Execute(std::shared_ptr<const v1::ExecuteRequest> request) const;
  absl::StatusOr<BatchResult> ExecuteBatch(const v1::ExecuteBatchRequest& request) const;
  // Sends every request on one ExecuteStream call and returns one answer per request, in
  // request order: its result, or the in-band error the server gave that item (the stream goes
  // on past a bad item). Each result echoes its request's request_id. The returned error is the
  // stream's own (UNAUTHENTICATED, UNAVAILABLE, DEADLINE_EXCEEDED: the default deadline covers
  // the whole stream), or Internal when the server ends the stream without answering every
  // request. On the wire request_id is "<index>:<request_id>", so repeated or empty ids match.
  absl::StatusOr<std::vector<absl::StatusOr<RunResult>>> ExecuteStream(
      std::vector<v1::ExecuteRequest> requests) const;
  absl::StatusOr<v1::AutotuneResponse> Autotune(const v1::AutotuneRequest& request) const;
  // The same on AutotuneStream: `progress` is called on this thread with each message but the
  // last, whose result is returned. A server without AutotuneStream (UNIMPLEMENTED) gets a
  // plain Autotune: no progress then.
  absl::StatusOr<v1::AutotuneResponse> Autotune(
      const v1::AutotuneRequest& request,
      const std::function<void(const v1::AutotuneProgress&)>& progress) const;
  absl::StatusOr<v1::ListKernelsResponse> ListKernels() const;
  absl::StatusOr<v1::ServerInfo> ServerInfo() const;
  // kernel "" = every kernel.
  absl::StatusOr<v1::ListConfigsResponse> ListConfigs(const std::string& kernel = "") const;
  absl::StatusOr<v1::PutConfigResponse> PutConfig(const v1::PutConfigRequest& request) const;
  absl::Status DeleteConfig(const std::string& cache_key,
                            const std::string& device_fingerprint = "") const;
  // grpc.health.v1.Health/Check of `service` ("" = the whole server). Sends no token.
  absl::StatusOr<HealthStatus> Health(const std::string& service = "") const;
  // One KServe v2 (Open Inference Protocol) ModelInfer on the same channel, with the client's
  // token and default deadline.
  absl::StatusOr<inference::ModelInferResponse> ModelInfer(
      const inference::ModelInferRequest& request) const;
  // The same, parsing the answer into `response` (not owned; it may live on a protobuf arena,
  // which makes parsing the answer's parameter map cheaper).
  absl::Status ModelInfer(const inference::ModelInferRequest& request,
                          inference::ModelInferResponse* response) const;
  // The same without copying the request's raw_input_contents into gRPC's buffers (as Execute
  // with a shared request): they are sent from `request`, which must not change meanwhile.
  absl::Status ModelInfer(std::shared_ptr<const inference::ModelInferRequest> request,
                          inference::ModelInferResponse* response) const;

  // Shared memory of the server's host (see client/shared_memory.h for the helper that makes
  // and registers a system region): registers `byte_size` bytes at `offset` of the POSIX
  // shared-memory object `key` as system region `name` of this client's identity (its token).
  // The server takes names of 1 to 128 printable ASCII characters without spaces and keys of
  // '/' and 1 to 254 printable ASCII characters without '/' (InvalidArgument otherwise).
  absl::Status RegisterSystemSharedMemory(const std::string& name, const std::string& key,
                                          uint64_t offset, uint64_t byte_size) const;
  // Registers `byte_size` bytes of the GPU buffer whose cudaIpcMemHandle_t is `raw_handle` (64
  // bytes, from cudaIpcGetMemHandle in a live process on the server's host) on the server's
  // GPU `device` as CUDA region `name`: calls on that GPU read and write it in place.
  absl::Status RegisterCudaSharedMemory(const std::string& name, const std::string& raw_handle,
                                        int device, uint64_t byte_size) const;
  // Forgets region `name` of this client's identity ("" = all of them); lists them ("" = all),
  // each with its owner, whether pinned and the calls holding it.
  absl::Status UnregisterSharedMemory(const std::string& name) const;
  absl::StatusOr<v1::SharedMemoryStatusResponse> SharedMemoryStatus(
      const std::string& name = "") const;

  // Resident tensors: tensors the server keeps between calls, the caller's identity's, by name
  // (1 to 128 printable ASCII characters without spaces). Calls name them in
  // RunOptions::resident_inputs and resident_outputs. They live in the server's memory only (a
  // restart loses them) and expire when idle for their TTL.
  //
  // Creates the caller's resident tensor `name` of `spec`'s dtype and shape, all zeros.
  // Idempotent: a tensor of that name with the same dtype, shape and device (or none asked) is
  // left as it is (contents too; the answer's `created` is false); with another, AlreadyExists.
  // The server's InvalidArgument for a bad name, spec or device, ResourceExhausted past its
  // limits (--max-resident-bytes, --quota-resident-bytes).
  absl::StatusOr<v1::CreateTensorResponse> CreateTensor(
      const std::string& name, const TensorSpec& spec,
      const CreateTensorOptions& options = {}) const;
  // The same with `contents` as the initial bytes (and its dtype and shape the tensor's).
  absl::StatusOr<v1::CreateTensorResponse> CreateTensor(
      const std::string& name, Tensor contents, const CreateTensorOptions& options = {}) const;
  // Writes `contents` (its bytes, moved) into the caller's resident tensor `name` at
  // options.row (contents is [rows, shape[1:]...]) or options.byte_offset (then contents' shape
  // is not sent). Calls on the tensor wait meanwhile. Returns the tensor as it is then.
  // NotFound for a name the caller has no tensor of; InvalidArgument for another dtype or a
  // write past the tensor's end.
  absl::StatusOr<v1::ResidentTensorInfo> WriteTensor(const std::string& name, Tensor contents,
                                                     const WriteTensorOptions& options = {}) const;
  // Rows [row, row + rows) of dimension 0 of the caller's resident tensor `name` (rows unset:
  // to the last row), copied here: a tensor of its dtype, shape [rows, shape[1:]...].
  // NotFound for an unknown name; InvalidArgument for rows past its end.
  absl::StatusOr<Tensor> ReadTensor(const std::string& name, int64_t row = 0,
                                    std::optional<int64_t> rows = std::nullopt) const;
  // Deletes the resident tensor `name` ("" = every one not in use) of `owner` ("" = the
  // caller; another identity or "*" for every one: admins only, PermissionDenied otherwise).
  // Returns how many went. NotFound for an unknown name; FailedPrecondition, naming its calls,
  // for a tensor a call holds.
  absl::StatusOr<int> DeleteTensor(const std::string& name, const std::string& owner = "") const;
  // The resident tensors `name` ("" = all) of `owner` (as DeleteTensor), with the server's
  // start time and the bytes held against its limits.
  absl::StatusOr<v1::ListTensorsResponse> ListTensors(const std::string& name = "",
                                                      const std::string& owner = "") const;

  const ClientOptions& options() const { return options_; }

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);
  // Sets the deadline (0 = the default) and the token on `context`.
  void Prepare(grpc::ClientContext* context, absl::Duration deadline) const;
  // Fills the RunOptions fields of `request` and executes it.
  absl::StatusOr<RunResult> Run(v1::ExecuteRequest& request, const RunOptions& run) const;
  // Adds `inputs` to `request`: as references where they lie in one of run.regions, else
  // their bytes (moved); then run.resident_inputs by name. InvalidArgument for a resident input
  // also given a non-empty tensor.
  static absl::Status PutInputs(TensorMap inputs, const RunOptions& run,
                                v1::ExecuteRequest* request);
  template <typename Request, typename Response>
  using UnaryMethod = grpc::Status (v1::KernelService::Stub::*)(grpc::ClientContext*,
                                                                const Request&, Response*);
  // One unary call with the default deadline.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(UnaryMethod<Request, Response> method,
                                 const Request& request) const;

  const ClientOptions options_;
  const std::string authorization_;  // "Bearer <token>", or "" for none
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::KernelService::Stub> stub_;
  const std::unique_ptr<inference::GRPCInferenceService::Stub> v2_stub_;
  // Execute and ExecuteBatch called with the messages' own types (the stub's generated methods
  // go through MessageLite), so that proto/tensor_wire.h's traits parse the answers.
  const grpc::internal::RpcMethod execute_method_;
  const grpc::internal::RpcMethod execute_batch_method_;
  const grpc::internal::RpcMethod model_infer_method_;  // sent as bytes (SerializeInferRequest)
};

}  // namespace kernelserve

#endif  // KERNELSERVE_CLIENT_CLIENT_H_
