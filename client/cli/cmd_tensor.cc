// tensor create|write|read|ls|rm: the caller's resident tensors on the server. Contents larger
// than a message (the client's or the server's largest) go in pieces.
#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "client/cli/npy.h"
#include "client/cli/tensor_args.h"
#include "core/status_macros.h"
#include "core/utils/string_view.h"
#include "proto/convert.h"

namespace kernelserve::cli {
namespace {

// "2026-11-27 21:30:05Z"; "-" for 0.
std::string UnixMillis(int64_t ms) {
  if (ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

// "f32"; the wire name of a dtype this client does not know.
std::string DTypeString(v1::DType wire) {
  absl::StatusOr<DType> dtype = FromProto(wire, "dtype");
  return dtype.ok() ? std::string(DTypeName(*dtype)) : v1::DType_Name(wire);
}

// "f32[4,128]".
std::string SpecString(const v1::ResidentTensorInfo& t) {
  return absl::StrCat(DTypeString(t.dtype()),
                      ShapeString(Shape(t.shape().begin(), t.shape().end())));
}

std::string DeviceString(int device) { return device < 0 ? "host" : absl::StrCat(device); }

// The .npy file of `path` (bf16 reads '<u2' as bf16 bits; `dtype`, when given, is the dtype the
// file must hold).
absl::StatusOr<Tensor> ReadNpy(const std::string& path, std::optional<DType> dtype) {
  npy::ReadOptions options;
  options.u2_as_bf16 = !dtype.has_value() || *dtype == DType::kBF16;
  if (dtype.has_value() && IsFp8(*dtype)) options.u1_as_fp8 = dtype;
  KS_ASSIGN_OR_RETURN(Tensor tensor, npy::Read(path, options));
  if (dtype.has_value() && tensor.dtype() != *dtype) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' holds ",
                                                   tensor.spec().DebugString(), ", expected dtype ",
                                                   Sv(DTypeName(*dtype))));
  }
  return tensor;
}

// Bytes of a create's, write's or read's other fields, beside the tensor's bytes (the server
// keeps 4 KiB for an answer's).
constexpr uint64_t kOtherFieldsBytes = uint64_t{8} << 10;

// The most tensor bytes one message carries: the smaller of the client's largest message and
// the server's (GetServerInfo; the client's alone when the server does not say), less room for
// the other fields.
uint64_t PieceBytes(const Client& client) {
  int64_t limit = client.options().max_message_bytes;
  absl::StatusOr<v1::ServerInfo> info = client.ServerInfo();
  if (info.ok() && info->max_message_bytes() > 0) {
    limit = std::min<int64_t>(limit, info->max_message_bytes());
  }
  const auto bytes = static_cast<uint64_t>(limit);
  return bytes > 2 * kOtherFieldsBytes ? bytes - kOtherFieldsBytes : bytes / 2;
}

// The caller's resident tensor `name` as ListTensors lists it.
absl::StatusOr<v1::ResidentTensorInfo> InfoOf(const Client& client, const std::string& name) {
  KS_ASSIGN_OR_RETURN(v1::ListTensorsResponse list, client.ListTensors(name));
  for (const v1::ResidentTensorInfo& t : list.tensors()) {
    if (t.name() == name) return t;
  }
  return absl::NotFoundError(absl::StrCat("no resident tensor '", name, "'"));
}

// The bytes of one row of dimension 0 of `t`; all of them for a scalar.
uint64_t RowBytes(const v1::ResidentTensorInfo& t) {
  if (t.shape_size() == 0 || t.shape(0) <= 0) return t.byte_size();
  return t.byte_size() / static_cast<uint64_t>(t.shape(0));
}

// Writes the bytes of `contents` into tensor `name` from byte `start` on, in writes of at most
// `most` bytes of whole elements each. Returns the tensor after the last one.
absl::StatusOr<v1::ResidentTensorInfo> WriteInPieces(const Client& client, const std::string& name,
                                                     const Tensor& contents, uint64_t start,
                                                     uint64_t most) {
  const uint64_t item = ItemSize(contents.dtype());
  v1::ResidentTensorInfo info;
  for (const Piece& piece : SplitInto(contents.nbytes(), most, item)) {
    KS_ASSIGN_OR_RETURN(
        Tensor part,
        Tensor::FromBytes(contents.dtype(), {static_cast<int64_t>(piece.size / item)},
                          std::string(contents.bytes().substr(piece.offset, piece.size))));
    WriteTensorOptions options;
    options.byte_offset = start + piece.offset;
    KS_ASSIGN_OR_RETURN(info, client.WriteTensor(name, std::move(part), options));
  }
  return info;
}

// Creates `name` holding `contents`: in one request when it fits a message, else as zeros then
// written in pieces (deleted again when a piece fails). A tensor that was there is left as is.
absl::StatusOr<v1::CreateTensorResponse> CreateFilled(const Client& client, const std::string& name,
                                                      Tensor contents,
                                                      const CreateTensorOptions& options) {
  const uint64_t most = PieceBytes(client);
  if (contents.nbytes() <= most) return client.CreateTensor(name, std::move(contents), options);
  KS_ASSIGN_OR_RETURN(v1::CreateTensorResponse response,
                      client.CreateTensor(name, contents.spec(), options));
  if (!response.created()) return response;
  absl::StatusOr<v1::ResidentTensorInfo> written = WriteInPieces(client, name, contents, 0, most);
  if (!written.ok()) {
    static_cast<void>(client.DeleteTensor(name));  // not left half written
    return written.status();
  }
  *response.mutable_tensor() = *std::move(written);
  return response;
}

// Writes `contents` as WriteTensor does; in pieces when it does not fit a message, after
// checking here what the server checks of a whole write (dtype, whole rows, the end), so that
// no piece is written of a write that cannot be.
absl::StatusOr<v1::ResidentTensorInfo> WriteFilled(const Client& client, const std::string& name,
                                                   Tensor contents,
                                                   const WriteTensorOptions& options) {
  const uint64_t most = PieceBytes(client);
  if (contents.nbytes() <= most) return client.WriteTensor(name, std::move(contents), options);
  KS_ASSIGN_OR_RETURN(const v1::ResidentTensorInfo t, InfoOf(client, name));
  const std::string what = absl::StrCat("tensor '", name, "'");
  if (ToProto(contents.dtype()) != t.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": contents are ",
                                                   Sv(DTypeName(contents.dtype())),
                                                   "; the tensor is ", DTypeString(t.dtype())));
  }
  const uint64_t row = RowBytes(t);
  if (!options.byte_offset.has_value() && contents.nbytes() % row != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", contents.nbytes(), " bytes: expected whole rows of ", row, " bytes"));
  }
  const uint64_t start = options.byte_offset.value_or(static_cast<uint64_t>(options.row) * row);
  if (start > t.byte_size() || contents.nbytes() > t.byte_size() - start) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", contents.nbytes(), " bytes at byte ",
                                                   start, " do not fit its ", t.byte_size(),
                                                   " bytes (", SpecString(t), ")"));
  }
  return WriteInPieces(client, name, contents, start, most);
}

// Rows of tensor `name` as ReadTensor reads them; in pieces of whole rows when they do not fit
// a message (then not at one instant: a write meanwhile may land between two pieces).
absl::StatusOr<Tensor> ReadFilled(const Client& client, const std::string& name,
                                  const RowsArg& rows) {
  const uint64_t most = PieceBytes(client);
  KS_ASSIGN_OR_RETURN(const v1::ResidentTensorInfo t, InfoOf(client, name));
  const int64_t rows_in = t.shape_size() == 0 ? 1 : t.shape(0);
  const int64_t count = rows.rows.value_or(rows_in - rows.row);
  const uint64_t row = RowBytes(t);
  if (row == 0 || rows.row > rows_in || count < 0 || count > rows_in - rows.row ||
      static_cast<uint64_t>(count) * row <= most) {
    return client.ReadTensor(name, rows.row, rows.rows);  // one read; the server checks it
  }
  std::string bytes;
  Tensor part;
  for (const Piece& piece :
       SplitInto(static_cast<uint64_t>(count), std::max<uint64_t>(1, most / row), 1)) {
    KS_ASSIGN_OR_RETURN(part, client.ReadTensor(name, rows.row + static_cast<int64_t>(piece.offset),
                                                static_cast<int64_t>(piece.size)));
    bytes.append(part.bytes());
  }
  Shape shape = part.shape();
  shape[0] = count;
  return Tensor::FromBytes(part.dtype(), std::move(shape), std::move(bytes));
}

absl::Status Arity(const CommandContext& ctx, size_t lo, size_t hi, const char* usage) {
  const size_t n = ctx.args->positional.size();
  if (n >= lo && n <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("usage: kernelserve tensor ", usage));
}

absl::Status Create(const CommandContext& ctx) {
  constexpr const char* kUsage =
      "create NAME --input-like DTYPE:D0,D1,...|[DTYPE:]FILE.npy [--zeros] [--device N] "
      "[--ttl DURATION]";
  KS_RETURN_IF_ERROR(Arity(ctx, 3, 3, kUsage));
  const std::string& name = ctx.args->positional[2];
  if (!ctx.args->Has("input-like")) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor create needs --input-like: usage: kernelserve tensor ", kUsage));
  }
  KS_ASSIGN_OR_RETURN(const LikeArg like, ParseLikeArg(ctx.args->Get("input-like")));
  CreateTensorOptions options;
  if (ctx.args->Has("device")) {
    KS_ASSIGN_OR_RETURN(int64_t device, ctx.args->GetInt("device", -1));
    options.device = static_cast<int>(device);
  }
  KS_ASSIGN_OR_RETURN(options.ttl_seconds, TtlFromArgs(*ctx.args));
  KS_ASSIGN_OR_RETURN(const bool zeros, ctx.args->GetBool("zeros"));
  absl::StatusOr<v1::CreateTensorResponse> response;
  if (like.path.empty()) {
    response = ctx.client->CreateTensor(name, like.spec, options);
  } else {
    KS_ASSIGN_OR_RETURN(Tensor contents, ReadNpy(like.path, like.dtype));
    response = zeros ? ctx.client->CreateTensor(name, contents.spec(), options)
                     : CreateFilled(*ctx.client, name, std::move(contents), options);
  }
  KS_RETURN_IF_ERROR(response.status());
  if (ctx.json) {
    *ctx.out << MessageJson(*response).dump(2) << "\n";
    return absl::OkStatus();
  }
  const v1::ResidentTensorInfo& t = response->tensor();
  *ctx.out << (response->created() ? "created " : "exists already, left as it is: ") << t.name()
           << " " << SpecString(t) << " on " << DeviceString(t.device()) << ", "
           << FormatBytes(t.byte_size()) << ", ttl "
           << absl::FormatDuration(absl::Seconds(t.ttl_seconds())) << "\n";
  return absl::OkStatus();
}

absl::Status Write(const CommandContext& ctx) {
  KS_RETURN_IF_ERROR(Arity(ctx, 4, 4, "write NAME [DTYPE:]FILE.npy [--row R | --byte-offset B]"));
  const std::string& name = ctx.args->positional[2];
  if (ctx.args->Has("row") && ctx.args->Has("byte-offset")) {
    return absl::InvalidArgumentError(
        "tensor write: give --row R (rows of dimension 0) or --byte-offset B, not both");
  }
  WriteTensorOptions options;
  KS_ASSIGN_OR_RETURN(options.row, ctx.args->GetInt("row", 0));
  if (options.row < 0) return absl::InvalidArgumentError("--row: expected a row >= 0");
  if (ctx.args->Has("byte-offset")) {
    KS_ASSIGN_OR_RETURN(int64_t offset, ctx.args->GetInt("byte-offset", 0));
    if (offset < 0) return absl::InvalidArgumentError("--byte-offset: expected a byte >= 0");
    options.byte_offset = static_cast<uint64_t>(offset);
  }
  // [DTYPE:]FILE.npy: a dtype names what '|u1' bits are (fp8); a colon that does not follow a
  // dtype belongs to the path.
  std::string path = ctx.args->positional[3];
  std::optional<DType> dtype;
  if (const size_t colon = path.find(':'); colon != std::string::npos) {
    if (absl::StatusOr<DType> named = ParseDType(path.substr(0, colon)); named.ok()) {
      dtype = *named;
      path = path.substr(colon + 1);
    }
  }
  KS_ASSIGN_OR_RETURN(Tensor contents, ReadNpy(path, dtype));
  const std::string what = contents.spec().DebugString();
  const size_t bytes = contents.nbytes();
  KS_ASSIGN_OR_RETURN(v1::ResidentTensorInfo t,
                      WriteFilled(*ctx.client, name, std::move(contents), options));
  if (ctx.json) {
    *ctx.out << MessageJson(t).dump(2) << "\n";
    return absl::OkStatus();
  }
  *ctx.out << "wrote " << what << " (" << FormatBytes(bytes) << ") into " << t.name() << " "
           << SpecString(t) << " at "
           << (options.byte_offset ? absl::StrCat("byte ", *options.byte_offset)
                                   : absl::StrCat("row ", options.row))
           << "\n";
  return absl::OkStatus();
}

absl::Status Read(const CommandContext& ctx) {
  KS_RETURN_IF_ERROR(Arity(ctx, 3, 3, "read NAME [--rows A:B] [-o FILE.npy]"));
  const std::string& name = ctx.args->positional[2];
  RowsArg rows;
  if (ctx.args->Has("rows")) {
    KS_ASSIGN_OR_RETURN(rows, ParseRowsArg(ctx.args->Get("rows")));
  }
  KS_ASSIGN_OR_RETURN(Tensor tensor, ReadFilled(*ctx.client, name, rows));
  const std::string path = ctx.args->Get("output");
  if (!path.empty()) {
    KS_RETURN_IF_ERROR(npy::Write(path, tensor));
    if (std::string note = npy::BitsNote(path, tensor.dtype()); !note.empty()) *ctx.err << note;
  }
  nlohmann::json summary = TensorSummary(tensor);
  if (ctx.json) {
    summary["name"] = name;
    summary["row"] = rows.row;
    if (!path.empty()) summary["file"] = path;
    *ctx.out << summary.dump(2) << "\n";
    return absl::OkStatus();
  }
  auto stat = [&](const char* key) {
    return summary.contains(key) ? absl::StrFormat("%.6g", summary[key].get<double>()) : "-";
  };
  Table table({"tensor", "rows", "dtype", "shape", "min", "max", "mean", "file"});
  const int64_t count = tensor.rank() > 0 ? tensor.dim(0) : 1;
  table.AddRow({name, absl::StrCat(rows.row, ":", rows.row + count),
                std::string(DTypeName(tensor.dtype())), ShapeString(tensor.shape()), stat("min"),
                stat("max"), stat("mean"), path.empty() ? "-" : path});
  *ctx.out << table.ToString();
  return absl::OkStatus();
}

void PrintList(const v1::ListTensorsResponse& list, std::ostream& out) {
  Table table({"name", "dtype", "shape", "device", "bytes", "owner", "created", "last used",
               "calls", "ttl"});
  for (const v1::ResidentTensorInfo& t : list.tensors()) {
    table.AddRow({t.name(), DTypeString(t.dtype()),
                  ShapeString(Shape(t.shape().begin(), t.shape().end())), DeviceString(t.device()),
                  FormatBytes(t.byte_size()), t.owner(), UnixMillis(t.created_unix_ms()),
                  UnixMillis(t.last_used_unix_ms()), absl::StrCat(t.calls()),
                  absl::FormatDuration(absl::Seconds(t.ttl_seconds()))});
  }
  out << table.ToString() << "\nserver started " << UnixMillis(list.server_started_unix_ms())
      << " (resident tensors live in its memory only: a restart loses them)\nresident "
      << FormatBytes(list.resident_bytes()) << " of at most "
      << FormatBytes(list.max_resident_bytes()) << "; yours " << FormatBytes(list.owner_bytes())
      << " of "
      << (list.quota_bytes() > 0 ? FormatBytes(list.quota_bytes()) : "no quota but the maximum")
      << "\n";
}

absl::Status List(const CommandContext& ctx) {
  KS_RETURN_IF_ERROR(Arity(ctx, 2, 3, "ls [NAME] [--owner IDENTITY|*]"));
  const std::string name = ctx.args->positional.size() == 3 ? ctx.args->positional[2] : "";
  KS_ASSIGN_OR_RETURN(v1::ListTensorsResponse list,
                      ctx.client->ListTensors(name, ctx.args->Get("owner")));
  if (ctx.json) {
    *ctx.out << MessageJson(list).dump(2) << "\n";
  } else {
    PrintList(list, *ctx.out);
  }
  return absl::OkStatus();
}

absl::Status Remove(const CommandContext& ctx) {
  constexpr const char* kUsage = "rm NAME|--all [--owner IDENTITY|*]";
  KS_RETURN_IF_ERROR(Arity(ctx, 2, 3, kUsage));
  KS_ASSIGN_OR_RETURN(const bool all, ctx.args->GetBool("all"));
  const bool named = ctx.args->positional.size() == 3;
  if (all == named || (named && ctx.args->positional[2].empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor rm takes a NAME or --all (every tensor not in use), one of them: "
                     "usage: kernelserve tensor ",
                     kUsage));
  }
  const std::string name = named ? ctx.args->positional[2] : "";
  KS_ASSIGN_OR_RETURN(const int deleted, ctx.client->DeleteTensor(name, ctx.args->Get("owner")));
  if (ctx.json) {
    *ctx.out << nlohmann::json{{"deleted", deleted}}.dump() << "\n";
  } else {
    *ctx.out << "deleted " << deleted << (deleted == 1 ? " tensor" : " tensors")
             << (named ? absl::StrCat(" (", name, ")") : "") << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CmdTensor(const CommandContext& ctx) {
  const std::vector<std::string>& pos = ctx.args->positional;
  const std::string verb = pos.size() > 1 ? pos[1] : "";
  if (verb == "create") return Create(ctx);
  if (verb == "write") return Write(ctx);
  if (verb == "read") return Read(ctx);
  if (verb == "ls") return List(ctx);
  if (verb == "rm") return Remove(ctx);
  return absl::InvalidArgumentError(
      absl::StrCat("tensor: unknown verb '", verb, "': expected create, write, read, ls or rm"));
}

}  // namespace kernelserve::cli
