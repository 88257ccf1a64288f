#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries for Hopper (sm_90a) on this GPU-less machine,
# bundles them with their shared libraries into .device/ (ignored by git, carried by the
# device tool), and prints the exact command to run on the GPU machine. See docs/GPU.md.
#
#   scripts/gpu-bundle.sh            # build dir build-gpu, 2 build jobs
#   BUILD=build-x JOBS=4 scripts/gpu-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-gpu}
jobs=${JOBS:-2}
bundle_sh=${BUNDLE_SH:-../shared/device/bundle.sh}

configure_log=$(cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a)
if ! grep -q 'CUDA kernels ON' <<<"$configure_log"; then
  echo "gpu-bundle: $build was configured without CUDA (is nvcc at /usr/local/cuda?)" >&2
  exit 1
fi
bench_target=kernelserve-gpu-bench
targets=$(cmake --build "$build" --target help)
if ! grep -q "$bench_target" <<<"$targets"; then
  echo "gpu-bundle: no target $bench_target: the top-level CMakeLists.txt must have" \
       "add_subdirectory(bench)" >&2
  exit 1
fi
cmake --build "$build" --target gpu_tests "$bench_target" -j"$jobs"

if ! git check-ignore -q .device/; then
  mkdir -p .git/info
  echo '/.device/' >>.git/info/exclude
fi
rm -rf .device
"$bundle_sh" .device "$build/tests/gpu_tests" "$build/bench/$bench_target"

cat <<'CMD'

Device command (device tool `run`, carry [".device"]); logs and results come back from $OUT:

source .device/env.sh; set -o pipefail; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee $OUT/device.txt; gpu_tests --gtest_brief=1 2>&1 | tee $OUT/gpu_tests.log | tail -40; kernelserve-gpu-bench --json=$OUT/bench.json 2>&1 | tee $OUT/bench.log; PY=python3; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3; PYTHONUNBUFFERED=1 $PY bench/peers.py --ours $OUT/bench.json --out $OUT 2>$OUT/peers.log
CMD
