#include "tests/server/tls_files.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tests/server/server_process.h"

namespace kernelserve::testing {
namespace {

// Runs `command` in `dir` with its output appended to dir/openssl.log.
absl::Status Run(const std::string& dir, const std::string& command) {
  const std::string line = absl::StrCat("cd '", dir, "' && (", command, ") >> openssl.log 2>&1");
  const int rc = std::system(line.c_str());
  if (rc != 0 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    return absl::InternalError(
        absl::StrCat("`", command, "` failed (", rc, "):\n", ReadText(dir + "/openssl.log")));
  }
  return absl::OkStatus();
}

// A new EC P-256 key, unencrypted (openssl req options).
constexpr char kNewKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

// A self-signed CA `name`.pem with key `name`.key.
absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Run(dir, absl::StrCat("openssl req -x509 ", kNewKey, " -days 1 -subj /CN=", name,
                               " -addext basicConstraints=critical,CA:TRUE",
                               " -addext keyUsage=critical,keyCertSign,cRLSign", " -keyout ", name,
                               ".key -out ", name, ".pem"));
}

// `name`.pem and `name`.key: a certificate for `cn` signed by CA `ca`, with the extensions
// `extensions` (openssl -extfile lines).
absl::Status MakeLeaf(const std::string& dir, const std::string& ca, const std::string& name,
                      const std::string& cn, const std::string& extensions) {
  std::ofstream(dir + "/" + name + ".ext") << extensions;
  KS_RETURN_IF_ERROR(Run(dir, absl::StrCat("openssl req ", kNewKey, " -subj /CN=", cn, " -keyout ",
                                           name, ".key -out ", name, ".csr")));
  return Run(dir, absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca, ".pem -CAkey ", ca,
                               ".key -CAcreateserial -days 1 -extfile ", name, ".ext -out ", name,
                               ".pem"));
}

}  // namespace

absl::StatusOr<TlsFiles> MakeTlsFiles() {
  TlsFiles files;
  files.dir = MakeTempDir("tls");
  const std::string& d = files.dir;
  KS_RETURN_IF_ERROR(MakeCa(d, "ca"));
  KS_RETURN_IF_ERROR(MakeCa(d, "other-ca"));
  KS_RETURN_IF_ERROR(MakeLeaf(d, "ca", "server", "localhost",
                              "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                              "extendedKeyUsage=serverAuth\n"));
  KS_RETURN_IF_ERROR(
      MakeLeaf(d, "ca", "client", "kernelserve-test-client", "extendedKeyUsage=clientAuth\n"));
  KS_RETURN_IF_ERROR(MakeLeaf(d, "other-ca", "stranger", "kernelserve-test-stranger",
                              "extendedKeyUsage=clientAuth\n"));
  files.ca_cert = d + "/ca.pem";
  files.server_cert = d + "/server.pem";
  files.server_key = d + "/server.key";
  files.client_cert = d + "/client.pem";
  files.client_key = d + "/client.key";
  files.other_ca_cert = d + "/other-ca.pem";
  files.stranger_cert = d + "/stranger.pem";
  files.stranger_key = d + "/stranger.key";
  return files;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace kernelserve::testing
