// TlsFiles: a throwaway PKI for the TLS tests, made at test time with the openssl command line.
#ifndef KERNELSERVE_TESTS_SERVER_TLS_FILES_H_
#define KERNELSERVE_TESTS_SERVER_TLS_FILES_H_

#include <string>

#include "absl/status/statusor.h"

namespace kernelserve::testing {

// Paths of PEM files in a fresh temp dir: a CA, a server certificate for 127.0.0.1 and
// localhost signed by it, a client certificate signed by it, and a client certificate signed
// by another CA (one the server does not trust). Keys are EC P-256; certificates last one day.
struct TlsFiles {
  std::string dir;
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
  std::string other_ca_cert;  // the other CA
  std::string stranger_cert;  // signed by the other CA
  std::string stranger_key;
};

// Runs openssl to make the files. Internal, with the commands' output, when one fails
// (scripts/install-deps.sh installs openssl).
absl::StatusOr<TlsFiles> MakeTlsFiles();

// The contents of a file; "" when it cannot be read.
std::string ReadText(const std::string& path);

}  // namespace kernelserve::testing

#endif  // KERNELSERVE_TESTS_SERVER_TLS_FILES_H_
