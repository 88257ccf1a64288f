#include "proto/wire_check.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kernelserve::wire {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

constexpr int kMaxDepth = 100;  // protobuf's default recursion limit
// Protobuf reads a tag in at most 5 bytes, and a length in at most 5 bytes up to INT_MAX less
// its parser's 16 slop bytes.
constexpr int kMaxTagBytes = 5;
constexpr int kMaxLengthBytes = 5;
constexpr uint64_t kMaxLength = INT_MAX - 16;

// Sequential reads over a ByteBuffer's slices, counting the position from the start.
class Reader {
 public:
  explicit Reader(const grpc::ByteBuffer& buffer) {
    if (!buffer.Valid() || !buffer.Dump(&slices_).ok()) slices_.clear();
  }

  uint64_t position() const { return position_; }

  // A varint of at most `max_bytes` bytes; nullopt when truncated or longer.
  std::optional<uint64_t> Varint(int max_bytes = 10) {
    uint64_t value = 0;
    for (int i = 0; i < max_bytes; ++i) {
      std::optional<uint8_t> byte = Byte();
      if (!byte) return std::nullopt;
      value |= static_cast<uint64_t>(*byte & 0x7f) << (7 * i);
      if ((*byte & 0x80) == 0) return value;
    }
    return std::nullopt;
  }

  // Skips `n` bytes (or appends them to `out` when non-null); false when fewer remain.
  bool Take(uint64_t n, std::string* out = nullptr) {
    while (n > 0) {
      if (!Ready()) return false;
      const grpc::Slice& s = slices_[slice_];
      const uint64_t take = std::min<uint64_t>(n, s.size() - offset_);
      if (out != nullptr) out->append(reinterpret_cast<const char*>(s.begin()) + offset_, take);
      offset_ += take;
      position_ += take;
      n -= take;
    }
    return true;
  }

 private:
  bool Ready() {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
    return slice_ < slices_.size();
  }
  std::optional<uint8_t> Byte() {
    if (!Ready()) return std::nullopt;
    ++position_;
    return slices_[slice_].begin()[offset_++];
  }

  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
  uint64_t position_ = 0;
};

bool ValidUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int extra = 0;
    uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;  // the character is cut short
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

class Walker {
 public:
  explicit Walker(const grpc::ByteBuffer& buffer) : in_(buffer), size_(buffer.Length()) {}

  std::string Run(const Descriptor* type) {
    Message(type, size_, 0, 0);
    return fault_;
  }

 private:
  // Walks fields until `end`; a group (`group` != 0) ends at its end-group tag instead.
  bool Message(const Descriptor* type, uint64_t end, int depth, uint32_t group) {
    if (depth > kMaxDepth) return Fault("messages nested deeper than 100 levels");
    while (in_.position() < end) {
      const uint64_t at = in_.position();
      std::optional<uint64_t> varint = in_.Varint(kMaxTagBytes);
      if (!varint) return Fault(absl::StrCat("malformed field tag at byte ", at));
      // Protobuf keeps the low 32 bits of a tag's 5 bytes.
      const auto tag = static_cast<uint32_t>(*varint);
      const uint32_t number = tag >> 3;
      const int wire_type = static_cast<int>(tag & 7);
      if (number == 0) return Fault(absl::StrCat("field number 0 at byte ", at));
      const FieldDescriptor* field = type != nullptr ? type->FindFieldByNumber(number) : nullptr;
      const std::string where = absl::StrCat(
          "field ", number, field != nullptr ? absl::StrCat(" (", field->name(), ")") : "",
          " at byte ", at);
      if (wire_type == 4) {
        if (group == number) return true;
        return Fault(absl::StrCat(where, ": end-group tag without its start"));
      }
      if (!Field(field, wire_type, end, depth, number, where)) return false;
      if (in_.position() > end) {
        return Fault(absl::StrCat(where, ": runs past the end of its message"));
      }
    }
    if (group != 0) return Fault(absl::StrCat("group ", group, ": no end-group tag"));
    return true;
  }

  bool Field(const FieldDescriptor* field, int wire_type, uint64_t end, int depth, uint32_t number,
             const std::string& where) {
    switch (wire_type) {
      case 0:
        if (!in_.Varint()) return Fault(absl::StrCat(where, ": malformed or truncated varint"));
        return true;
      case 1:
      case 5:
        if (!in_.Take(wire_type == 1 ? 8 : 4)) return Fault(absl::StrCat(where, ": truncated"));
        return true;
      case 2:
        return LengthDelimited(field, end, depth, where);
      case 3: {
        const FieldDescriptor* typed =
            field != nullptr && field->type() == FieldDescriptor::TYPE_GROUP ? field : nullptr;
        return Message(typed != nullptr ? typed->message_type() : nullptr, end, depth + 1, number);
      }
      default:
        return Fault(absl::StrCat(where, ": invalid wire type ", wire_type));
    }
  }

  bool LengthDelimited(const FieldDescriptor* field, uint64_t end, int depth,
                       const std::string& where) {
    std::optional<uint64_t> length = in_.Varint(kMaxLengthBytes);
    if (!length || *length > kMaxLength) return Fault(absl::StrCat(where, ": malformed length"));
    const uint64_t left = end - std::min(end, in_.position());
    if (*length > left) {
      return Fault(absl::StrCat(where, ": length ", *length, " runs past the end of its message (",
                                left, " bytes left)"));
    }
    const uint64_t stop = in_.position() + *length;
    if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE) {
      return Message(field->message_type(), stop, depth + 1, 0) &&
             (in_.position() == stop || Fault(absl::StrCat(where, ": malformed submessage")));
    }
    if (field != nullptr && field->type() == FieldDescriptor::TYPE_STRING &&
        field->file()->syntax() == google::protobuf::FileDescriptor::SYNTAX_PROTO3) {
      std::string text;
      in_.Take(*length, &text);
      if (!ValidUtf8(text)) return Fault(absl::StrCat(where, ": not valid UTF-8"));
      return true;
    }
    if (field != nullptr && field->is_packable()) return Packed(field, stop, where);
    in_.Take(*length);
    return true;
  }

  // The values of a packed repeated scalar field must fill its length exactly.
  bool Packed(const FieldDescriptor* field, uint64_t stop, const std::string& where) {
    const int width = FixedWidth(field->type());
    while (in_.position() < stop) {
      const bool ok = width > 0 ? in_.Take(static_cast<uint64_t>(width)) : in_.Varint().has_value();
      if (!ok || in_.position() > stop) {
        return Fault(absl::StrCat(where, ": malformed packed values"));
      }
    }
    return true;
  }

  static int FixedWidth(FieldDescriptor::Type type) {
    switch (type) {
      case FieldDescriptor::TYPE_DOUBLE:
      case FieldDescriptor::TYPE_FIXED64:
      case FieldDescriptor::TYPE_SFIXED64:
        return 8;
      case FieldDescriptor::TYPE_FLOAT:
      case FieldDescriptor::TYPE_FIXED32:
      case FieldDescriptor::TYPE_SFIXED32:
        return 4;
      default:
        return 0;
    }
  }

  bool Fault(std::string text) {
    if (fault_.empty()) fault_ = std::move(text);
    return false;
  }

  Reader in_;
  const uint64_t size_;
  std::string fault_;
};

}  // namespace

std::string DescribeMalformed(const grpc::ByteBuffer& buffer, const Descriptor* type) {
  return Walker(buffer).Run(type);
}

}  // namespace kernelserve::wire
