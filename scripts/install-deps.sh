#!/usr/bin/env bash
# Installs the Debian 12 packages kernelserve builds, tests and runs with, then the pinned
# cudnn-frontend headers (scripts/fetch-cudnn-frontend.sh).
# Installs only what is missing; uses sudo when not root. Safe to run again.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libhiredis-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libssl-dev openssl nlohmann-json3-dev
  libcli11-dev  # the kernelserve CLI's command line (header-only)
  redis-server prometheus
  python3 python3-grpcio python3-numpy python3-protobuf python3-yaml
  python3-venv  # the client tests' virtualenv (pip installs client/python into it)
  python3-dev  # Python.h, for the Python client's extension kernelserve._native
  python3-pip  # fetches the cudnn-frontend headers (scripts/fetch-cudnn-frontend.sh)
  # Sanitizer and fuzzing builds (make test-asan, test-tsan, fuzz): clang, its sanitizer and
  # libFuzzer runtimes, llvm-symbolizer; dpkg-dev unpacks the Abseil source package that
  # scripts/build-tsan-abseil.sh builds with TSan.
  clang-14 libclang-rt-14-dev llvm-14 dpkg-dev xz-utils
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exec "$(dirname "$0")/fetch-cudnn-frontend.sh"
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
"$(dirname "$0")/fetch-cudnn-frontend.sh"
