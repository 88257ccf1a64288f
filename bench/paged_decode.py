#!/usr/bin/env python3
"""A remote decode loop through the Python client: the paged KV cache resident on the server
against sending it with every step (the only way before resident caches), beside the bare gRPC
floor of the step's message (kernelserve-grpc-floor answering the same request), in one run.

    python3 bench/paged_decode.py --target 127.0.0.1:50051 --floor 127.0.0.1:50300

16 sequences (--batch) whose caches hold --tokens tokens, grown by one token per step for
--steps steps: each step sends q [B,1,Hq,D], the new k, v [B,1,Hkv,D], the block table and the
lengths; the server appends and attends in one paged_attention call. Reports per-step p50 and
p90 (ms), the server's total (timing.total_us) and kernel time, the floor's p50 for the same
message, the bound floor + server total + 150 us, and the inline path's p50 (a few steps: its
message carries both caches). bf16, Hq 32 / Hkv 8, D 128, pages of 16 tokens, shuffled."""
import argparse
import json
import statistics
import time

import numpy as np

import kernelserve
from kernelserve.v1 import kernel_service_pb2 as pb
from kernelserve.v1 import kernel_service_pb2_grpc as pb_grpc


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def bf16(rng, shape):
    return rng.uniform(-1, 1, shape).astype(np.float32).astype(kernelserve.bfloat16)


def floor_p50(target, request, reps):
    """p50 (ms) of the floor server answering `request` through grpcio."""
    import grpc
    channel = grpc.insecure_channel(target, options=[("grpc.max_send_message_length", -1),
                                                     ("grpc.max_receive_message_length", -1)])
    stub = pb_grpc.KernelServiceStub(channel)
    times = []
    for i in range(reps + 3):
        start = time.perf_counter()
        stub.Execute(request, timeout=60)
        if i >= 3:
            times.append((time.perf_counter() - start) * 1e3)
    channel.close()
    return statistics.median(times)


def step_request(q, k, v, table, lens):
    """The wire request of one step with the caches named as resident tensors."""
    request = pb.ExecuteRequest(kernel="paged_attention")
    for name, array in (("q", q), ("k", k), ("v", v), ("block_table", table),
                        ("cache_seqlens", lens)):
        tensor = request.inputs[name]
        tensor.dtype = {"bfloat16": pb.DTYPE_BF16, "int32": pb.DTYPE_I32}[array.dtype.name]
        tensor.shape.extend(array.shape)
        tensor.data = np.ascontiguousarray(array).tobytes()
    request.inputs["k_cache"].ref.tensor = "bench-k-pages"
    request.inputs["v_cache"].ref.tensor = "bench-v-pages"
    return request


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--floor", default="", help="a kernelserve-grpc-floor to measure")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--inline-steps", type=int, default=8)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    hq, hkv, d, page = 32, 8, 128, 16
    b = args.batch
    pages_per_seq = (args.tokens + args.steps + page - 1) // page
    pages = b * pages_per_seq
    rng = np.random.default_rng(1)
    table = rng.permutation(pages).astype(np.int32).reshape(b, pages_per_seq)
    lens = np.full(b, args.tokens, np.int32)
    result = {"batch": b, "tokens": args.tokens, "steps": args.steps, "pages": pages}
    with kernelserve.Client(args.target) as client:
        k_pages = bf16(rng, (pages, page, hkv, d))
        v_pages = bf16(rng, (pages, page, hkv, d))
        kc = client.create_tensor(k_pages, name="bench-k-pages")
        vc = client.create_tensor(v_pages, name="bench-v-pages")
        result["cache_MB_each"] = round(k_pages.nbytes / 1e6, 1)
        times, totals, kernels = [], [], []
        for step in range(args.steps):
            lens = lens + 1
            q, k, v = bf16(rng, (b, 1, hq, d)), bf16(rng, (b, 1, hkv, d)), bf16(rng, (b, 1, hkv, d))
            start = time.perf_counter()
            r = client.paged_attention(q, kc, vc, table, lens, k=k, v=v)
            times.append((time.perf_counter() - start) * 1e3)
            totals.append(r.timings["total_us"] / 1e3)
            kernels.append(r.timings["kernel_us"] / 1e3)
        warm = slice(8, None)
        result["resident"] = {"p50_ms": statistics.median(times[warm]),
                              "p90_ms": percentile(times[warm], 0.9),
                              "server_total_ms": statistics.median(totals[warm]),
                              "kernel_ms": statistics.median(kernels[warm]),
                              "platform": r.platform, "config": str(r.config)}
        inline = []
        host_k, host_v = kc.read(), vc.read()
        for step in range(args.inline_steps + 2):
            q, k, v = bf16(rng, (b, 1, hq, d)), bf16(rng, (b, 1, hkv, d)), bf16(rng, (b, 1, hkv, d))
            start = time.perf_counter()
            client.paged_attention(q, host_k, host_v, table, lens, k=k, v=v)
            if step >= 2:
                inline.append((time.perf_counter() - start) * 1e3)
        result["inline_p50_ms"] = statistics.median(inline)
        kc.delete()
        vc.delete()
    if args.floor:
        result["floor_p50_ms"] = floor_p50(args.floor, step_request(q, k, v, table, lens), 64)
        result["bound_ms"] = (result["floor_p50_ms"] + result["resident"]["server_total_ms"]
                              + 0.150)
        result["bound_met"] = result["resident"]["p50_ms"] <= result["bound_ms"]
    result["inline_over_resident"] = result["inline_p50_ms"] / result["resident"]["p50_ms"]
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
