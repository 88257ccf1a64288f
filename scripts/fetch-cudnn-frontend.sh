#!/usr/bin/env bash
# Fetches the headers of NVIDIA's cudnn-frontend (header-only C++ graph API over cuDNN), pinned
# to one version and checked against its hash, from PyPI's nvidia-cudnn-frontend wheel into
# .deps/cudnn-frontend-<version>/include. CMake builds the cudnn platform of flash attention
# when they are there (and CUDA and cuDNN's own headers are). Safe to run again; does nothing
# when the headers are present. Needs pip (python3-pip) and PyPI.
set -euo pipefail

version=1.32.0
# The wheel for CPython 3.11 on manylinux_2_28 x86_64: the headers are the same in every wheel
# of a version, so one fixed file is fetched wherever this runs.
sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.deps/cudnn-frontend-$version"
if [[ -f "$dest/include/cudnn_frontend.h" ]]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-cudnn-frontend: downloading nvidia-cudnn-frontend $version (headers only)"
printf 'nvidia-cudnn-frontend==%s --hash=sha256:%s\n' "$version" "$sha256" > "$tmp/req.txt"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --require-hashes -r "$tmp/req.txt" -d "$tmp/wheel"
python3 - "$tmp"/wheel/*.whl "$tmp/unpacked" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    members = [m for m in wheel.namelist() if m.startswith("include/")]
    wheel.extractall(sys.argv[2], members)
PY
mkdir -p "$root/.deps"
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
mv "$tmp/unpacked/include" "$dest.partial/include"
mv "$dest.partial" "$dest"
echo "fetch-cudnn-frontend: headers in $dest/include"
