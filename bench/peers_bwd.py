"""PyTorch peers of flash_attention_bwd: torch.autograd through scaled_dot_product_attention.

For each case of the JSON's "attention_bwd" list (kernelserve-gpu-bench --backward), runs the
forward once under the flash and the cuDNN backends and times only the backward
(torch.autograd.grad of q, k and v for a random dout, the graph kept), in TFLOP/s at the same
FLOP count as ours (2.5x the forward's). The table has ours as the heuristic picks, tuned,
the best of the own kernels and of cuDNN's plans, and the heuristic's config with
deterministic=false. GQA runs with K and V expanded to the query heads
before they require grad, as in the forward table, so torch's time leaves out the sum over each
group that ours includes. Each torch backend's backward also runs twice more on the same
inputs: "same bits" says whether dq, dk and dv came out identical (a backend that sums in any
order differs), so the deterministic columns are read against peers of the same kind.
"""
import sys

import torch

from peers import median_ms


def sdpa_bwd_ms(case, backend, iters):
    """(median ms of the backward of torch SDPA under `backend`, whether two more backwards
    gave the same bits), or (None, None) when it cannot run."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[case["dtype"]]
    b, s, hq, hkv, d = (case["batch"], case["seq_len"], case["heads_q"], case["heads_kv"],
                        case["head_dim"])
    g = torch.Generator(device="cuda").manual_seed(2)
    rand = lambda h: (torch.rand((b, h, s, d), generator=g, device="cuda") * 2 - 1).to(dtype)
    q, k, v, dout = rand(hq), rand(hkv), rand(hkv), rand(hq)
    if hkv != hq:
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    try:
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"])
            grads = lambda i=0: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            first, second = grads(), grads()
            same = all(torch.equal(x, y) for x, y in zip(first, second))
            del first, second
            return median_ms(grads, iters), same
    except RuntimeError as e:
        print(f"{case['name']}: backward {backend}: {e}", file=sys.stderr)
        return None, None


def attention_bwd_table(ours, iters, result):
    """Markdown lines of the backward table; the numbers go to result["attention_bwd"]."""
    from torch.nn.attention import SDPBackend
    cases = ours.get("attention_bwd", [])
    if not cases:
        return []
    lines = ["", "| backward case | ours heuristic | ours tuned | own kernels best | "
             "own, deterministic=false | cuDNN plans best | ours, deterministic=false | "
             "torch flash | torch cuDNN | own / flash | own any order / flash | tuned / flash | "
             "tuned / cuDNN | any order / cuDNN | torch same bits (flash / cuDNN) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: "n/a" if x is None else f"{x:.1f}"
    result["attention_bwd"] = []
    for case in cases:
        tf = lambda ms: None if ms is None else case["flops"] / (ms * 1e-3) / 1e12
        flash_ms, flash_same = sdpa_bwd_ms(case, SDPBackend.FLASH_ATTENTION, iters)
        cudnn_ms, cudnn_same = sdpa_bwd_ms(case, SDPBackend.CUDNN_ATTENTION, iters)
        flash, cudnn = tf(flash_ms), tf(cudnn_ms)
        bits = lambda same: "n/a" if same is None else ("yes" if same else "no")
        torch.cuda.empty_cache()
        ours_h, ours_t = case["heuristic"]["TFLOPs"], case["tuned"]["TFLOPs"]
        own, plans = case["best_own"]["TFLOPs"] or None, case["best_cudnn"]["TFLOPs"] or None
        any_order = case["any_order"]["TFLOPs"] or None
        own_any = case.get("own_any_order", {}).get("TFLOPs") or None
        ratio = lambda a, x: "n/a" if a is None or x is None else f"{a / x:.2f}x"
        result["attention_bwd"].append({"name": case["name"], "flash_TFLOPs": flash,
                                        "cudnn_TFLOPs": cudnn, "ours_heuristic_TFLOPs": ours_h,
                                        "ours_tuned_TFLOPs": ours_t, "own_TFLOPs": own,
                                        "cudnn_plans_TFLOPs": plans,
                                        "any_order_TFLOPs": any_order,
                                        "own_any_order_TFLOPs": own_any,
                                        "flash_same_bits": flash_same,
                                        "cudnn_same_bits": cudnn_same})
        lines.append(f"| {case['name']} | {ours_h:.1f} | {ours_t:.1f} | {fmt(own)} | "
                     f"{fmt(own_any)} | {fmt(plans)} | {fmt(any_order)} | {fmt(flash)} | "
                     f"{fmt(cudnn)} | {ratio(own, flash)} | {ratio(own_any, flash)} | "
                     f"{ratio(ours_t, flash)} | {ratio(ours_t, cudnn)} | "
                     f"{ratio(any_order, cudnn)} | {bits(flash_same)} / {bits(cudnn_same)} |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines.append("")
    for case in cases:
        lines.append(f"- backward {case['name']}: heuristic {{{case['heuristic']['config']}}}, "
                     f"tuned {{{case['tuned']['config']}}}")
    return lines


def sdpa_dbias_ms(case, iters):
    """Median ms of torch's backward through SDPA with a float mask that requires grad (the
    memory-efficient backend, the one that returns the mask's gradient): dq, dk, dv and the
    bias's gradient. Causal: the bias with -inf above the diagonal (torch takes no causal flag
    beside a mask). None when it cannot run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    b, s, h, d = case["batch"], case["seq_len"], case["heads_q"], case["head_dim"]
    g = torch.Generator(device="cuda").manual_seed(3)
    rand = lambda *shape: torch.rand(shape, generator=g, device="cuda") * 2 - 1
    q, k, v, dout = (rand(b, h, s, d).to(torch.bfloat16) for _ in range(4))
    bias = rand(1, h, s, s)
    q, k, v, bias = (t.requires_grad_() for t in (q, k, v, bias))
    try:
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            mask = bias.to(torch.bfloat16)
            if case["causal"]:
                above = torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1)
                mask = mask.masked_fill(above, float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return median_ms(lambda i: torch.autograd.grad(out, (q, k, v, bias), dout,
                                                           retain_graph=True), iters)
    except RuntimeError as e:
        print(f"{case['name']}: backward with dbias: {e}", file=sys.stderr)
        return None


def attention_dbias_table(ours, iters, result):
    """Markdown lines of the dbias table (ours: "attention_dbias" of kernelserve-gpu-bench)."""
    cases = ours.get("attention_dbias", [])
    if not cases:
        return []
    lines = ["", "| dbias case | own, no dbias | own, dbias | cuDNN best, no dbias | "
             "torch efficient, with dbias | own dbias / torch | own dbias / own no dbias |",
             "|---|---|---|---|---|---|---|"]
    fmt = lambda x: "n/a" if not x else f"{x:.1f}"
    ratio = lambda a, x: "n/a" if not a or not x else f"{a / x:.2f}x"
    result["attention_dbias"] = []
    for case in cases:
        ms = sdpa_dbias_ms(case, iters)
        torch_tf = None if ms is None else case["flops"] / (ms * 1e-3) / 1e12
        torch.cuda.empty_cache()
        own, dbias, cudnn = (case[k]["TFLOPs"] for k in ("own", "own_dbias", "cudnn"))
        result["attention_dbias"].append({"name": case["name"], "own_TFLOPs": own,
                                          "own_dbias_TFLOPs": dbias, "cudnn_TFLOPs": cudnn,
                                          "torch_dbias_TFLOPs": torch_tf})
        lines.append(f"| {case['name']} | {fmt(own)} | {fmt(dbias)} | {fmt(cudnn)} | "
                     f"{fmt(torch_tf)} | {ratio(dbias, torch_tf)} | {ratio(dbias, own)} |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines.append("")
    lines.append("(TFLOP/s of the backward's FLOPs without dbias, 2.5x the forward's, in every "
                 "column; the mask of torch's causal case does not let it skip tiles.)")
    return lines
