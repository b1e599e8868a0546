"""Decompositions that Inductor applies while tracing, routing CPU matrix products and attention to
Spine's Triton kernels (spine/inductor/matmul.py) when `cpu_backend == "triton"`.

Each entry first offers the operation to Inductor's own decomposition (its small-matrix special cases turn
into pointwise products and reductions, which it generates Triton kernels for), and only otherwise calls
the Triton matmul. Other devices and the C++ CPU backend see Inductor's table unchanged.

They take an operation when Inductor's cpu_backend is "triton" and Spine's driver is the active one, and
its target is not this host (the riscv64 target: ATen's matmul would be x86 code) or spine.inductor.enable()
chose the driver. On the host target without enable(), matrix products stay ATen's, which are native there.
The table entries are added when Inductor's lowerings are imported (spine/aliases.py follows it, and
spine.inductor.install adds them and their cache key, cache_key.py), so a user who sets cpu_backend and
the driver by hand needs nothing more."""
import math

import torch
import torch._inductor.config as inductor_config
import torch._inductor.decomposition as inductor_decomposition

from .matmul import matmul

aten = torch.ops.aten


def routing() -> str:
    """Where CPU matrix products go now: "spine:<target>" or "aten" (also a part of Inductor's cache keys,
    cache_key.py)."""
    if inductor_config.cpu_backend != "triton":
        return "aten"
    from triton.runtime import driver

    from ..driver import CPUDriver
    try:
        active = driver.active
    except RuntimeError:    # no driver chosen and no GPU to default to
        return "aten"
    if isinstance(active, CPUDriver) and (active.products_through_inductor or active.target.name != "host"):
        return f"spine:{active.target.name}"
    return "aten"


def _ours(*tensors):
    return (routing() != "aten"
            and all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float16, torch.bfloat16)
                    for t in tensors))


def mm(a, b, out_dtype=None):
    if out_dtype is not None or not _ours(a, b):
        return NotImplemented
    return matmul(a, b)


def bmm(a, b, out_dtype=None):
    if out_dtype is not None or not _ours(a, b):
        return NotImplemented
    return matmul(a, b)


def addmm(bias, a, b, out_dtype=None, beta=1, alpha=1):
    if out_dtype is not None or not _ours(bias, a, b):
        return NotImplemented
    if bias.dim() == 1 and beta == 1 and alpha == 1:
        return matmul(a, b, bias)
    return beta * bias + alpha * matmul(a, b)


def attention(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    """aten._scaled_dot_product_flash_attention_for_cpu (what scaled_dot_product_attention dispatches to on
    CPU) as matmul, softmax, matmul: (output, logsumexp), the latter only for the op's signature."""
    if dropout_p != 0.0 or query.size(1) != key.size(1) or not _ours(query, key, value):
        return NotImplemented
    scale = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
    scores = matmul(query, key.transpose(-2, -1)) * scale
    if is_causal:
        keep = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask)
    logsumexp = torch.logsumexp(scores, dim=-1)
    # (batch, heads, rows, columns) laid out (batch, rows, heads, columns), as ATen's kernel returns it:
    # models merge the heads back with transpose(1, 2).reshape, a view of that layout, not a copy
    batch, heads, rows = query.shape[:3]
    out = torch.empty(batch, rows, heads, value.size(-1), dtype=value.dtype, device=value.device).transpose(1, 2)
    output = matmul(torch.softmax(scores, dim=-1).to(value.dtype), value, out=out)
    return output, logsumexp


def _first(ours, inductors):
    """Inductor's decomposition where it has one that applies, else ours."""
    if inductors is None:
        return ours

    def decompose(*args, **kwargs):
        result = inductors(*args, **kwargs)
        return ours(*args, **kwargs) if result is NotImplemented else result
    return decompose


_TABLE = {
    aten.mm.default: mm,
    aten.bmm.default: bmm,
    aten.addmm.default: addmm,
    aten._scaled_dot_product_flash_attention_for_cpu.default: attention,
}


def install():
    """Adds the entries to Inductor's decomposition table (idempotent)."""
    # Inductor's lowerings assert at import that no op has both a decomposition and a fallback (attention
    # has a fallback): import them first. A fallback only serves ops that reach lowering undecomposed.
    import torch._inductor.lowering  # noqa: F401
    table = inductor_decomposition.decompositions
    for op, ours in _TABLE.items():
        if getattr(table.get(op), "__spine__", False):
            continue
        decompose = _first(ours, table.get(op))
        decompose.__spine__ = True
        table[op] = decompose
    inductor_decomposition.fast_random_decomps.cache_clear()
