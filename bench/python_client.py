#!/usr/bin/env python3
"""The Python client's round trip against the C++ CLI's, in interleaved rounds, one server.

    bench/python_client.py --build build [--sizes 0,8,64,256,1000] [--rounds 3] [--reps 5]
                           [--platform cpu] [--server-args "..."] [--out FILE.json]

Starts BUILD/server/kernelserve-server on a free loopback port, then for each size (MB of
mean_pooling f32 input, [MB/4, 1024, 1024]; 0 = a tiny call, [1, 16, 64]) runs, in each round
and in this order:

- cli: `kernelserve bench mean_pooling --requests N` (--shared-memory none; p50 of N calls; the CLI
  sends the same serialized request each time, without copying its bytes);
- native: the Python client with kernelserve._native (the default where it is built; a tiny
  call's request from kernelserve.plain's cached pieces, its Result built when read);
- aio: kernelserve.aio.Client (asyncio; a tiny call's request from kernelserve.plain's pieces
  on its grpc.aio channel, larger calls native in the loop's executor where the extension is
  built), its own event loop a round;
- grpcio: the Python client with native=False (the pure-Python fallback);
- protobuf: native=False with every input put into the message by protobuf, as the client did
  before kernelserve.wire (a620dce and earlier);
- cli-shm: the CLI's bench with --shared-memory system (inputs and outputs in a registered
  region, each call sending references: the documented shm path);
- auto: the Python client as a local user gets it by default (native, and its own shared memory,
  kernelserve.autoshm; inputs copied into the region, outputs copied out, every call);

the paths that take shared memory need a server that serves it (as root:
--server-args=--shared-memory-as-root, or leave them out: --paths cli,native,grpcio,protobuf); 
each Python path timed as the median of N calls after one warm-up, on the same array. Prints,
per size, the median over rounds of each path's p50 and its ratio to the CLI's, with the range
over rounds. Needs the Python package importable (the build's pyenv: BUILD/pyenv/bin/python).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

import kernelserve
from kernelserve import aio, transport, wire

PATHS = ("cli", "native", "aio", "grpcio", "protobuf", "cli-shm", "auto")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shape_of(mb: int) -> tuple[int, int, int]:
    return (1, 16, 64) if mb == 0 else (mb // 4, 1024, 1024)


def wait_serving(target: str, server: subprocess.Popen) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if server.poll() is not None:
            sys.exit(f"kernelserve-server exited with {server.returncode}")
        try:
            with kernelserve.Client(target, timeout=2) as client:
                if client.health() == "SERVING":
                    return
        except kernelserve.KernelserveError:
            time.sleep(0.2)
    sys.exit(f"no server at {target} after 60 s")


def cli_p50(build: str, target: str, mb: int, reps: int, platform: str, shm: str) -> float:
    shape = ",".join(map(str, shape_of(mb)))
    out = subprocess.run(
        [f"{build}/client/kernelserve", "--target", target, "--json", "--deadline", "600s",
         "bench", "mean_pooling", "--shape", f"x=f32:{shape}", "--requests", str(reps + 1),
         "--duration", "3600s", "--shared-memory", shm, "--platform", platform],
        capture_output=True, text=True, check=True).stdout
    return json.loads(out)["latency_us"]["p50"] / 1e3


def python_p50(client: kernelserve.Client, x: np.ndarray, reps: int, platform: str,
               through_protobuf: bool) -> float:
    saved = wire.LARGE_TENSOR_BYTES
    wire.LARGE_TENSOR_BYTES = 1 << 62 if through_protobuf else saved
    try:
        times = []
        for _ in range(reps + 1):
            start = time.perf_counter()
            client.mean_pooling(x, platform=platform)
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times[1:])
    finally:
        wire.LARGE_TENSOR_BYTES = saved


def aio_p50(target: str, x: np.ndarray, reps: int, platform: str, limit: int) -> float:
    async def run() -> float:
        async with aio.Client(target, timeout=600, max_message_bytes=limit,
                              local_shm=False) as client:
            times = []
            for _ in range(reps + 1):  # the first call opens the channel's connection
                start = time.perf_counter()
                await client.mean_pooling(x, platform=platform)
                times.append((time.perf_counter() - start) * 1e3)
            return statistics.median(times[1:])
    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--sizes", default="0,8,64,256,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5, help="calls per path per round (tiny: x40)")
    parser.add_argument("--platform", default="cpu")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--server-args", default="")
    parser.add_argument("--out", default="")
    opts = parser.parse_args()
    if not transport.native_available():
        print(f"note: kernelserve._native is not built ({transport.import_error()})")
    paths = [p for p in opts.paths.split(",") if p != "native" or transport.native_available()]
    port = free_port()
    target = f"127.0.0.1:{port}"
    limit = 2_000_000_000
    server = subprocess.Popen(
        [f"{opts.build}/server/kernelserve-server", f"--listen={target}", "--metrics-listen=off",
         "--cache=memory", f"--max-message-bytes={limit}", *opts.server_args.split()],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results: dict[int, dict[str, list[float]]] = {}
    try:
        wait_serving(target, server)
        native = transport.native_available()
        clients = {"native": kernelserve.Client(target, native=native, timeout=600,
                                                max_message_bytes=limit, local_shm=False),
                   "grpcio": kernelserve.Client(target, native=False, timeout=600,
                                                max_message_bytes=limit, local_shm=False),
                   "auto": kernelserve.Client(target, timeout=600, max_message_bytes=limit)}
        clients["protobuf"] = clients["grpcio"]
        for mb in map(int, opts.sizes.split(",")):
            x = np.random.default_rng(mb).standard_normal(shape_of(mb), dtype=np.float32)
            reps = opts.reps * 40 if mb == 0 else opts.reps
            runs = results.setdefault(mb, {p: [] for p in paths})
            for _ in range(opts.rounds):
                for path in paths:
                    if path == "aio":
                        runs[path].append(aio_p50(target, x, reps, opts.platform, limit))
                    elif path.startswith("cli"):
                        shm = "system" if path == "cli-shm" else "none"
                        runs[path].append(cli_p50(opts.build, target, mb, reps, opts.platform,
                                                  shm))
                    else:
                        runs[path].append(python_p50(clients[path], x, reps, opts.platform,
                                                     path == "protobuf"))
            report(mb, runs)
            del x
    finally:
        server.terminate()
        server.wait()
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump({str(k): v for k, v in results.items()}, f, indent=1)
    return 0


def report(mb: int, runs: dict[str, list[float]]) -> None:
    cli = statistics.median(runs["cli"]) if "cli" in runs else None
    cli_shm = statistics.median(runs["cli-shm"]) if "cli-shm" in runs else None
    parts = []
    for path, values in runs.items():
        mid = statistics.median(values)
        text = f"{path} {mid:.2f} ms [{min(values):.2f}-{max(values):.2f}]"
        base = cli_shm if path == "auto" else cli  # auto against the CLI's shm path
        if base and not path.startswith("cli"):
            text += f" {mid / base:.2f}x"
        parts.append(text)
    label = "tiny" if mb == 0 else f"{mb} MB"
    print(f"{label}: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    sys.exit(main())
