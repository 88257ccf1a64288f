#!/usr/bin/env python3
"""Several GPUs under concurrency: does placement keep every GPU busy?

    bench/multi_gpu.py [--out DIR] [--clients 16] [--seconds 8] [--lanes 2]

Needs kernelserve-server and kernelserve (the CLI) on PATH and the Python client importable.
Starts one server on all GPUs, then for each load (flash_attention f16 [1,4096,16,128] causal,
mean_pooling f16 [8,512,1024]) runs the CLI's bench with --clients calls in flight and no
device named, while nvidia-smi samples each GPU's utilization every 200 ms. Prints per GPU the
calls it ran (kernelserve_kernel_duration_seconds_count{device}) and its mean utilization
during the run. Then one ExecuteBatch of 8 items spread over every GPU, each item checked
against the same item run alone on the cpu platform.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np

PORT, METRICS = 50051, 9464
LOADS = [
    ("flash_attention f16 [1,4096,16,128] causal", "flash_attention",
     ["--shape", "q=f16:1,4096,16,128", "--shape", "k=f16:1,4096,16,128",
      "--shape", "v=f16:1,4096,16,128", "--param", "causal=true"]),
    ("mean_pooling f16 [8,512,1024]", "mean_pooling", ["--shape", "x=f16:8,512,1024"]),
]


def per_device_calls() -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS}/metrics").read().decode()
    calls: dict[str, float] = {}
    for match in re.finditer(r'^kernelserve_kernel_duration_seconds_count\{([^}]*)\} (\S+)$',
                             text, re.M):
        device = re.search(r'device="([^"]*)"', match.group(1)).group(1)
        calls[device] = calls.get(device, 0.0) + float(match.group(2))
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--lanes", type=int, default=2)
    opts = parser.parse_args()
    server = subprocess.Popen(
        ["kernelserve-server", "--cache=memory", f"--listen=127.0.0.1:{PORT}",
         f"--metrics-listen=127.0.0.1:{METRICS}", f"--gpu-lanes={opts.lanes}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("#", server.stdout.readline().strip(), flush=True)
    report: dict = {"loads": []}
    try:
        print("\n| load | clients | req/s | p50 ms | calls per GPU | mean utilization per GPU |"
              "\n|---|---|---|---|---|---|", flush=True)
        for label, kernel, args in LOADS:
            before = per_device_calls()
            smi = subprocess.Popen(["nvidia-smi", "--query-gpu=index,utilization.gpu",
                                    "--format=csv,noheader,nounits", "-lms", "200"],
                                   stdout=subprocess.PIPE, text=True)
            bench = subprocess.run(
                ["kernelserve", "--json", "--target", f"127.0.0.1:{PORT}", "bench", kernel,
                 "--platform", "cuda", "--concurrency", str(opts.clients),
                 "--duration", f"{opts.seconds}s"] + args, capture_output=True, text=True)
            smi.terminate()
            samples, _ = smi.communicate()
            after = per_device_calls()
            result = json.loads(bench.stdout) if bench.returncode == 0 else {"error": bench.stderr}
            utilization: dict[str, list[int]] = {}
            for line in samples.splitlines():
                index, value = (part.strip() for part in line.split(","))
                utilization.setdefault(f"cuda:{index}", []).append(int(value))
            # The middle of the run: the first and last second are ramps.
            mean = {gpu: float(np.mean(v[5:-5] if len(v) > 10 else v))
                    for gpu, v in utilization.items()}
            calls = {d: after.get(d, 0) - before.get(d, 0) for d in after if d != "cpu"}
            report["loads"].append({"load": label, "bench": result, "calls": calls,
                                    "utilization": mean})
            if "error" in result:
                print(f"| {label} | error: {result['error'][-300:]} |")
                continue
            print(f"| {label} | {opts.clients} | {result['throughput_rps']:.0f} | "
                  f"{result['latency_us']['p50'] / 1e3:.2f} | "
                  f"{', '.join(f'{d} {n:.0f}' for d, n in sorted(calls.items()))} | "
                  f"{', '.join(f'{d} {u:.0f}%' for d, u in sorted(mean.items()))} |", flush=True)
        report["batch"] = batch_spread()
    finally:
        server.terminate()
        server.wait()
    with open(os.path.join(opts.out, "multi_gpu.json"), "w") as f:
        json.dump(report, f, indent=1)


def batch_spread() -> dict:
    import kernelserve
    rng = np.random.default_rng(3)
    items = [{"x": rng.standard_normal((4, 300 + i, 512), dtype=np.float32)} for i in range(8)]
    with kernelserve.Client(f"127.0.0.1:{PORT}") as client:
        gpus = [d.device for d in client.info().devices if d.device >= 0]
        results = client.execute_batch("mean_pooling", items, platform="cuda", devices=gpus)
        worst, devices = 0.0, []
        for item, result in zip(items, results):
            if isinstance(result, Exception):
                print(f"batch item failed: {result}")
                return {"error": str(result)}
            devices.append(result.device)
            expected = item["x"].astype(np.float64).mean(axis=1)
            worst = max(worst, float(np.max(np.abs(result.out - expected))))
    print(f"\nExecuteBatch of 8 mean_pooling items over GPUs {gpus}: items ran on {devices}; "
          f"largest difference from float64 numpy {worst:.2e}", flush=True)
    return {"gpus": gpus, "devices": devices, "max_abs_error": worst}


if __name__ == "__main__":
    sys.exit(main())
