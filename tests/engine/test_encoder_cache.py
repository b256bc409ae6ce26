"""The encoder (cross-attention) cache, on the numpy reference backend."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.input import Batch, Multimodal
from hearth.engine.kvcache import Encoder
from hearth.engine.ml import DType, attention
from hearth.engine.ml.reference import NumpyBackend

rng = np.random.default_rng(0)


def _batch(ctx, positions, image_at=None) -> Batch:
    n = len(positions)
    pos = np.asarray(positions, dtype=np.int32)
    return Batch(
        tokens=ctx.from_numpy(np.zeros(n, np.int32)),
        positions=ctx.from_numpy(pos),
        outputs=ctx.from_numpy(np.array([n - 1], np.int32)),
        positions_host=pos,
        sequences=np.zeros(n, np.int32),
        outputs_host=np.array([n - 1], np.int32),
        multimodal=[] if image_at is None else [(image_at, [Multimodal(None)])],
    )


def test_it_serves_one_sequence_only():
    with pytest.raises(ValueError, match="one sequence"):
        Encoder().init(NumpyBackend(), DType.F32, 2, 64, 16)


def test_tokens_attend_to_the_stored_image_without_a_mask():
    backend = NumpyBackend()
    cache = Encoder()
    cache.init(backend, DType.F32, 1, 64, 16)
    img_k = rng.standard_normal((6, 2, 8)).astype(np.float32)  # numpy [n_img, heads, d]
    img_v = rng.standard_normal((6, 2, 8)).astype(np.float32)
    q1 = rng.standard_normal((3, 2, 8)).astype(np.float32)  # 3 tokens

    ctx = backend.new_context()
    cache.start_forward(ctx, _batch(ctx, [0, 1, 2], image_at=0))
    cache.set_layer(0)
    out = attention(
        ctx, ctx.from_numpy(q1), ctx.from_numpy(img_k), ctx.from_numpy(img_v), 0.5, cache
    )
    ctx.compute(out)
    got = out.numpy().reshape(3, 2, 8)
    assert cache.encoder_cached and cache.encoder_position == 0

    s = np.einsum("thd,khd->htk", q1, img_k) * 0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ref = np.einsum("htk,khd->thd", p, img_v)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)

    # a later text-only pass reads the same image states
    ctx2 = backend.new_context()
    cache.start_forward(ctx2, _batch(ctx2, [3]))
    cache.set_layer(0)
    q2 = rng.standard_normal((1, 2, 8)).astype(np.float32)
    out2 = attention(ctx2, ctx2.from_numpy(q2), None, None, 0.5, cache)
    ctx2.compute(out2)
    s2 = np.einsum("thd,khd->htk", q2, img_k) * 0.5
    p2 = np.exp(s2 - s2.max(-1, keepdims=True))
    p2 /= p2.sum(-1, keepdims=True)
    np.testing.assert_allclose(
        out2.numpy().reshape(1, 2, 8), np.einsum("htk,khd->thd", p2, img_v), rtol=1e-5, atol=1e-6
    )


def test_removing_the_image_position_forgets_it():
    cache = Encoder()
    cache.init(NumpyBackend(), DType.F32, 1, 64, 16)
    cache.encoder_cached, cache.encoder_position = True, 5
    cache.remove(0, 10)
    assert cache.encoder_cached
    cache.remove(0, 5)
    assert not cache.encoder_cached
    assert cache.can_resume(0, 99)
