// kernelserve-resident-bench: flash attention with K and V resident on the server against the
// same loop sending Q, K and V on every call, and against the bare gRPC floor
// (kernelserve-grpc-floor) answering the message each loop actually sends, in interleaved
// rounds. Also times creates of resident tensors from inline data (the server's copy into the
// tensor, and the round trip). Prints per case the median round trip, server total, bytes sent
// per call and the targets' checks; --json writes them too.
//
//   kernelserve-resident-bench --target=127.0.0.1:50051 --floor=127.0.0.1:50300 [--rounds=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/client_calls.h"
#include "client/client.h"
#include "core/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "nlohmann/json.hpp"
#include "proto/convert.h"
#include "proto/kernel_service_grpc.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "the kernelserve server");
ABSL_FLAG(std::string, floor, "", "a kernelserve-grpc-floor server; empty = no floor rows");
ABSL_FLAG(int, rounds, 7, "rounds; each round runs every case every way");
ABSL_FLAG(int, calls, 5, "calls per case, way and round");
ABSL_FLAG(std::string, cases, "large,small",
          "large = f16 [4,4096,16,128] causal, small = f16 [1,1024,16,128] causal");
ABSL_FLAG(std::string, create_mib, "64,256", "sizes of the timed creates, MiB");
ABSL_FLAG(std::string, json, "", "also write the results to this JSON file");

namespace ks = kernelserve;
using ks::bench::CallSamples;
using ks::bench::Median;
using ks::bench::RandomF16;
using ks::bench::TimeCall;

namespace {

struct Case {
  std::string name;
  ks::v1::ExecuteRequest inline_request;
  ks::v1::ExecuteRequest resident_request;      // q inline, k and v resident
  ks::v1::ExecuteRequest resident_out_request;  // the same, out written into a resident tensor
};

// Deletes the tensor `name` (from an earlier run) and creates it again: f16 `shape` holding
// `contents` (nullable: zeros).
absl::Status Recreate(ks::v1::KernelService::Stub& stub, const std::string& name,
                      const ks::Shape& shape, const ks::v1::Tensor* contents) {
  ks::v1::DeleteTensorRequest del;
  del.set_name(name);
  ks::v1::DeleteTensorResponse deleted;
  grpc::ClientContext delete_context;
  (void)stub.DeleteTensor(&delete_context, del, &deleted);
  ks::v1::CreateTensorRequest create;
  create.set_name(name);
  create.set_dtype(ks::v1::DTYPE_F16);
  for (int64_t d : shape) create.add_shape(d);
  if (contents != nullptr) *create.mutable_contents() = *contents;
  ks::v1::CreateTensorResponse created;
  grpc::ClientContext context;
  grpc::Status status = stub.CreateTensor(&context, create, &created);
  if (!status.ok()) return absl::InternalError("CreateTensor: " + status.error_message());
  return absl::OkStatus();
}

absl::StatusOr<Case> MakeCase(ks::v1::KernelService::Stub& stub, const std::string& which,
                              uint32_t seed) {
  const ks::Shape shape =
      which == "large" ? ks::Shape{4, 4096, 16, 128} : ks::Shape{1, 1024, 16, 128};
  Case c;
  c.name = absl::StrCat("flash_attention f16 [", absl::StrJoin(shape, ","), "] causal");
  c.inline_request.set_kernel("flash_attention");
  c.inline_request.mutable_flash_attention()->set_causal(true);
  for (const char* name : {"q", "k", "v"}) {
    (*c.inline_request.mutable_inputs())[name] = RandomF16(shape, seed++);
  }
  c.resident_request = c.inline_request;
  for (const char* name : {"k", "v"}) {
    const std::string tensor = absl::StrCat("bench-", which, "-", name);
    KS_RETURN_IF_ERROR(Recreate(stub, tensor, shape, &c.inline_request.inputs().at(name)));
    ks::v1::Tensor& ref = (*c.resident_request.mutable_inputs())[name];
    ref.Clear();
    ref.mutable_ref()->set_tensor(tensor);
  }
  const std::string out = absl::StrCat("bench-", which, "-out");
  KS_RETURN_IF_ERROR(Recreate(stub, out, shape, nullptr));
  c.resident_out_request = c.resident_request;
  (*c.resident_out_request.mutable_output_regions())["out"].set_tensor(out);
  return c;
}

// Creates of `mib` MiB from inline data: the server's copy (h2d_us) and the round trip.
nlohmann::json TimeCreates(ks::v1::KernelService::Stub& stub, int64_t mib, int repeats) {
  ks::v1::CreateTensorRequest create;
  create.set_name("bench-create");
  create.set_dtype(ks::v1::DTYPE_F16);
  create.add_shape(mib << 19);
  *create.mutable_contents() = RandomF16({mib << 19}, 77);
  std::vector<double> copy_us, round_trip_us, recv_us;
  for (int i = 0; i < repeats; ++i) {
    ks::v1::DeleteTensorRequest del;
    del.set_name("bench-create");
    ks::v1::DeleteTensorResponse deleted;
    grpc::ClientContext delete_context;
    (void)stub.DeleteTensor(&delete_context, del, &deleted);
    ks::v1::CreateTensorResponse created;
    grpc::ClientContext context;
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = stub.CreateTensor(&context, create, &created);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (!status.ok()) return {{"error", status.error_message()}};
    copy_us.push_back(static_cast<double>(created.timing().h2d_us()));
    recv_us.push_back(static_cast<double>(created.timing().recv_us()));
    round_trip_us.push_back(us);
  }
  const double bytes = static_cast<double>(mib) * 1048576.0;
  const double copy = Median(copy_us), trip = Median(round_trip_us);
  std::printf(
      "create %5lld MiB: copy into the tensor %8.0f us (%5.1f GB/s), parse %8.0f us, "
      "round trip %8.0f us (%5.1f GB/s)\n",
      static_cast<long long>(mib), copy, bytes / copy / 1e3, Median(recv_us), trip,
      bytes / trip / 1e3);
  return {{"mib", mib},
          {"copy_us", copy},
          {"copy_gbps", bytes / copy / 1e3},
          {"recv_us", Median(recv_us)},
          {"round_trip_us", trip}};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ks::ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.deadline = absl::Seconds(300);
  absl::StatusOr<std::unique_ptr<ks::Client>> client = ks::Client::Connect(options);
  std::unique_ptr<ks::Client> floor;
  if (!absl::GetFlag(FLAGS_floor).empty()) {
    ks::ClientOptions floor_options = options;
    floor_options.target = absl::GetFlag(FLAGS_floor);
    absl::StatusOr<std::unique_ptr<ks::Client>> connected = ks::Client::Connect(floor_options);
    if (connected.ok()) floor = *std::move(connected);
  }
  if (!client.ok()) {
    std::fprintf(stderr, "resident-bench: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetMaxSendMessageSize(-1);
  auto stub = ks::v1::KernelService::NewStub(grpc::CreateCustomChannel(
      absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials(), arguments));
  nlohmann::json out;
  for (absl::string_view mib : absl::StrSplit(absl::GetFlag(FLAGS_create_mib), ',')) {
    out["creates"].push_back(TimeCreates(*stub, std::stoll(std::string(mib)), 5));
  }
  std::vector<Case> cases;
  uint32_t seed = 1;
  for (absl::string_view which : absl::StrSplit(absl::GetFlag(FLAGS_cases), ',')) {
    absl::StatusOr<Case> made = MakeCase(*stub, std::string(which), seed);
    seed += 3;
    if (!made.ok()) {
      std::fprintf(stderr, "resident-bench: %s\n", std::string(made.status().message()).c_str());
      return 1;
    }
    cases.push_back(*std::move(made));
  }
  // case -> way -> samples; ways: inline, resident, and the floor of each message.
  std::map<std::string, std::map<std::string, CallSamples>> samples;
  for (int round = 0; round <= absl::GetFlag(FLAGS_rounds); ++round) {  // round 0 warms up
    for (const Case& c : cases) {
      auto inline_request = std::make_shared<const ks::v1::ExecuteRequest>(c.inline_request);
      auto resident_request = std::make_shared<const ks::v1::ExecuteRequest>(c.resident_request);
      auto resident_out_request =
          std::make_shared<const ks::v1::ExecuteRequest>(c.resident_out_request);
      std::vector<std::pair<
          std::string, std::pair<const ks::Client*, std::shared_ptr<const ks::v1::ExecuteRequest>>>>
          ways = {{"inline", {client->get(), inline_request}},
                  {"resident", {client->get(), resident_request}},
                  {"resident+out", {client->get(), resident_out_request}}};
      if (floor != nullptr) {
        ways.push_back({"floor inline", {floor.get(), inline_request}});
        ways.push_back({"floor resident", {floor.get(), resident_request}});
        ways.push_back({"floor resident+out", {floor.get(), resident_out_request}});
      }
      for (const auto& [way, target] : ways) {
        CallSamples scratch;
        CallSamples& into = round == 0 ? scratch : samples[c.name][way];
        for (int i = 0; i < absl::GetFlag(FLAGS_calls); ++i)
          TimeCall(*target.first, target.second, &into);
      }
    }
  }
  for (const Case& c : cases) {
    std::printf("%s\n", c.name.c_str());
    // Bytes each way puts on the wire: the request, and the answer's `out` (q's size) unless
    // the server writes it into a resident tensor.
    const double out_bytes = static_cast<double>(c.inline_request.inputs().at("q").data().size());
    auto wire = [&](const std::string& way) {
      const ks::v1::ExecuteRequest& request = way.ends_with("resident+out") ? c.resident_out_request
                                              : way.ends_with("resident")   ? c.resident_request
                                                                            : c.inline_request;
      return std::pair<double, double>(static_cast<double>(request.ByteSizeLong()),
                                       way.ends_with("+out") ? 0.0 : out_bytes);
    };
    for (const auto& [way, s] : samples[c.name]) {
      const auto [sent, answered] = wire(way);
      std::printf(
          "  %-18s p50 %9.0f us  server total %8.0f us  kernel %7.0f us  sent %11.0f  "
          "answer %11.0f bytes  errors %d %s\n",
          way.c_str(), Median(s.round_trip_us), Median(s.total_us), Median(s.kernel_us), sent,
          answered, s.errors, s.last_error.c_str());
      out["cases"][c.name][way] = {{"p50_us", Median(s.round_trip_us)},
                                   {"total_us", Median(s.total_us)},
                                   {"kernel_us", Median(s.kernel_us)},
                                   {"recv_us", Median(s.recv_us)},
                                   {"sent_bytes", sent},
                                   {"answer_bytes", answered},
                                   {"errors", s.errors}};
    }
    const double inline_p50 = Median(samples[c.name]["inline"].round_trip_us);
    for (const std::string way : {"resident", "resident+out"}) {
      const CallSamples& res = samples[c.name][way];
      const auto [sent, answered] = wire(way);
      const auto [inline_sent, inline_answered] = wire("inline");
      std::printf("  %s: bytes sent inline / %s %.2fx (both ways %.2fx); round trip %.2fx\n",
                  way.c_str(), way.c_str(), inline_sent / sent,
                  (inline_sent + inline_answered) / (sent + answered),
                  inline_p50 / std::max(1.0, Median(res.round_trip_us)));
      if (floor == nullptr) continue;
      const double bound =
          Median(samples[c.name]["floor " + way].round_trip_us) + Median(res.total_us) + 100.0;
      std::printf(
          "  %s: p50 %.0f us against floor(its message) + server total + 100 us = %.0f "
          "us: %s\n",
          way.c_str(), Median(res.round_trip_us), bound,
          Median(res.round_trip_us) <= bound ? "met" : "NOT met");
      out["cases"][c.name]["bound_" + way + "_us"] = bound;
    }
  }
  if (!absl::GetFlag(FLAGS_json).empty()) std::ofstream(absl::GetFlag(FLAGS_json)) << out.dump(2);
  return 0;
}
