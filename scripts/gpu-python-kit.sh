#!/usr/bin/env bash
# Puts the Python client into .device/pykit for a GPU host whose Python differs from this
# machine's (there: Python 3.12 with grpcio and protobuf, no gRPC C++ headers, nothing to
# install): the package as the build's pyenv holds it (its generated stubs included, its
# extension left out), nanobind's sources and the gRPC, Abseil and protobuf headers this build
# uses, and pykit/build.sh, which compiles kernelserve._native there with that host's python3
# against the bundled gRPC libraries (.device/lib, from scripts/gpu-bundle.sh).
#
#   scripts/gpu-python-kit.sh            # the package of build-gpu/pyenv
#   BUILD=build scripts/gpu-python-kit.sh
#
# On the GPU host, from the checkout's root, after `source .device/env.sh`:
#   bash .device/pykit/build.sh && export PYTHONPATH=$PWD/.device/pykit/site
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu}
python=$build/pyenv/bin/python
if [[ ! -x $python ]]; then
  echo "gpu-python-kit: no $python: build the client's pyenv first (make test, or" \
       "cmake --build $build --target client_pyenv)" >&2
  exit 1
fi
site=$("$python" -c 'import kernelserve, os; print(os.path.dirname(kernelserve.__file__))')
kit=.device/pykit
rm -rf "$kit"
mkdir -p "$kit/site" "$kit/include/google" "$kit/wheel"
cp -r "$site" "$kit/site/"
rm -f "$kit"/site/kernelserve/_native*.so
find "$kit/site" -name __pycache__ -prune -exec rm -rf {} +
# nanobind's sources, the version the package's build requires.
"$python" -m pip download --no-deps --only-binary=:all: -d "$kit/wheel" "nanobind>=2.4,<3" -q
"$python" -m zipfile -e "$kit"/wheel/nanobind-*.whl "$kit/wheel/unpacked"
mv "$kit/wheel/unpacked/nanobind" "$kit/nanobind"
rm -rf "$kit/wheel"
for dir in grpc grpcpp grpc++ absl; do cp -r "/usr/include/$dir" "$kit/include/"; done
cp -r /usr/include/google/protobuf "$kit/include/google/"
# The libraries the extension links, as the bundle names them.
libs=""
for lib in $(readelf -d "$site"/_native*.so 2>/dev/null | sed -n 's/.*NEEDED.*\[\(lib\(grpc\|gpr\|absl\)[^]]*\)\]/\1/p'); do
  libs="$libs -l:$lib"
done
if [[ -z $libs ]]; then
  echo "gpu-python-kit: $site has no kernelserve._native linking gRPC (readelf found none), so" \
       "the libraries to link on the GPU host are unknown; build the package with its extension" \
       "first (cmake --build $build --target client_pyenv)" >&2
  exit 1
fi
cat >"$kit/build.sh" <<EOF
#!/usr/bin/env bash
# Builds kernelserve._native for this host's python3 against .device/lib's gRPC. Run from the
# checkout's root (it compiles client/python/kernelserve/_native.cc).
set -euo pipefail
kit=\$(dirname "\$0")
inc=\$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=\$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
g++ -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -fno-strict-aliasing -DNOMINMAX \\
  -I"\$inc" -I"\$kit/nanobind/include" -I"\$kit/nanobind/ext/robin_map/include" \\
  -I"\$kit/include" client/python/kernelserve/_native.cc "\$kit/nanobind/src/nb_combined.cpp" \\
  -o "\$kit/site/kernelserve/_native\$suffix" -L.device/lib $libs -Wl,--as-needed
echo "built \$kit/site/kernelserve/_native\$suffix"
EOF
chmod +x "$kit/build.sh"
echo "gpu-python-kit: $kit ($(du -sh "$kit" | cut -f1)); on the GPU host:"
echo "  source .device/env.sh && bash $kit/build.sh && export PYTHONPATH=\$PWD/$kit/site"
