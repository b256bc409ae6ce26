"""Hearth's fused encoder attention kernel (app/engine/ml/_attention.c) against float64
numpy: `nn.full_attention` without a mask on a ggml backend, and the same through ggml's
own nodes (a zero mask keeps it there)."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.ml import full_attention


def _reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    s = np.einsum("qhd,khd->hqk", q.astype(np.float64), k.astype(np.float64)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, v.astype(np.float64)).reshape(q.shape[0], -1)


# (head_dim, value head_dim, heads, queries, keys): tails of every block size (32 queries,
# 8- and 4-query tiles, 32/128/512 keys), one key, value heads from 1 to 8 vectors.
SHAPES = [
    (80, 80, 3, 37, 50),
    (16, 16, 2, 5, 1),
    (64, 64, 2, 70, 600),
    (72, 128, 1, 33, 513),
    (80, 80, 4, 130, 1100),
    (32, 48, 2, 9, 129),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fused_attention_matches_float64(backend, shape):
    d, dv, heads, nq, nkv = shape
    rng = np.random.default_rng(sum(shape))
    q = rng.standard_normal((nq, heads, d)).astype(np.float32)
    k = rng.standard_normal((nkv, heads, d)).astype(np.float32)
    v = rng.standard_normal((nkv, heads, dv)).astype(np.float32)
    scale = d**-0.5
    ctx = backend.new_context()
    try:
        tq, tk, tv = (ctx.from_numpy(x) for x in (q, k, v))
        fused = ctx.encoder_attention(tq, tk, tv, scale)
        if backend.attention_kernel is None:
            assert fused is None
            pytest.skip("the attention kernel is not built or this CPU lacks AVX-512")
        assert fused is not None
        ours = full_attention(ctx, tq, tk, tv, scale)
        zero = ctx.from_numpy(np.zeros((nq, nkv), np.float32))
        nodes = full_attention(ctx, tq, tk, tv, scale, zero)  # ggml's mul_mat + soft_max
        ctx.compute(ours, nodes, fused)
        want = _reference(q, k, v, scale)
        size = float(np.abs(want).max())
        got, theirs = ours.numpy(), nodes.numpy()
        assert got.shape == want.shape
        np.testing.assert_array_equal(fused.numpy().reshape(got.shape), got)
        assert float(np.abs(got - want).max()) <= 2e-6 * size
        assert float(np.abs(theirs - want).max()) <= 2e-6 * size
    finally:
        ctx.close()


def test_masked_or_odd_heads_keep_ggml_nodes(backend):
    ctx = backend.new_context()
    try:
        q = ctx.from_numpy(np.ones((4, 2, 24), np.float32))  # value heads of 24: not 16k
        assert ctx.encoder_attention(q, q, q, 1.0) is None
    finally:
        ctx.close()
