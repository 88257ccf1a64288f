#!/usr/bin/env python3
"""The data path of GPU calls end to end, beside its floors, in one run on the GPU host.

    bench/data_path.py [--out DIR] [--sizes 1,8,64,256,1000] [--reps N] [--lanes 2]
                       [--compare-lanes 1,2,3] [--sections sizes,concurrency,mixed,shm]
                       [--platform cpu]

Needs on PATH: kernelserve-server, kernelserve (the CLI), kernelserve-grpc-floor and
kernelserve-copy-bench; the Python client (client/python) importable. It runs:

1. the floors: kernelserve-copy-bench (pinned and pageable cudaMemcpy both ways, host memcpy,
   the host copier);
2. kernelserve-grpc-floor (a bare gRPC server answering with the same bytes: mean_pooling's
   [B,H] answer, attention's out = q) and kernelserve-server (--gpu-lanes as given, the pinned
   pool on) side by side;
3. for each size (MB of request bytes) and both kernels (mean_pooling f16 [B,S,1024..4096],
   flash_attention f16 causal [B,S,16,128]), after three calls at concurrency 3 (each lane's
   first call makes its stream): the CLI's bench at concurrency 1 against each server (p50 round
   trip, the server's mean timing fields) and the Python client's round trip against each
   (median after one warm-up call); 30 calls below 32 MB, --reps (Python: half) above;
4. concurrency 8 with 8 MB requests against the floor and the server at each of
   --compare-lanes: throughput, and how much of each second the calls' copies and kernels cover
   (above 1.0 they overlap);
5. tiny calls (mean_pooling [1,16,64] on the GPU) at concurrency 1 while four clients send
   256 MB attention calls, at each of --compare-lanes: does a tiny call wait behind the large
   ones' copies?
6. (section shm) concurrency 8 with the tensors in a system shared-memory region (the CLI's
   --shared-memory=system: each call carries references, the server copies by DMA from the
   registered, page-locked region), at each of --compare-lanes: a load that gRPC can carry
   faster than the GPU serves it, so the copies of one call and the kernel of another must
   overlap for the throughput to pass the GPU's serial bound. The transport bound is the
   bare gRPC floor's rate for a tiny call at the same concurrency.

Writes DIR/data_path.json and prints markdown tables.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

import numpy as np

FLOOR_PORT = 50300
SERVER_PORT = 50051
METRICS_PORT = 9465
PLATFORM = "cuda"  # --platform

# name, kernel, {input: shape}, params: the request of about `mb` MB of f16 inputs.
def cases(sizes: list[int]) -> list[tuple[str, str, dict[str, list[int]], dict[str, str]]]:
    out = []
    for mb in sizes:
        # mean_pooling x [B,S,H]: B*S*H*2 bytes.
        pooling = {1: [1, 512, 1024], 8: [8, 512, 1024], 64: [32, 1024, 1024],
                   256: [32, 2048, 2048], 1000: [30, 4096, 4096]}[mb]
        out.append((f"mean_pooling {mb} MB", "mean_pooling", {"x": pooling}, {}))
        # flash_attention q,k,v [B,S,16,128] each: 3*B*S*4096 bytes, out = q.
        b, s = {1: (1, 96), 8: (1, 640), 64: (2, 2600), 256: (4, 5200), 1000: (5, 16384)}[mb]
        qkv = {name: [b, s, 16, 128] for name in ("q", "k", "v")}
        out.append((f"flash_attention {mb} MB", "flash_attention", qkv, {"causal": "true"}))
    return out


def nbytes(shapes: dict[str, list[int]]) -> int:
    return sum(2 * int(np.prod(shape)) for shape in shapes.values())


def start(args: list[str], port: int) -> subprocess.Popen:
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = process.stdout.readline().strip()  # the startup line
    print(f"# {line}", flush=True)
    if process.poll() is not None:
        sys.exit(f"{args[0]} did not start: {line}")
    return process


def cli_bench(port: int, kernel: str, shapes: dict[str, list[int]], params: dict[str, str],
              concurrency: int, requests: int, duration: str = "60s",
              extra: tuple[str, ...] = ()) -> dict[str, Any]:
    command = ["kernelserve", "--target", f"127.0.0.1:{port}", "--json", "--deadline", "120s",
               "bench", kernel, "--platform", PLATFORM, "--concurrency", str(concurrency),
               "--duration", duration, *extra]
    if requests:
        command += ["--requests", str(requests)]
    for name, shape in shapes.items():
        command += ["--shape", f"{name}=f16:{','.join(map(str, shape))}"]
    for key, value in params.items():
        command += ["--param", f"{key}={value}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"error": (done.stdout + done.stderr)[-400:]}
    return json.loads(done.stdout)


def python_round_trip(port: int, kernel: str, shapes: dict[str, list[int]],
                      params: dict[str, str], reps: int) -> dict[str, Any]:
    import kernelserve
    rng = np.random.default_rng(7)
    inputs = {name: rng.standard_normal(shape, dtype=np.float32).astype(np.float16)
              for name, shape in shapes.items()}
    typed = {key: value == "true" for key, value in params.items()}
    times = []
    with kernelserve.Client(f"127.0.0.1:{port}", timeout=120) as client:
        for rep in range(reps + 1):
            begin = time.perf_counter()
            client.execute(kernel, inputs, typed, platform=PLATFORM)
            if rep > 0:  # the first call warms the channel and the pools
                times.append(time.perf_counter() - begin)
    return {"p50_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3}


def pool_counts(label: str = "") -> tuple[float, float]:
    """(segments allocated anew, refusals) of the server's pinned pool, after its next sample.

    With `label`, also prints the pool's bytes in use and cached at that point."""
    time.sleep(2.1)  # the server samples the pool every 2 s
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics").read().decode()
    def value(name: str) -> float:
        match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(match.group(1)) if match else 0.0
    counts = (value("kernelserve_pinned_host_allocations_total"),
              value("kernelserve_pinned_host_refusals_total"))
    if label:
        in_use = value('kernelserve_pinned_host_bytes{state="in_use"}') / 2**20
        cached = value('kernelserve_pinned_host_bytes{state="cached"}') / 2**20
        print(f"# pool {label}: {counts[0]:.0f} segments allocated so far, in use {in_use:.0f} "
              f"MiB, cached {cached:.0f} MiB", flush=True)
    return counts


def overlap(result: dict[str, Any]) -> float:
    """Seconds of copies and kernels per second of the run (above 1: they overlap)."""
    mean = result["server_mean"]
    busy_us = mean["h2d_us"] + mean["kernel_us"] + mean["d2h_us"]
    return result["throughput_rps"] * busy_us * 1e-6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--sizes", default="1,8,64,256,1000")
    parser.add_argument("--reps", type=int, default=5, help="calls per case of 64 MB and more")
    parser.add_argument("--lanes", type=int, default=2, help="--gpu-lanes of the sizes section")
    parser.add_argument("--compare-lanes", default="1,2,3",
                        help="--gpu-lanes values of the concurrency and mixed sections")
    parser.add_argument("--sections", default="sizes,concurrency,mixed,shm")
    parser.add_argument("--platform", default="cuda", help="cpu: a smoke run without a GPU")
    opts = parser.parse_args()
    global PLATFORM
    PLATFORM = opts.platform
    sections = opts.sections.split(",")
    compare = [int(n) for n in opts.compare_lanes.split(",")]
    report: dict[str, Any] = {"cases": [], "concurrency": [], "mixed": [], "shm": []}
    from google.protobuf.internal import api_implementation
    print(f"# Python {sys.version.split()[0]}, protobuf {api_implementation.Type()}", flush=True)

    copy = subprocess.run(["kernelserve-copy-bench"], capture_output=True, text=True)
    report["copy_bench"] = copy.stdout + copy.stderr
    print("## floors: kernelserve-copy-bench\n```\n" + report["copy_bench"] + "```", flush=True)

    floor = start(["kernelserve-grpc-floor", "--listen", f"127.0.0.1:{FLOOR_PORT}"], FLOOR_PORT)
    server = None
    try:
        if "sizes" in sections:
            server = start(server_command(opts.lanes), SERVER_PORT)
            run_sizes(report, opts)
            stop(server)
        if "concurrency" in sections:
            print("\n| concurrency 8, 8 MB | target | req/s | GB/s in | copies+kernel per "
                  "second |\n|---|---|---|---|---|", flush=True)
            for name, kernel, shapes, params in cases([8]):
                run_concurrent(report, "floor", FLOOR_PORT, name, kernel, shapes, params)
            for lanes in compare:
                server = start(server_command(lanes), SERVER_PORT)
                for name, kernel, shapes, params in cases([8]):
                    run_concurrent(report, f"server lanes {lanes}", SERVER_PORT, name, kernel,
                                   shapes, params)
                stop(server)
        if "mixed" in sections:
            print("\n| tiny calls beside large ones | lanes | tiny p50 ms | tiny p90 | tiny p99 | "
                  "tiny req/s | large req/s |\n|---|---|---|---|---|---|---|", flush=True)
            for lanes in compare:
                server = start(server_command(lanes), SERVER_PORT)
                run_mixed(report, lanes)
                stop(server)
        if "shm" in sections:
            run_shm(report, compare)
    finally:
        for process in (server, floor):
            if process is not None:
                stop(process)
    with open(os.path.join(opts.out, "data_path.json"), "w") as f:
        json.dump(report, f, indent=1)


def server_command(lanes: int) -> list[str]:
    return ["kernelserve-server", "--cache=memory", f"--metrics-listen=127.0.0.1:{METRICS_PORT}",
            f"--listen=127.0.0.1:{SERVER_PORT}", f"--gpu-lanes={lanes}",
            # The device runs this as root, where system shared memory needs asking for.
            *(["--shared-memory-as-root"] if os.geteuid() == 0 else [])]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait()


def run_sizes(report: dict[str, Any], opts: argparse.Namespace) -> None:
    print("\n| request | in / out MB | CLI floor p50 | CLI server p50 | ratio | recv | h2d "
          "(GB/s) | kernel | d2h (GB/s) | server total | Python floor p50 | Python server "
          "p50 | ratio | pool new / refused |\n" + "|---" * 14 + "|", flush=True)
    for name, kernel, shapes, params in cases([int(s) for s in opts.sizes.split(",")]):
        small = nbytes(shapes) < 32e6
        reps = 30 if small else opts.reps
        row: dict[str, Any] = {"name": name, "bytes_in": nbytes(shapes)}
        cli_bench(FLOOR_PORT, kernel, shapes, params, 3, 3)
        row["cli_floor"] = cli_bench(FLOOR_PORT, kernel, shapes, params, 1, reps)
        # Each lane's first call makes its stream; the pool's segments of the warm-up stay
        # while they are used within 30 s (the CLI takes seconds to fill 1 GB of inputs, so
        # the warm-up comes right before the measured calls).
        cli_bench(SERVER_PORT, kernel, shapes, params, 3, 3)
        before = pool_counts(f"before the measured calls of {name}")
        row["cli_server"] = cli_bench(SERVER_PORT, kernel, shapes, params, 1, reps)
        after = pool_counts(f"after the measured calls of {name}")
        row["pool_new_blocks"], row["pool_refusals"] = (after[0] - before[0], after[1] - before[1])
        py_reps = reps if small else max(2, reps // 2)
        row["py_floor"] = python_round_trip(FLOOR_PORT, kernel, shapes, params, py_reps)
        row["py_server"] = python_round_trip(SERVER_PORT, kernel, shapes, params, py_reps)
        report["cases"].append(row)
        print_row(row, kernel, shapes)


def shm_cases() -> list[tuple[str, str, dict[str, list[int]], dict[str, str]]]:
    qkv = {name: [1, 4096, 16, 128] for name in ("q", "k", "v")}
    return cases([8]) + [("flash_attention 12 MB, S 4096, not causal", "flash_attention", qkv,
                          {"causal": "false"})]


def run_shm(report: dict[str, Any], compare: list[int]) -> None:
    """Concurrency 8 through a system shared-memory region, at each lane count."""
    tiny = cli_bench(FLOOR_PORT, "mean_pooling", {"x": [1, 16, 64]}, {}, 8, 0, duration="5s")
    transport = tiny.get("throughput_rps", float("nan"))
    report["shm_transport_rps"] = transport
    print(f"\n# transport bound (grpc floor, tiny call, concurrency 8): {transport:.0f} req/s")
    print("\n| shared memory, concurrency 8 | lanes | req/s | copies+kernel per second | h2d us "
          "| kernel us | d2h us | GPU bound serial / overlapped | req/s / min(transport, "
          "GPU overlapped) |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    serial: dict[str, dict[str, float]] = {}  # each case's fields at the first lane count
    shm = ("--shared-memory", "system")
    for lanes in compare:
        server = start(server_command(lanes), SERVER_PORT)
        try:
            for name, kernel, shapes, params in shm_cases():
                cli_bench(SERVER_PORT, kernel, shapes, params, 3, 6, extra=shm)  # streams, pool
                result = cli_bench(SERVER_PORT, kernel, shapes, params, 8, 0, duration="6s",
                                   extra=shm)
                report["shm"].append({"name": name, "lanes": lanes, "result": result})
                if "error" in result:
                    print(f"| {name} | {lanes} | error {result['error']} |", flush=True)
                    continue
                mean = result["server_mean"]
                stages = [mean["h2d_us"], mean["kernel_us"], mean["d2h_us"]]
                base = serial.setdefault(name, {"sum": sum(stages), "max": max(stages)})
                # GPU bounds from the first lane count's stages (with 1 lane: no overlap).
                bound_serial = 1e6 / base["sum"] if base["sum"] else float("inf")
                bound_overlap = 1e6 / base["max"] if base["max"] else float("inf")
                rps = result["throughput_rps"]
                print(f"| {name} | {lanes} | {rps:.0f} | {overlap(result):.2f} | "
                      f"{stages[0]:.0f} | {stages[1]:.0f} | {stages[2]:.0f} | "
                      f"{bound_serial:.0f} / {bound_overlap:.0f} | "
                      f"{rps / min(transport, bound_overlap):.2f} |", flush=True)
        finally:
            stop(server)


def run_mixed(report: dict[str, Any], lanes: int) -> None:
    """Tiny calls at concurrency 1 while four clients send 256 MB attention calls."""
    name, kernel, shapes, params = cases([256])[1]
    command = ["kernelserve", "--target", f"127.0.0.1:{SERVER_PORT}", "--json", "--deadline",
               "120s", "bench", kernel, "--platform", PLATFORM, "--concurrency", "4",
               "--duration", "9s"]
    for input_name, shape in shapes.items():
        command += ["--shape", f"{input_name}=f16:{','.join(map(str, shape))}"]
    command += ["--param", "causal=true"]
    large = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)  # the large calls under way
    tiny = cli_bench(SERVER_PORT, "mean_pooling", {"x": [1, 16, 64]}, {}, 1, 0, duration="6s")
    out, err = large.communicate(timeout=300)
    large_result = json.loads(out) if large.returncode == 0 else {"error": err[-300:]}
    report["mixed"].append({"lanes": lanes, "tiny": tiny, "large": large_result})
    if "error" in tiny or "error" in large_result:
        print(f"| {name} | {lanes} | error {tiny.get('error', '')} {large_result.get('error', '')}")
        return
    latency = tiny["latency_us"]
    print(f"| {name} x4 | {lanes} | {latency['p50'] / 1e3:.2f} | {latency['p90'] / 1e3:.2f} | "
          f"{latency['p99'] / 1e3:.2f} | {tiny['throughput_rps']:.0f} | "
          f"{large_result['throughput_rps']:.1f} |", flush=True)


def print_row(row: dict[str, Any], kernel: str, shapes: dict[str, list[int]]) -> None:
    floor, server = row["cli_floor"], row["cli_server"]
    if "error" in floor or "error" in server:
        print(f"| {row['name']} | error: {floor.get('error', '')} {server.get('error', '')} |")
        return
    mean = server["server_mean"]
    out_bytes = (2 * int(np.prod(shapes["q"])) if kernel == "flash_attention"
                 else row["bytes_in"] // int(np.prod(shapes["x"][1:2])))
    gbps = lambda b, us: f"{b / us / 1e3:.1f}" if us > 0 else "-"
    ms = lambda us: f"{us / 1e3:.2f}"
    fp50, sp50 = floor["latency_us"]["p50"], server["latency_us"]["p50"]
    pf, ps = row["py_floor"]["p50_ms"], row["py_server"]["p50_ms"]
    print(f"| {row['name']} | {row['bytes_in'] / 1e6:.1f} / {out_bytes / 1e6:.2f} | {ms(fp50)} | "
          f"{ms(sp50)} | {sp50 / fp50:.2f} | {ms(mean['recv_us'])} | {ms(mean['h2d_us'])} "
          f"({gbps(row['bytes_in'], mean['h2d_us'])}) | {ms(mean['kernel_us'])} | "
          f"{ms(mean['d2h_us'])} ({gbps(out_bytes, mean['d2h_us'])}) | {ms(mean['total_us'])} | "
          f"{pf:.2f} | {ps:.2f} | {ps / pf:.2f} | {row['pool_new_blocks']:.0f} / "
          f"{row['pool_refusals']:.0f} |", flush=True)


def run_concurrent(report: dict[str, Any], label: str, port: int, name: str, kernel: str,
                   shapes: dict[str, list[int]], params: dict[str, str]) -> None:
    result = cli_bench(port, kernel, shapes, params, 8, 0, duration="6s")
    result.update(label=label, name=name)
    report["concurrency"].append(result)
    if "error" in result:
        print(f"| {name}, {label} | error {result['error']} |")
        return
    busy = "-" if port == FLOOR_PORT else f"{overlap(result):.2f}"
    print(f"| {name} | {label} | {result['throughput_rps']:.0f} | "
          f"{result['throughput_rps'] * nbytes(shapes) / 1e9:.2f} | {busy} |", flush=True)


if __name__ == "__main__":
    main()
