// Short forms of text that comes from clients, for error messages.
#ifndef KERNELSERVE_CORE_UTILS_ELIDE_H_
#define KERNELSERVE_CORE_UTILS_ELIDE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace kernelserve {

// `text` when it has at most `max_bytes` bytes; else its first bytes (cut at a UTF-8
// character boundary) followed by "...(N bytes)". A name a client sent may be megabytes long;
// a message that repeats it must not be.
std::string Elide(std::string_view text, size_t max_bytes = 64);

}  // namespace kernelserve

#endif  // KERNELSERVE_CORE_UTILS_ELIDE_H_
