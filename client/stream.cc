// Client::ExecuteStream: one bidirectional stream, written from a second thread while the
// answers are read and put back in request order.
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/status_convert.h"
#include "core/status_macros.h"

namespace kernelserve {
namespace {

// "<index>:<id>": the request_id sent for request `index` whose own id is `id`.
std::string WireId(size_t index, const std::string& id) { return absl::StrCat(index, ":", id); }

// The index of a wire id; nullopt when it is not one of the `count` sent.
std::optional<size_t> IndexOf(const std::string& wire_id, size_t count) {
  const size_t colon = wire_id.find(':');
  size_t index = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(wire_id.substr(0, colon), &index) ||
      index >= count) {
    return std::nullopt;
  }
  return index;
}

}  // namespace

absl::StatusOr<std::vector<absl::StatusOr<RunResult>>> Client::ExecuteStream(
    std::vector<v1::ExecuteRequest> requests) const {
  const size_t count = requests.size();
  std::vector<std::string> ids(count);
  for (size_t i = 0; i < count; ++i) {
    ids[i] = requests[i].request_id();
    requests[i].set_request_id(WireId(i, ids[i]));
  }
  grpc::ClientContext context;
  Prepare(&context, absl::ZeroDuration());
  std::unique_ptr<grpc::ClientReaderWriter<v1::ExecuteRequest, v1::ExecuteResponse>> stream =
      stub_->ExecuteStream(&context);
  // A failed Write means the stream is over; Finish below tells why.
  std::thread writer([&stream, &requests] {
    for (const v1::ExecuteRequest& request : requests) {
      if (!stream->Write(request)) return;
    }
    stream->WritesDone();
  });
  std::vector<std::optional<absl::StatusOr<RunResult>>> answers(count);
  std::string stray;  // a request_id that matches no request
  v1::ExecuteResponse response;
  while (stream->Read(&response)) {
    const std::optional<size_t> index = IndexOf(response.request_id(), count);
    if (!index.has_value() || answers[*index].has_value()) {
      stray = response.request_id();
      continue;
    }
    response.set_request_id(ids[*index]);
    answers[*index] = TakeRunResult(&response);
  }
  writer.join();
  KS_RETURN_IF_ERROR(FromGrpcStatus(stream->Finish()));
  if (!stray.empty()) {
    return absl::InternalError(absl::StrCat("ExecuteStream: an answer's request_id '", stray,
                                            "' matches no request or repeats one"));
  }
  std::vector<absl::StatusOr<RunResult>> results;
  results.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (!answers[i].has_value()) {
      return absl::InternalError(
          absl::StrCat("ExecuteStream: the stream ended without an answer "
                       "to request ",
                       i, " of ", count));
    }
    results.push_back(*std::move(answers[i]));
  }
  return results;
}

}  // namespace kernelserve
