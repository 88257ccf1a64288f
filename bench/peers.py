#!/usr/bin/env python3
"""PyTorch peers of the mean pooling benchmark, timed on the same GPU in the same run.

Reads the JSON that kernelserve-gpu-bench wrote (--ours), times the same cases with torch
(dense: x.mean(1); masked: (x * mask).sum(1) / len; varlen: torch.segment_reduce(x, "mean")),
with the same lengths and the same number of rotated input copies, and prints one markdown
table with both sides and their ratios. Writes the table and the numbers under --out.

Flash attention cases (the JSON's "attention" list) are timed with
torch.nn.functional.scaled_dot_product_attention under its flash and cuDNN backends (varlen: the
flash backend's varlen entry point when this torch has one), and printed as a second table in
TFLOP/s (4*B*Hq*Sq*Sk*D, halved when causal). The "attention_bwd" list gets a third table, of
torch's backward (peers_bwd.py).
"""
import argparse
import json
import os
import sys

import torch

WARMUP = 5


def median_ms(fn, iters):
    """Median of `iters` runs of fn() timed with CUDA events, after WARMUP runs."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(WARMUP + iters):
        start.record()
        fn(i)
        stop.record()
        torch.cuda.synchronize()
        if i >= WARMUP:
            times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def random_x(shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.rand(shape, generator=g, device="cuda", dtype=torch.float32) * 2 - 0.5).to(dtype)


def torch_case(case, iters):
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[case["dtype"]]
    b, s, h = case["batch"], case["seq_len"], case["hidden"]
    copies = case["buffers"]
    form = case["form"]  # 0 dense, 1 masked, 2 varlen
    if form == 2:
        lens = torch.tensor(case["lengths"], device="cuda", dtype=torch.int64)
        xs = [random_x((int(lens.sum()), h), dtype, 10 + i) for i in range(copies)]
        ms = median_ms(lambda i: torch.segment_reduce(xs[i % copies], "mean", lengths=lens), iters)
        name = "torch.segment_reduce"
    else:
        xs = [random_x((b, s, h), dtype, 10 + i) for i in range(copies)]
        if form == 0:
            ms = median_ms(lambda i: xs[i % copies].mean(1), iters)
            name = "x.mean(1)"
        else:
            lens = torch.tensor(case["lengths"], device="cuda", dtype=torch.int64)
            mask = torch.arange(s, device="cuda")[None, :] < lens[:, None]
            m = mask[..., None]
            den = lens[:, None].to(dtype)
            ms = median_ms(lambda i: (xs[i % copies] * m).sum(1) / den, iters)
            name = "(x*mask).sum(1)/len"
    del xs
    torch.cuda.empty_cache()
    return name, ms * 1e3


def sdpa_ms(case, backend, iters):
    """Median ms of torch SDPA on the case under `backend`, or None when it cannot run it."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[case["dtype"]]
    hq, hkv, d = case["heads_q"], case["heads_kv"], case["head_dim"]
    if case["lengths"]:
        return None  # SDPA has no varlen form; see varlen_ms
    b, s = case["batch"], case["seq_len"]
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.rand((b, hq, s, d), generator=g, device="cuda").to(dtype) * 2 - 1
    k = torch.rand((b, hkv, s, d), generator=g, device="cuda").to(dtype) * 2 - 1
    v = torch.rand((b, hkv, s, d), generator=g, device="cuda").to(dtype) * 2 - 1
    if hkv != hq:  # the backends take equal heads; GQA as torch runs it best: expanded K/V
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    try:
        with sdpa_kernel(backend):
            return median_ms(lambda i: F.scaled_dot_product_attention(
                q, k, v, is_causal=case["causal"]), iters)
    except RuntimeError as e:
        print(f"{case['name']}: {backend}: {e}", file=sys.stderr)
        return None


def varlen_ms(case, iters):
    """Median ms of torch's flash varlen forward on the case, or None where torch lacks it."""
    if not case["lengths"]:
        return None
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[case["dtype"]]
    lens = torch.tensor(case["lengths"], device="cuda", dtype=torch.int32)
    cu = torch.zeros(len(case["lengths"]) + 1, device="cuda", dtype=torch.int32)
    cu[1:] = torch.cumsum(lens, 0)
    total, hq, d = int(cu[-1]), case["heads_q"], case["head_dim"]
    q = (torch.rand((total, hq, d), device="cuda") * 2 - 1).to(dtype)
    k = (torch.rand((total, case["heads_kv"], d), device="cuda") * 2 - 1).to(dtype)
    v = (torch.rand((total, case["heads_kv"], d), device="cuda") * 2 - 1).to(dtype)
    longest = max(case["lengths"])
    try:
        op = torch.ops.aten._flash_attention_forward
        return median_ms(lambda i: op(q, k, v, cu, cu, longest, longest, 0.0, case["causal"],
                                      False), iters)
    except (RuntimeError, AttributeError, TypeError) as e:
        print(f"{case['name']}: varlen flash: {e}", file=sys.stderr)
        return None


def attention_table(ours, iters, result):
    from torch.nn.attention import SDPBackend
    lines = ["", "| case | ours heuristic TFLOP/s | ours tuned TFLOP/s | cuda platform best | "
             "cudnn platform best | torch flash TFLOP/s | torch cuDNN TFLOP/s | tuned / flash | "
             "tuned / cuDNN |", "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: "n/a" if x is None else f"{x:.1f}"
    for case in ours.get("attention", []):
        flops = case["flops"]
        tf = lambda ms: None if ms is None else flops / (ms * 1e-3) / 1e12
        if case.get("option"):
            flash, cudnn = None, None  # soft cap, window, segments, bias: against our plain case
        elif case["lengths"]:
            flash, cudnn = tf(varlen_ms(case, iters)), None
        else:
            flash = tf(sdpa_ms(case, SDPBackend.FLASH_ATTENTION, iters))
            cudnn = tf(sdpa_ms(case, SDPBackend.CUDNN_ATTENTION, iters))
        torch.cuda.empty_cache()
        ours_h, ours_t = case["heuristic"]["TFLOPs"], case["tuned"]["TFLOPs"]
        ratio = lambda x: "n/a" if x is None else f"{ours_t / x:.2f}x"
        result["attention"].append({"name": case["name"], "flash_TFLOPs": flash,
                                    "cudnn_TFLOPs": cudnn, "ours_heuristic_TFLOPs": ours_h,
                                    "ours_tuned_TFLOPs": ours_t})
        own, plat = case.get("cuda_TFLOPs") or None, case.get("cudnn_TFLOPs") or None
        result["attention"][-1].update({"cuda_TFLOPs": own, "cudnn_platform_TFLOPs": plat})
        lines.append(f"| {case['name']} | {ours_h:.1f} | {ours_t:.1f} | {fmt(own)} | {fmt(plat)} | "
                     f"{fmt(flash)} | {fmt(cudnn)} | {ratio(flash)} | {ratio(cudnn)} |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines.append("")
    for case in ours.get("attention", []):
        lines.append(f"- {case['name']}: heuristic {{{case['heuristic']['config']}}}, "
                     f"tuned {{{case['tuned']['config']}}}")
    return lines


def copy_tbps(iters):
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    ms = median_ms(lambda i: b.copy_(a), iters)
    return 2 * n / (ms * 1e-3) / 1e12


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ours", required=True, help="JSON from kernelserve-gpu-bench --json")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for results")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    with open(args.ours) as f:
        ours = json.load(f)
    torch.manual_seed(0)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "torch_copy_TBps": copy_tbps(20), "ours": ours, "cases": []}
    lines = [
        f"device {result['device']}, torch {result['torch']}, {ours['date']}",
        f"copy bandwidth (read + write): ours {ours['copy_TBps']:.3f} TB/s, "
        f"torch {result['torch_copy_TBps']:.3f} TB/s",
        "",
        "| case | ours heuristic us | ours tuned us | read TB/s (tuned) | / copy | torch op | "
        "torch us | torch TB/s | speedup heuristic | speedup tuned |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in ours.get("cases", []):
        op, torch_us = torch_case(case, args.iters)
        heur_us, tuned_us = case["heuristic"]["us"], case["tuned"]["us"]
        x_bytes = case["x_bytes"]
        row = {"name": case["name"], "torch_op": op, "torch_us": torch_us,
               "torch_TBps": x_bytes / (torch_us * 1e-6) / 1e12,
               "speedup_heuristic": torch_us / heur_us, "speedup_tuned": torch_us / tuned_us}
        result["cases"].append(row)
        lines.append(
            f"| {case['name']} | {heur_us:.1f} | {tuned_us:.1f} | {case['tuned']['read_TBps']:.2f} | "
            f"{case['tuned']['ratio_to_copy']:.2f} | {op} | {torch_us:.1f} | {row['torch_TBps']:.2f} | "
            f"{row['speedup_heuristic']:.2f}x | {row['speedup_tuned']:.2f}x |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines.append("")
    for case in ours.get("cases", []):
        lines.append(f"- {case['name']}: heuristic {{{case['heuristic']['config']}}}, "
                     f"tuned {{{case['tuned']['config']}}}")
    result["attention"] = []
    lines += attention_table(ours, args.iters, result)
    # peers_bwd imports median_ms from here: not at the top.
    from peers_bwd import attention_bwd_table, attention_dbias_table
    lines += attention_bwd_table(ours, args.iters, result)
    lines += attention_dbias_table(ours, args.iters, result)
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
