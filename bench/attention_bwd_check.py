#!/usr/bin/env python3
"""End to end on a GPU host: the service's attention gradient against torch.autograd.

Makes random f16 q, k, v and dout with torch, sends them to a running kernelserve-server with
the command line client (flash_attention with return_lse, then flash_attention_bwd on its out
and lse: the VJP as a remote client runs it; the backward with the server's choice of config,
then with each --config), and compares out, dq, dk and dv with torch's float32 forward and
autograd on the same inputs (relative L2 error; f16 rounding allows about 1e-3). Prints one
line per call with the platform and config the server reported; exits 1 when an error exceeds
--tolerance or a call fails.

  python3 bench/attention_bwd_check.py --cli build/client/kernelserve --target 127.0.0.1:50051
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

# (B, S, Hq, Hkv, D, causal)
CASES = [(2, 1024, 8, 8, 128, True), (2, 768, 8, 2, 64, False), (1, 2048, 16, 16, 128, False)]


def run(cli, target, kernel, inputs, params, out_dir, config=None):
    """One `kernelserve run` call (with `config`, an explicit config); returns its JSON answer."""
    cmd = [cli, "--target", target, "--json", "run", kernel, "--output-dir", out_dir]
    if config:
        cmd += ["--config", config]
    for name, path in inputs.items():
        cmd += ["--input", f"{name}={path}"]
    for key, value in params.items():
        cmd += ["--param", f"{key}={value}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kernel}: exit {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def rel(got, want):
    got, want = torch.as_tensor(got).float(), want.detach().float().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def check(cli, target, case, folder, seed, config):
    b, s, hq, hkv, d, causal = case
    g = torch.Generator().manual_seed(seed)
    make = lambda h: (torch.rand((b, s, h, d), generator=g) * 2 - 1).half()
    q, k, v, dout = make(hq), make(hkv), make(hkv), make(hq)
    paths = {}
    for name, t in {"q": q, "k": k, "v": v, "dout": dout}.items():
        paths[name] = os.path.join(folder, f"{name}.npy")
        np.save(paths[name], t.numpy())
    fwd_dir, bwd_dir = os.path.join(folder, "fwd"), os.path.join(folder, "bwd")
    params = {"causal": str(causal).lower()}
    run(cli, target, "flash_attention", {n: paths[n] for n in "qkv"},
        {**params, "return_lse": "true"}, fwd_dir)
    answer = run(cli, target, "flash_attention_bwd",
                 {**paths, "out": os.path.join(fwd_dir, "out.npy"),
                  "lse": os.path.join(fwd_dir, "lse.npy")}, params, bwd_dir, config)
    # torch: [B,H,S,D], float32, K and V expanded to the query heads (their grads summed back)
    qt, kt, vt = (t.cuda().float().transpose(1, 2).requires_grad_() for t in (q, k, v))
    rep = hq // hkv
    out = F.scaled_dot_product_attention(qt, kt.repeat_interleave(rep, 1),
                                         vt.repeat_interleave(rep, 1), is_causal=causal)
    dq, dk, dv = torch.autograd.grad(out, (qt, kt, vt), dout.cuda().float().transpose(1, 2))
    tr = lambda x: x.transpose(1, 2)
    errors = {"out": rel(np.load(os.path.join(fwd_dir, "out.npy")).astype(np.float32), tr(out)),
              "dq": rel(np.load(os.path.join(bwd_dir, "dq.npy")).astype(np.float32), tr(dq)),
              "dk": rel(np.load(os.path.join(bwd_dir, "dk.npy")).astype(np.float32), tr(dk)),
              "dv": rel(np.load(os.path.join(bwd_dir, "dv.npy")).astype(np.float32), tr(dv))}
    config = {k: v for k, v in answer["config"].items() if v}
    served = f"served on {answer['platform']}, config {config} ({answer['source']})"
    return errors, served


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", required=True, help="the kernelserve command line client")
    parser.add_argument("--target", default="127.0.0.1:50051")
    parser.add_argument("--tolerance", type=float, default=1e-2)
    parser.add_argument("--config", action="append", default=[],
                        help="also run the backward with this explicit config (repeats), e.g. "
                             "block_q=64,block_k=64 for the own CUDA kernels")
    args = parser.parse_args()
    failed = False
    for i, (case, config) in enumerate((c, k) for c in CASES for k in [None] + args.config):
        with tempfile.TemporaryDirectory() as folder:
            try:
                errors, served = check(args.cli, args.target, case, folder, 100 + i, config)
            except RuntimeError as e:
                print(f"case {case}: FAILED {e}")
                failed = True
                continue
        worst = max(errors.values())
        failed |= not worst < args.tolerance
        shown = ", ".join(f"{name} {err:.2e}" for name, err in errors.items())
        print(f"B,S,Hq,Hkv,D,causal={case}: relative L2 error {shown} "
              f"({'ok' if worst < args.tolerance else 'TOO LARGE'}); {served}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
