"""numpy references of the kernels, computed in float64 (semantics of kernels/*/*_kernel.h)."""

import numpy as np


def mean_pooling(x, mask=None, cu_seqlens=None):
    """x [B,S,H] (mask [B,S]) -> [B,H]; x [T,H] with cu_seqlens [N+1] -> [N,H]. A sequence
    with no counted row gives zeros."""
    x = np.asarray(x, dtype=np.float64)
    if cu_seqlens is not None:
        rows = [x[a:b] for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:])]
        return np.stack([r.mean(axis=0) if len(r) else np.zeros(x.shape[-1]) for r in rows])
    if mask is None:
        return x.mean(axis=1)
    weights = (np.asarray(mask) != 0).astype(np.float64)[:, :, None]
    counts = weights.sum(axis=1)
    return np.where(counts > 0, (x * weights).sum(axis=1) / np.maximum(counts, 1), 0.0)


def rms_norm(x, weight=None, eps=1e-6):
    """The example kernel (tests/support/example_kernel.h): each row of x [..., H] over its root
    mean square plus eps, times weight [H] (ones when None)."""
    x = np.asarray(x, dtype=np.float64)
    weight = np.ones(x.shape[-1]) if weight is None else np.asarray(weight, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def attention(q, k, v, causal=False, softmax_scale=0.0, window_left=None, window_right=None,
              logits_soft_cap=0.0):
    """q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D] -> out [B,Sq,Hq,D], lse [B,Hq,Sq]. Query i sees key
    j per causal (j <= i + Sk - Sq) and the window around that diagonal; a row that sees no
    key gives zeros and lse -inf."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    _, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // hkv, axis=2)  # query head h reads kv head h // (Hq / Hkv)
    v = np.repeat(v, hq // hkv, axis=2)
    scale = softmax_scale or 1.0 / np.sqrt(d)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if logits_soft_cap:
        s = logits_soft_cap * np.tanh(s / logits_soft_cap)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diagonal = i + sk - sq
    allowed = np.ones((sq, sk), dtype=bool)
    if causal:
        allowed &= j <= diagonal
    if window_left is not None:
        allowed &= j >= diagonal - window_left
    if window_right is not None:
        allowed &= j <= diagonal + window_right
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    total = p.sum(axis=-1)  # [B,H,Sq]
    out = np.einsum("bhqk,bkhd->bqhd", p, v)
    denom = np.transpose(total, (0, 2, 1))[..., None]  # [B,Sq,H,1]
    out = np.where(denom > 0, out / np.where(denom > 0, denom, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, m[..., 0] + np.log(total), -np.inf)
    return out, lse
