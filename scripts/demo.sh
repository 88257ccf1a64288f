#!/usr/bin/env bash
# make demo: starts kernelserve-server on free loopback ports, runs the CLI against it for both
# kernels (twice, to show the config cache answering), prints a metrics excerpt, stops it.
set -euo pipefail
build=${1:-build}
server=$build/server/kernelserve-server
cli=$build/client/kernelserve
for b in "$server" "$cli"; do
  [[ -x $b ]] || { echo "demo: $b is missing: run 'make build' first" >&2; exit 1; }
done

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
metrics=$(free_port)
cache=$(mktemp -d)
"$server" --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics" \
  --cache "file:$cache/configs.json" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$cache"' EXIT

target=127.0.0.1:$port
for _ in $(seq 100); do "$cli" health --target "$target" >/dev/null 2>&1 && break; sleep 0.1; done

step() { printf '\n$ kernelserve %s\n' "$*"; "$cli" "$@" --target "$target"; }
step info
for round in 1 2; do
  echo; echo "== round $round"
  step run mean_pooling --shape x=bf16:8,512,1024
  step run flash_attention --shape q=bf16:2,256,8,64 --shape k=bf16:2,256,2,64 \
    --shape v=bf16:2,256,2,64 --param causal=true --param return_lse=true
done
printf '\n$ curl http://127.0.0.1:%s/metrics (excerpt)\n' "$metrics"
/usr/bin/python3 - "$metrics" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
keep = ("kernelserve_requests_total", "kernelserve_config_selections_total",
        "kernelserve_kernel_duration_seconds_sum", "kernelserve_inflight_requests")
for line in text.splitlines():
    if line.startswith(keep):
        print(line)
PY
