"""The numpy reference backend (`hearth.engine.ml.reference`) against ggml, op by op, and
attention through the KV cache on both (the cache scenarios themselves: test_kvcache.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from hearth.engine.input import Batch
from hearth.engine.kvcache import Causal
from hearth.engine.ml import CacheConfig, Context, DType, RopeOptions, Tensor
from hearth.engine.ml.api import Backend
from hearth.engine.ml.ggml import GGMLBackend
from hearth.engine.ml.nn import attention
from hearth.engine.ml.reference import NumpyBackend

rng = np.random.default_rng(7)


@pytest.fixture(scope="module")
def backends():
    pair = (NumpyBackend(), GGMLBackend(num_threads=1))
    yield pair
    for b in pair:
        b.close()


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def run(backend: Backend, build: Callable[..., Tensor], *arrays, dtypes=None) -> np.ndarray:
    ctx = backend.new_context()
    try:
        ins = [ctx.from_numpy(a, (dtypes or {}).get(i)) for i, a in enumerate(arrays)]
        out = build(ctx, *ins)
        ctx.compute(out)
        return out.numpy()
    finally:
        ctx.close()


def both(backends, build, *arrays, dtypes=None, rtol=1e-5, atol=1e-5) -> np.ndarray:
    ref = run(backends[0], build, *arrays, dtypes=dtypes)
    got = run(backends[1], build, *arrays, dtypes=dtypes)
    assert ref.shape == got.shape and ref.dtype == got.dtype
    np.testing.assert_allclose(ref, got, rtol=rtol, atol=atol)
    return ref


OPS: dict[str, tuple[Callable[..., Tensor], tuple[np.ndarray, ...], dict]] = {
    "add_broadcast": (lambda c, a, b: c.add(a, b), (f32(3, 4, 8), f32(1, 4, 8)), {}),
    "mul_broadcast": (lambda c, a, b: c.mul(a, b), (f32(3, 4, 8), f32(1, 1, 8)), {}),
    "scale": (lambda c, a: c.scale(a, -0.25), (f32(3, 5),), {}),
    "mul_mat_gqa": (
        lambda c, a, b: c.mul_mat(a, b, full_precision=True),
        (f32(2, 7, 16), f32(4, 3, 16)),
        {},
    ),
    "get_rows": (
        lambda c, a, i: c.get_rows(a, i),
        (f32(10, 6), np.array([3, 0, 9, 3], np.int32)),
        {},
    ),
    "rms_norm": (lambda c, a: c.rms_norm(a, 1e-6), (f32(3, 32),), {}),
    "norm": (lambda c, a: c.norm(a, 1e-5), (f32(3, 32),), {"atol": 1e-4}),
    "soft_max_mask": (
        lambda c, a, m: c.soft_max(a, m, 0.5),
        (f32(2, 4, 8), np.where(rng.random((32, 8)) < 0.3, -np.inf, 0).astype(np.float32)),
        {},
    ),
    "gelu": (lambda c, a: c.gelu(a), (f32(3, 40),), {"atol": 2e-3}),
    "gelu_erf": (lambda c, a: c.gelu_erf(a), (f32(3, 40),), {}),
    "silu": (lambda c, a: c.silu(a), (f32(3, 40),), {}),
    "tanh": (lambda c, a: c.tanh(a), (f32(3, 40),), {}),
    "geglu": (lambda c, a, b: c.geglu(a, b), (f32(3, 40), f32(3, 40)), {"atol": 3e-3}),
    "swiglu": (lambda c, a, b: c.swiglu(a, b), (f32(3, 40), f32(3, 40)), {}),
    "reshape": (lambda c, a: c.reshape(a, 12, 2), (f32(2, 3, 4),), {}),
    "permute_cont": (lambda c, a: c.cont(c.permute(a, 0, 2, 1, 3)), (f32(2, 3, 4),), {}),
    "permute_3d": (lambda c, a: c.cont(c.permute(a, 1, 2, 0)), (f32(2, 3, 4),), {}),
    "view_rows": (lambda c, a: c.cont(c.view(a, (4, 2, 2), (16, 48), 16)), (f32(2, 3, 4),), {}),
    "view_of_permute": (
        lambda c, a: c.cont(c.view(c.cont(c.permute(a, 1, 0)), (2, 3), (20,), 8)),
        (f32(4, 5),),
        {},
    ),
    "cast_f16": (lambda c, a: c.cast(c.cast(a, DType.F16), DType.F32), (f32(2, 3, 4),), {}),
    "concat_1": (lambda c, a, b: c.concat(a, b, 1), (f32(2, 3, 4), f32(2, 5, 4)), {}),
    "concat_0": (lambda c, a, b: c.concat(a, b, 0), (f32(2, 3, 4), f32(2, 3, 1)), {}),
    "cast_i32": (
        lambda c, a: c.cast(a, DType.F32),
        (np.array([0, -1, 7, 123456], np.int32),),
        {},
    ),
}


@pytest.mark.parametrize("name", list(OPS))
def test_op_matches_ggml(backends, name):
    build, arrays, tol = OPS[name]
    both(backends, build, *arrays, **tol)


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("partial", [False, True])
def test_rope_matches_ggml(backends, neox, partial):
    x = f32(5, 3, 16)
    pos = np.array([0, 1, 7, 100, 4000], dtype=np.int32)
    opts = RopeOptions(dims=8 if partial else 16, base=10000.0, neox=neox, scale=0.5)
    both(backends, lambda c, a, p: c.rope(a, p, opts), x, pos, rtol=1e-4, atol=1e-4)
    factors = np.linspace(1, 4, opts.dims // 2).astype(np.float32)
    both(backends, lambda c, a, p, f: c.rope(a, p, opts, f), x, pos, factors, rtol=1e-4, atol=1e-4)


def test_rope_yarn_matches_ggml(backends):
    x = f32(4, 2, 32)
    pos = np.array([0, 5, 900, 3000], dtype=np.int32)
    opts = RopeOptions(
        dims=32, base=1e6, neox=True, scale=0.25, original_context=1024, ext_factor=1.0
    )
    both(backends, lambda c, a, p: c.rope(a, p, opts), x, pos, rtol=1e-3, atol=1e-3)


def test_flash_attention_matches_ggml(backends):
    heads, kv_heads, d, n, n_kv = 4, 2, 32, 5, 24
    q, k, v = f32(heads, n, d), f32(kv_heads, n_kv, d), f32(kv_heads, n_kv, d)
    mask = np.zeros((32, n_kv), np.float32)
    mask[:n][rng.random((n, n_kv)) < 0.3] = -np.inf
    mask[:n, 0] = 0

    def build(c: Context, qt: Tensor, kt: Tensor, vt: Tensor, mt: Tensor) -> Tensor:
        k16, v16 = c.cast(kt, DType.F16), c.cast(vt, DType.F16)
        return c.cont(c.flash_attention(qt, k16, v16, c.cast(mt, DType.F16), 0.2, softcap=3.0))

    both(backends, build, q, k, v, mask, rtol=2e-2, atol=2e-2)


def test_set_rows_and_copy_write_through_views(backends):
    """The writes land in persistent memory, seen by later graphs, on both backends."""
    results = []
    for backend in backends:
        dst = backend.persistent(DType.F16, (6, 10))
        ctx = backend.new_context()
        try:
            src = ctx.from_numpy(np.arange(12, dtype=np.float32).reshape(2, 6))
            rows = ctx.from_numpy(np.array([7, 1], np.int32))
            ctx.forward(ctx.set_rows(dst, src, rows))
            # Copy into a strided view: column 5 of rows 2..4.
            view = ctx.view(dst, (1, 3), (12,), 2 * 12 + 5 * 2)
            ctx.forward(ctx.copy(ctx.from_numpy(np.array([[-1], [-2], [-3]], np.float32)), view))
            ctx.compute()
        finally:
            ctx.close()
        results.append(dst.numpy())
    np.testing.assert_array_equal(results[0], results[1])
    assert results[0][7].tolist() == [0, 1, 2, 3, 4, 5]
    assert results[0][2:5, 5].tolist() == [-1, -2, -3]


def test_numpy_graph_reruns_with_refilled_keyed_inputs():
    backend = NumpyBackend()
    ctx = backend.new_context()
    a = ctx.input(DType.F32, (4,), np.ones(4, np.float32), key="a")
    out = ctx.scale(a, 3.0)
    ctx.compute(out)
    assert ctx.is_current
    np.testing.assert_array_equal(out.numpy(), np.full(4, 3.0))
    assert ctx.input(DType.F32, (4,), np.arange(4, dtype=np.float32), key="a") is a
    seen = []
    ctx.compute(out, on_started=lambda: seen.append(a.set(np.zeros(4, np.float32))))
    np.testing.assert_array_equal(out.numpy(), np.arange(4) * 3.0)  # refilled after start
    assert seen
    with pytest.raises(ValueError):
        ctx.input(DType.F32, (5,), key="a")
    other = backend.new_context()
    other.compute()
    assert not ctx.is_current and other.is_current
    ctx.close()
    other.close()


def test_numpy_rejects_what_ggml_rejects():
    backend = NumpyBackend()
    ctx = backend.new_context()
    a = ctx.from_numpy(f32(3, 4))
    with pytest.raises(ValueError):
        ctx.add(a, ctx.from_numpy(f32(2, 4)))  # does not broadcast
    with pytest.raises(ValueError):
        ctx.reshape(ctx.permute(a, 1, 0), 12)  # not contiguous
    with pytest.raises(ValueError):
        ctx.view(a, (4, 3), (16,), 16)  # runs past the buffer
    with pytest.raises(NotImplementedError):
        backend.persistent(DType.Q4_0, (32, 2))
    p = ctx.permute(a, 1, 0)
    ctx.compute(p)
    with pytest.raises(ValueError):
        p.numpy()  # not contiguous: needs cont(), as with ggml
    ctx.close()


# -- attention through the cache -------------------------------------------------------------
def naive(q, k, v, visible, scale):
    """q [tokens, heads, d]; k, v [n, kv_heads, d]; visible [tokens, n] bool."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,nhd->thn", q, k) * scale
    s = np.where(visible[:, None, :], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("thn,nhd->thd", p, v).reshape(len(q), -1)


@pytest.mark.parametrize(
    "permuted_v,flash", [(False, False), (True, False), (False, True)], ids=["v", "pv", "fa"]
)
def test_attention_through_the_cache_numpy_vs_ggml(permuted_v: bool, flash: bool):
    """nn.attention over a Causal cache: two passes of two interleaved sequences (runs of
    rows), one with a sliding window; numpy, ggml and a direct computation agree."""
    heads, kv_heads, d, scale = 4, 2, 16, 0.25
    passes = [
        ([0, 1, 2, 0, 1], [0, 0, 0, 1, 1]),
        ([3, 2, 3, 4], [0, 1, 1, 1]),
    ]
    data = [
        (f32(len(p), heads, d), f32(len(p), kv_heads, d), f32(len(p), kv_heads, d))
        for p, _ in passes
    ]
    for window in (0, 2):
        outputs = []
        for backend in (
            NumpyBackend(flash_attention=flash),
            GGMLBackend(num_threads=1, flash_attention=flash),
        ):
            cache = Causal(window=window)
            cache.set_config(
                CacheConfig(
                    padding=4,
                    permuted_v=permuted_v,
                    mask_dtype=DType.F16 if flash else DType.F32,
                )
            )
            cache.init(backend, DType.F16, 2, 16, 8)
            outs = []
            for (pos, seqs), (q, k, v) in zip(passes, data, strict=True):
                ctx = backend.new_context()
                try:
                    positions = np.array(pos, np.int32)
                    n = len(pos)
                    batch = Batch(
                        ctx.from_numpy(np.zeros(n, np.int32)),
                        ctx.from_numpy(positions),
                        ctx.from_numpy(np.arange(n, dtype=np.int32)),
                        positions,
                        np.array(seqs, np.int32),
                        np.arange(n, dtype=np.int32),
                    )
                    cache.start_forward(ctx, batch)
                    cache.set_layer(0)
                    out = attention(
                        ctx, ctx.from_numpy(q), ctx.from_numpy(k), ctx.from_numpy(v), scale, cache
                    )
                    ctx.compute(out)
                    outs.append(out.numpy())
                finally:
                    ctx.close()
            cache.close()
            backend.close()
            outputs.append(outs)
        # What each token sees, directly: its sequence's earlier positions in the window.
        all_pos = np.concatenate([p for p, _ in passes])
        all_seq = np.concatenate([s for _, s in passes])
        all_k = np.concatenate([k for _, k, _ in data]).astype(np.float16).astype(np.float32)
        all_v = np.concatenate([v for _, _, v in data]).astype(np.float16).astype(np.float32)
        start = 0
        for i, (pos, seqs) in enumerate(passes):
            n = len(pos)
            upto = start + n
            tp, ts = np.array(pos)[:, None], np.array(seqs)[:, None]
            cp, cs = all_pos[None, :upto], all_seq[None, :upto]
            visible = (cs == ts) & (cp <= tp)
            if window:
                visible &= tp - cp < window
            ref = naive(data[i][0], all_k[:upto], all_v[:upto], visible, scale)
            np.testing.assert_allclose(outputs[0][i], ref, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(outputs[1][i], ref, rtol=2e-2, atol=2e-2)
            start = upto
