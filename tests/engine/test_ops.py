"""Every op of the tensor API against a numpy reference (shapes in ggml order)."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from hearth.engine.ml import DType, RopeOptions

rng = np.random.default_rng(0)


def run(backend, build, *arrays, dtypes=None):
    """build(ctx, *inputs) -> output tensor; arrays are numpy (numpy order)."""
    ctx = backend.new_context()
    try:
        ins = []
        for i, a in enumerate(arrays):
            dt = (dtypes or {}).get(i)
            ins.append(ctx.from_numpy(a, dt))
        out = build(ctx, *ins)
        out = out if out.dtype in (DType.F32, DType.F16, DType.I32) else ctx.cast(out, DType.F32)
        ctx.compute(out)
        return out.numpy()
    finally:
        ctx.close()


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_add_mul_scale_broadcast(backend):
    a, b = f32(3, 4, 8), f32(1, 1, 8)
    np.testing.assert_allclose(run(backend, lambda c, x, y: c.add(x, y), a, b), a + b, rtol=1e-6)
    np.testing.assert_allclose(run(backend, lambda c, x, y: c.mul(x, y), a, b), a * b, rtol=1e-6)
    np.testing.assert_allclose(run(backend, lambda c, x: c.scale(x, 0.5), a), a * 0.5, rtol=1e-6)


@pytest.mark.parametrize("qtype", [QT.F32, QT.F16, QT.Q8_0, QT.Q4_0])
def test_mul_mat_against_dequantized_weights(backend, qtype):
    w = f32(48, 64)  # numpy [out, in] == ggml [in, out]
    x = f32(5, 64)
    raw = gguf.quants.quantize(w, qtype) if qtype not in (QT.F32, QT.F16) else None
    if qtype == QT.F32:
        ref_w, arr = w, w
    elif qtype == QT.F16:
        ref_w, arr = w.astype(np.float16).astype(np.float32), w.astype(np.float16)
    else:
        ref_w = gguf.quants.dequantize(raw, qtype)
        arr = raw
    ctx = backend.new_context()
    try:
        wt = ctx.input(DType(int(qtype)), (64, 48))
        wt.set(arr.view(np.uint8) if raw is not None else arr)
        xt = ctx.from_numpy(x)
        out = ctx.mul_mat(wt, xt)
        ctx.compute(out)
        got = out.numpy()
    finally:
        ctx.close()
    ref = x @ ref_w.T
    tol = 1e-4 if qtype == QT.F32 else 3e-2
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_mul_mat_broadcasts_heads(backend):
    k = f32(2, 7, 16)  # [kv_heads=2, n_kv=7, d=16] numpy
    q = f32(4, 3, 16)  # [heads=4, tokens=3, d=16]
    got = run(backend, lambda c, a, b: c.mul_mat(a, b, full_precision=True), k, q)
    ref = np.einsum("hkd,htd->htk", np.repeat(k, 2, axis=0), q)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_get_rows_and_set_rows(backend):
    table = f32(10, 6)
    idx = np.array([3, 0, 9, 3], dtype=np.int32)
    np.testing.assert_array_equal(
        run(backend, lambda c, t, i: c.get_rows(t, i), table, idx), table[idx]
    )
    src = f32(2, 6)
    rows = np.array([7, 1], dtype=np.int32)
    ctx = backend.new_context()
    try:
        dst = backend.persistent(DType.F16, (6, 10))
        out = ctx.set_rows(dst, ctx.from_numpy(src), ctx.from_numpy(rows))
        ctx.forward(out)
        ctx.compute(out)
        got = dst.numpy()
    finally:
        ctx.close()
    ref = np.zeros((10, 6), np.float32)
    ref[rows] = src.astype(np.float16)
    np.testing.assert_array_equal(got, ref)


def test_norms(backend):
    x = f32(3, 32)
    rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(run(backend, lambda c, a: c.rms_norm(a, 1e-6), x), rms, rtol=1e-5)
    mu = x - x.mean(-1, keepdims=True)
    ln = mu / np.sqrt((mu * mu).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(
        run(backend, lambda c, a: c.norm(a, 1e-5), x), ln, rtol=1e-4, atol=1e-5
    )


def test_soft_max_with_mask_and_scale(backend):
    x = f32(2, 4, 8)
    mask = np.where(rng.random((4, 8)) < 0.3, -np.inf, 0).astype(np.float32)
    mask[:, 0] = 0
    got = run(backend, lambda c, a, m: c.soft_max(a, m, 0.25), x, mask)
    z = x * 0.25 + mask
    ref = np.exp(z - z.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def silu(x):
    return x / (1 + np.exp(-x))


def test_activations(backend):
    x, y = f32(3, 40), f32(3, 40)
    np.testing.assert_allclose(run(backend, lambda c, a: c.gelu(a), x), gelu_tanh(x), atol=2e-3)
    np.testing.assert_allclose(
        run(backend, lambda c, a: c.silu(a), x), silu(x), rtol=1e-5, atol=1e-6
    )
    erf = np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2))
    np.testing.assert_allclose(
        run(backend, lambda c, a: c.gelu_erf(a), x), 0.5 * x * (1 + erf), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(
        run(backend, lambda c, a: c.tanh(a), x), np.tanh(x), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        run(backend, lambda c, a, b: c.geglu(a, b), x, y), gelu_tanh(x) * y, atol=3e-3
    )
    np.testing.assert_allclose(
        run(backend, lambda c, a, b: c.swiglu(a, b), x, y), silu(x) * y, rtol=1e-5, atol=1e-5
    )


def rope_ref(x, pos, dims, base, neox, factors=None, freq_scale=1.0):
    """x numpy [tokens, heads, head_dim]."""
    out = x.copy()
    half = dims // 2
    inv = base ** (-np.arange(half) * 2.0 / dims)
    if factors is not None:
        inv = inv / factors
    theta = pos[:, None].astype(np.float64) * freq_scale * inv[None, :]  # [tokens, half]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    if neox:
        a, b = x[..., :half], x[..., half:dims]
        out[..., :half] = a * cos - b * sin
        out[..., half:dims] = a * sin + b * cos
    else:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2] = a * cos - b * sin
        out[..., 1:dims:2] = a * sin + b * cos
    return out


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("with_factors", [False, True])
def test_rope(backend, neox, with_factors):
    x = f32(5, 3, 16)
    pos = np.array([0, 1, 7, 100, 4000], dtype=np.int32)
    factors = np.linspace(1, 8, 8).astype(np.float32) if with_factors else None
    opts = RopeOptions(dims=16, base=10000.0, neox=neox, scale=0.5)
    if factors is None:
        got = run(backend, lambda c, a, p: c.rope(a, p, opts), x, pos)
    else:
        got = run(backend, lambda c, a, p, f: c.rope(a, p, opts, f), x, pos, factors)
    ref = rope_ref(x, pos, 16, 10000.0, neox, factors, 0.5)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_layout_ops(backend):
    x = f32(2, 3, 4)  # ggml [4, 3, 2]
    np.testing.assert_array_equal(
        run(backend, lambda c, a: c.reshape(a, 12, 2), x), x.reshape(2, 12)
    )
    # permute(0, 2, 1, 3) swaps ggml dims 1 and 2 == numpy axes 0 and 1
    got = run(backend, lambda c, a: c.cont(c.permute(a, 0, 2, 1, 3)), x)
    np.testing.assert_array_equal(got, x.transpose(1, 0, 2))
    # a view of ggml rows 1..2 of each matrix
    got = run(backend, lambda c, a: c.cont(c.view(a, (4, 2, 2), (16, 48), 16)), x)
    np.testing.assert_array_equal(got, x[:, 1:3, :])
    np.testing.assert_array_equal(
        run(backend, lambda c, a: c.cast(c.cast(a, DType.F16), DType.F32), x),
        x.astype(np.float16).astype(np.float32),
    )
    y = f32(2, 5, 4)
    np.testing.assert_array_equal(
        run(backend, lambda c, a, b: c.concat(a, b, 1), x, y), np.concatenate([x, y], axis=1)
    )


def test_copy_into_view(backend):
    src = f32(3, 4)
    ctx = backend.new_context()
    try:
        dst = backend.persistent(DType.F32, (4, 5))
        view = ctx.view(dst, (4, 3), (16,), 16 * 2)
        out = ctx.copy(ctx.from_numpy(src), view)
        ctx.forward(out)
        ctx.compute(out)
        got = dst.numpy()
    finally:
        ctx.close()
    ref = np.zeros((5, 4), np.float32)
    ref[2:5] = src
    np.testing.assert_array_equal(got, ref)


def naive_attention(q, k, v, mask, scale):
    """q [heads, tokens, d]; k, v [kv_heads, n_kv, d]; mask [tokens, n_kv]."""
    rep = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, rep, 0), np.repeat(v, rep, 0)
    s = np.einsum("htd,hkd->htk", q, k) * scale + mask[None]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("htk,hkd->htd", p, v)


def test_flash_attention_matches_naive(backend):
    heads, kv_heads, d, n, n_kv = 4, 2, 32, 5, 64
    q, k, v = f32(heads, n, d), f32(kv_heads, n_kv, d), f32(kv_heads, n_kv, d)
    mask = np.zeros((32, n_kv), np.float32)
    mask[:n, :][rng.random((n, n_kv)) < 0.3] = -np.inf
    mask[:n, 0] = 0
    ctx = backend.new_context()
    try:
        qt = ctx.from_numpy(q)  # ggml [d, n, heads]
        kt = ctx.cast(ctx.from_numpy(k), DType.F16)
        vt = ctx.cast(ctx.from_numpy(v), DType.F16)
        mt = ctx.input(DType.F16, (n_kv, 32), mask)
        out = ctx.flash_attention(qt, kt, vt, mt, 0.2)  # [d, heads, n]
        out = ctx.cont(out)
        ctx.compute(out)
        got = out.numpy()  # numpy [n, heads, d]
    finally:
        ctx.close()
    k16, v16 = k.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
    ref = naive_attention(q, k16, v16, mask[:n], 0.2).transpose(1, 0, 2)
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2)


def test_keyed_inputs_refill_a_built_graph(backend):
    ctx = backend.new_context()
    try:
        a = ctx.input(DType.F32, (4,), np.ones(4, np.float32), key="a")
        out = ctx.scale(a, 3.0)
        ctx.compute(out)
        np.testing.assert_array_equal(out.numpy(), np.full(4, 3.0))
        again = ctx.input(DType.F32, (4,), np.arange(4, dtype=np.float32), key="a")
        assert again is a
        ctx.compute(out)
        np.testing.assert_array_equal(out.numpy(), np.arange(4) * 3.0)
        with pytest.raises(ValueError):
            ctx.input(DType.F32, (5,), np.zeros(5, np.float32), key="a")
    finally:
        ctx.close()
