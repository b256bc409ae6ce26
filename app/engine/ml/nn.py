"""Building blocks for model plugins: weight binding, linear layers, norms and attention.

Weights are declared as dataclass fields and bound by GGUF name:

    @dataclass
    class Block:
        attn_norm: Tensor = weight()                   # "<prefix>attn_norm.weight"
        attn_q: Tensor = weight()
        rope_freqs: Tensor | None = weight("rope_freqs.weight", absolute=True, optional=True)

    block = bind(Block, weights, prefix="blk.3.")

`weight()` with no name uses the field name plus ".weight". A missing required tensor raises
an error naming the file and the tensor; an optional one binds None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from .api import Context
from .tensor import DType, Tensor

__all__ = [
    "weight",
    "bind",
    "linear",
    "rms_norm",
    "layer_norm",
    "gelu_tanh",
    "attention",
    "full_attention",
    "AttentionCache",
    "KVView",
]

T = TypeVar("T")


def weight(
    name: str | None = None,
    *,
    alt: str | None = None,
    optional: bool = False,
    absolute: bool = False,
    matmul: bool | None = None,
) -> Any:
    """Declare a weight field. `alt` is a fallback tensor name (absolute, e.g. a tied
    embedding); `absolute` means `name` is not prefixed; `matmul` overrides whether the
    tensor is laid out for matrix multiplication."""
    return dataclasses.field(
        default=None,
        metadata={
            "gguf": name,
            "alt": alt,
            "optional": optional,
            "absolute": absolute,
            "matmul": matmul,
        },
    )


class _Store(Protocol):
    def get(self, name: str, alt: str | None = None, matmul: bool | None = None) -> Any: ...

    def require(self, name: str, alt: str | None = None, matmul: bool | None = None) -> Any: ...


def bind(cls: type[T], store: _Store, prefix: str = "", **extra: Any) -> T:
    """Instantiate the dataclass `cls` with its weight fields bound from `store`."""
    kwargs: dict[str, Any] = dict(extra)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if "gguf" not in f.metadata or f.name in kwargs:
            continue
        md = f.metadata
        base = md["gguf"] or f"{f.name}.weight"
        name = base if md["absolute"] else prefix + base
        if md["optional"]:
            kwargs[f.name] = store.get(name, md["alt"], md["matmul"])
        else:
            kwargs[f.name] = store.require(name, md["alt"], md["matmul"])
    return cls(**kwargs)


def linear(ctx: Context, x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
    """x `[in, tokens]` times w `[in, out]` -> `[out, tokens]` (+ bias)."""
    y = ctx.mul_mat(w, x)
    return ctx.add(y, bias) if bias is not None else y


def rms_norm(ctx: Context, x: Tensor, w: Tensor | None, eps: float) -> Tensor:
    """RMS-normalise along dimension 0, then scale by `w` when given."""
    y = ctx.rms_norm(x, eps)
    return ctx.mul(y, w) if w is not None else y


def layer_norm(ctx: Context, x: Tensor, w: Tensor | None, b: Tensor | None, eps: float) -> Tensor:
    """LayerNorm along dimension 0 (zero mean, unit variance), then `* w + b` when given."""
    y = ctx.norm(x, eps)
    if w is not None:
        y = ctx.mul(y, w)
    return ctx.add(y, b) if b is not None else y


_SQRT_2_OVER_PI = 0.7978845608028654


def gelu_tanh(ctx: Context, x: Tensor) -> Tensor:
    """GELU (tanh approximation), `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, in F32
    throughout. `ctx.gelu` is one op but reads ggml's table of F16 values (off by up to
    2e-3), which is what llama.cpp uses; this is for models that must match a float32
    reference closely (PyTorch's `gelu_pytorch_tanh`).

    Computed as `silu(z) / k` with `k = 2 sqrt(2/pi) (1 + 0.044715 x^2)` and `z = x k`, since
    `0.5 (1 + tanh(z / 2)) = sigmoid(z)`: ggml's SiLU is vectorized where its tanh is a
    scalar loop, and k is never zero. Five elementwise ops."""
    k = ctx.scale_bias(ctx.mul(x, x), 2 * _SQRT_2_OVER_PI * 0.044715, 2 * _SQRT_2_OVER_PI)
    return ctx.div(ctx.silu(ctx.mul(x, k)), k)


_SCORES_BYTES = 256 * 2**20  # full_attention: at most this much F32 scores per chunk of heads
_ALIGN = 16  # full_attention: head sizes padded to a multiple of this many floats


def full_attention(
    ctx: Context, q: Tensor, k: Tensor, v: Tensor, scale: float, mask: Tensor | None = None
) -> Tensor:
    """Attention without a KV cache, every query seeing every key (an encoder's
    self-attention), in F32: q `[head_dim, heads, n_q]`, k `[head_dim, heads, n_kv]`, v
    `[head_dim_v, heads, n_kv]` (the same number of heads), optional mask `[n_kv, n_q]`
    added to the scores. Returns `[head_dim_v * heads, n_q]`.

    Queries and keys are copied head by head (`[head_dim, n, heads]`, contiguous) and, where
    head_dim is not a multiple of 16 floats (SigLIP's 72), padded with zeros to one: the dot
    products are the same, and ggml's fast matrix kernel (llamafile's sgemm) takes the
    product, which it does only for a contiguous right operand whose rows fill whole vector
    registers. Otherwise ggml's generic dot-product loop does it, several times slower (an
    896-pixel image's 4096 patches: most of the encoder's time).

    Without a mask, a backend's fused kernel takes it where it has one
    (`Context.encoder_attention`; ggml: Hearth's AVX-512 kernel, ggml_attention.py), which
    keeps the scores in cache instead.

    The `[n_kv, n_q, heads]` scores of a large image are big (4096 patches: 64 MiB per head),
    so heads are taken in chunks of at most 256 MiB of scores: the graph's allocator reuses
    one chunk's memory for the next.
    """
    d, heads, n_q = q.dim(0), q.dim(1), q.dim(2)
    n_kv, dv = k.dim(2), v.dim(0)
    if mask is None:
        fused = ctx.encoder_attention(q, k, v, scale)
        if fused is not None:
            return ctx.reshape(fused, dv * heads, n_q)
    dp = -(-d // _ALIGN) * _ALIGN
    qp = _heads_first(ctx, q, dp)  # [dp, n_q, heads]
    kp = _heads_first(ctx, k, dp)  # [dp, n_kv, heads]
    vt = ctx.cont(ctx.permute(v, 1, 2, 0, 3))  # [n_kv, head_dim_v, heads]
    per_chunk = max(1, min(heads, _SCORES_BYTES // max(1, 4 * n_kv * n_q)))
    out: Tensor | None = None
    for h0 in range(0, heads, per_chunk):
        hn = min(per_chunk, heads - h0)
        qc, kc, vc = qp, kp, vt
        if hn != heads:
            qc = ctx.view(qp, (dp, n_q, hn), qp.strides[1:3], h0 * qp.strides[2])
            kc = ctx.view(kp, (dp, n_kv, hn), kp.strides[1:3], h0 * kp.strides[2])
            vc = ctx.view(vt, (n_kv, dv, hn), vt.strides[1:3], h0 * vt.strides[2])
        kq = ctx.mul_mat(kc, qc, full_precision=True)  # [n_kv, n_q, hn]
        kq = ctx.soft_max(kq, mask, scale)
        part = ctx.mul_mat(vc, kq)  # [head_dim_v, n_q, hn]
        out = part if out is None else ctx.concat(out, part, 2)
    assert out is not None
    out = ctx.cont(ctx.permute(out, 0, 2, 1, 3))  # [head_dim_v, heads, n_q]
    return ctx.reshape(out, dv * heads, n_q)


def _heads_first(ctx: Context, x: Tensor, padded: int) -> Tensor:
    """x `[d, heads, n]` as a contiguous `[padded, n, heads]`, zeros after row d."""
    d, heads, n = x.dim(0), x.dim(1), x.dim(2)
    xp = ctx.permute(x, 0, 2, 1, 3)  # [d, n, heads], a view
    if padded == d:
        return ctx.cont(xp)
    key = f"full_attention.zeros.{padded - d}.{n}.{heads}"  # one per shape, shared by layers
    values = None if ctx.has_input(key) else np.zeros((heads, n, padded - d), np.float32)
    zeros = ctx.input(DType.F32, (padded - d, n, heads), values, key=key)
    return ctx.concat(xp, zeros, 0)


@dataclass(frozen=True)
class KVView:
    """What one run of a sequence's batch rows attends to (see `AttentionCache.get`).

    start, count: the rows (tokens) of the batch; keys `[head_dim, kv_heads, n_kv]`; values
    the same or, permuted, `[n_kv, head_dim, kv_heads]`; mask `[n_kv, count_padded]`, or None
    when every row sees every key (cross-attention to an image).

    streams > 1: the view stacks that many sequences of one row each (batch row `start + i`
    is stream i): keys and values gain a fourth dimension of `streams` (each stream its own
    cells), and the mask is `[n_kv, 1, 1, streams]`.
    """

    start: int
    count: int
    keys: Tensor
    values: Tensor
    mask: Tensor | None
    streams: int = 1


class AttentionCache(Protocol):
    """What attention needs of a KV cache (kvcache.Cache satisfies it)."""

    def put(self, ctx: Context, key: Tensor, value: Tensor) -> None: ...

    def get(self, ctx: Context) -> list[KVView]: ...

    @property
    def permuted_v(self) -> bool: ...


def attention(
    ctx: Context,
    q: Tensor,
    k: Tensor | None,
    v: Tensor | None,
    scale: float,
    cache: AttentionCache,
    softcap: float = 0.0,
    sinks: Tensor | None = None,
) -> Tensor:
    """Scaled dot-product attention through a KV cache.

    q `[head_dim, heads, tokens]` (contiguous); k, v `[head_dim, kv_heads, tokens]` are stored
    in the cache first (pass None to only read it). Heads share kv_heads in groups (GQA). Each
    sequence's rows attend to that sequence's cells only, so results do not depend on what
    else shares the batch. Uses flash attention when the backend's switch is on. `sinks`
    (F32 `[heads]`): a logit per head that joins each softmax's normaliser without a value
    (gpt-oss). Returns `[head_dim_v * heads, tokens]`.
    """
    if k is not None and v is not None:
        cache.put(ctx, k, v)
    views = cache.get(ctx)
    if len(views) == 1 and views[0].count == q.dim(2):
        return _sdpa(ctx, q, views[0], scale, cache.permuted_v, softcap, sinks)
    out = None
    for view in views:
        # q rows of this run: [head_dim, heads, count]
        qv = ctx.view(
            q, (q.dim(0), q.dim(1), view.count), q.strides[1:3], view.start * q.strides[2]
        )
        part = _sdpa(ctx, qv, view, scale, cache.permuted_v, softcap, sinks)
        out = part if out is None else ctx.concat(out, part, 1)
    assert out is not None
    return out


def _sdpa(
    ctx: Context,
    q: Tensor,
    view: KVView,
    scale: float,
    permuted_v: bool,
    softcap: float,
    sinks: Tensor | None = None,
) -> Tensor:
    heads, tokens = q.dim(1), q.dim(2)
    if view.streams > 1:  # one row per stream: [head_dim, heads, 1, streams]
        q = ctx.view(q, (q.dim(0), heads, 1, view.streams), (*q.strides[1:3], q.strides[2]))
    q = ctx.permute(q, 0, 2, 1, 3)  # [head_dim, tokens, heads(, streams)]
    keys = ctx.permute(view.keys, 0, 2, 1, 3)  # [head_dim, n_kv, kv_heads]
    mask = view.mask
    if ctx.flash_attention_enabled:
        if permuted_v or view.streams > 1:
            raise ValueError("flash attention needs an unpermuted V cache and one view per run")
        values = ctx.permute(view.values, 0, 2, 1, 3)  # [head_dim_v, n_kv, kv_heads]
        if mask is not None and mask.dtype != DType.F16:
            mask = ctx.cast(mask, DType.F16)
        out = ctx.flash_attention(q, keys, values, mask, scale, softcap, sinks)  # [d_v, heads, n]
        return ctx.reshape(out, out.dim(0) * heads, tokens)

    kq = ctx.mul_mat(keys, q, full_precision=True)  # [n_kv, tokens, heads]
    if softcap:
        kq = ctx.scale(ctx.tanh(ctx.scale(kq, scale / softcap)), softcap)
        kq = ctx.soft_max(kq, mask, 1.0, sinks)
    else:
        kq = ctx.soft_max(kq, mask, scale, sinks)
    if permuted_v:
        vt = view.values  # [n_kv, head_dim_v, kv_heads]
    else:
        vt = ctx.cont(ctx.permute(view.values, 1, 2, 0, 3))  # [n_kv, head_dim_v, kv_heads]
    kqv = ctx.mul_mat(vt, kq)  # [head_dim_v, tokens, heads]
    kqv = ctx.permute(kqv, 0, 2, 1, 3)  # [head_dim_v, heads, tokens(, streams)]
    out = ctx.cont(kqv)
    return ctx.reshape(out, out.dim(0) * out.dim(1), tokens)
