#!/usr/bin/env python3
"""Peers of the paged attention kernel on this GPU, for docs/PERFORMANCE.md (run beside
kernelserve's own numbers in the same device session): the device copy bandwidth (the
roofline: bytes read plus written per second by a 1 GiB device-to-device copy), and torch's
scaled_dot_product_attention on one decode step over the cache gathered into a contiguous
tensor, timed without the gather (what a dense cache would give) and with it (what a paged
cache costs torch). bf16, Hq 32 / Hkv 8, D 128, pages of 16 tokens in a shuffled block table.
Needs PyTorch with CUDA; writes $OUT/paged_peer.json."""
import json
import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

DEV = "cuda"
SHAPES = ((1, 4096), (16, 4096), (32, 4096), (64, 2048), (16, 16384), (1, 65536))


def median_ms(fn, iters=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth():
    x = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    tbs = 2 * x.numel() / (median_ms(lambda: y.copy_(x)) * 1e-3) / 1e12
    del x, y
    torch.cuda.empty_cache()
    return tbs


def row(batch, tokens, hq=32, hkv=8, d=128, page=16):
    pages_per_seq = tokens // page
    num_pages = batch * pages_per_seq
    k_cache = torch.randn(num_pages, page, hkv, d, device=DEV, dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    table = torch.randperm(num_pages, device=DEV).reshape(batch, pages_per_seq)
    q = torch.randn(batch, hq, 1, d, device=DEV, dtype=torch.bfloat16)

    def gather(cache):  # [B, Hkv, L, D]
        return cache[table].reshape(batch, tokens, hkv, d).transpose(1, 2)

    k, v = gather(k_cache), gather(v_cache)
    kv_bytes = 2 * batch * tokens * hkv * d * 2
    out = {"B": batch, "tokens": tokens, "kv_MB": round(kv_bytes / 1e6, 1)}
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                t = median_ms(lambda: sdpa(q, k, v, enable_gqa=True))
                tg = median_ms(lambda: sdpa(q, gather(k_cache), gather(v_cache), enable_gqa=True))
            out[name + "_us"] = round(t * 1e3, 1)
            out[name + "_TBs"] = round(kv_bytes / (t * 1e-3) / 1e12, 3)
            out[name + "_with_gather_us"] = round(tg * 1e3, 1)
        except Exception as error:  # noqa: BLE001 (a backend that refuses the case)
            out[name + "_us"] = None
            out[name + "_error"] = str(error).splitlines()[0][:120]
    del k_cache, v_cache, k, v
    torch.cuda.empty_cache()
    return out


def main():
    result = {"device": torch.cuda.get_device_name(), "copy_TBs_read_plus_write": copy_bandwidth(),
              "rows": []}
    print(json.dumps({"copy_TBs_read_plus_write": round(result["copy_TBs_read_plus_write"], 3)}))
    for batch, tokens in SHAPES:
        result["rows"].append(row(batch, tokens))
        print(json.dumps(result["rows"][-1]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "paged_peer.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
