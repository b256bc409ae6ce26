"""The encoder (cross-attention) cache, per sequence, on the numpy reference backend."""

from __future__ import annotations

import numpy as np

from hearth.engine.input import Batch, Multimodal
from hearth.engine.kvcache import Encoder
from hearth.engine.ml import DType, attention
from hearth.engine.ml.reference import NumpyBackend

rng = np.random.default_rng(0)


def _batch(ctx, positions, seqs, images=()) -> Batch:
    """images: (row, rows) of whole items (an image at that row's position)."""
    n = len(positions)
    pos = np.asarray(positions, dtype=np.int32)
    return Batch(
        tokens=ctx.from_numpy(np.zeros(n, np.int32)),
        positions=ctx.from_numpy(pos),
        outputs=ctx.from_numpy(np.array([n - 1], np.int32)),
        positions_host=pos,
        sequences=np.asarray(seqs, dtype=np.int32),
        outputs_host=np.array([n - 1], np.int32),
        multimodal=[(row, [Multimodal(None, rows=rows, positions=1)]) for row, rows in images],
    )


def _reference(q, k, v, scale=0.5):
    s = np.einsum("thd,khd->htk", q, k) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("htk,khd->thd", p, v)


def _image(rows):
    return [rng.standard_normal((rows, 2, 8)).astype(np.float32) for _ in range(2)]  # k, v


def _pass(backend, cache, positions, seqs, images, q, new=()):
    """One layer's attention over the cache; `new` are the (k, v) the pass puts."""
    ctx = backend.new_context()
    cache.start_forward(ctx, _batch(ctx, positions, seqs, images))
    cache.set_layer(0)
    for k, v in new:
        cache.put(ctx, ctx.from_numpy(k), ctx.from_numpy(v))
    out = attention(ctx, ctx.from_numpy(q), None, None, 0.5, cache)
    after = cache.mask(ctx)
    ctx.compute(out, after)
    return out.numpy().reshape(q.shape), after.numpy().ravel(), cache.active


def test_each_sequence_attends_to_its_own_image_and_keeps_it_for_later_passes():
    backend = NumpyBackend()
    cache = Encoder()
    cache.init(backend, DType.F32, 3, 64, 16)
    a, b = _image(6), _image(4)
    q = rng.standard_normal((5, 2, 8)).astype(np.float32)
    # seq 0: rows 0-1 (image at position 1), seq 1: rows 2-4 (image at position 0)
    got, after, active = _pass(backend, cache, [0, 1, 0, 1, 2], [0, 0, 1, 1, 1],
                               [(1, 6), (2, 4)], q, new=[a, b])  # fmt: skip
    np.testing.assert_allclose(got[:2], _reference(q[:2], *a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2:], _reference(q[2:], *b), rtol=1e-5, atol=1e-6)
    assert after.tolist() == [0, 1, 1, 1, 1] and active  # row 0 is before seq 0's image
    ctx = backend.new_context()
    batch = _batch(ctx, [0, 1, 0, 1, 2], [0, 0, 1, 1, 1], [(1, 6), (2, 4)])
    assert [item.rows for item in cache.stored_items(batch)] == [6, 4]  # in put order
    ctx.close()

    # later: seq 1 and seq 2 (which has no image) decode together
    q2 = rng.standard_normal((2, 2, 8)).astype(np.float32)
    got, after, active = _pass(backend, cache, [3, 0], [1, 2], [], q2)
    np.testing.assert_allclose(got[:1], _reference(q2[:1], *b), rtol=1e-5, atol=1e-6)
    assert not got[1].any()  # nothing to attend to: zero
    assert after.tolist() == [1, 0] and active


def test_rows_before_every_image_make_the_pass_inactive():
    """A pass whose rows all come before their sequence's image (or have none) needs no
    cross-attention at all: `active` is false and the mask is all zero."""
    backend = NumpyBackend()
    cache = Encoder()
    cache.init(backend, DType.F32, 2, 64, 16)
    q = rng.standard_normal((2, 2, 8)).astype(np.float32)
    _pass(backend, cache, [4], [0], [(0, 3)], q[:1], new=[_image(3)])  # seq 0: image at 4
    cache.remove(0, 5)  # rows from position 5 on go (a re-evaluation of 2..3 follows)
    _, after, active = _pass(backend, cache, [2, 0], [0, 1], [], q)
    assert after.tolist() == [0, 0] and not active


def test_copy_prefix_shares_the_image_only_when_the_prefix_holds_it():
    backend = NumpyBackend()
    cache = Encoder()
    cache.init(backend, DType.F32, 2, 64, 16)
    a = _image(3)
    q = rng.standard_normal((3, 2, 8)).astype(np.float32)
    _pass(backend, cache, [0, 1, 2], [0, 0, 0], [(1, 3)], q, new=[a])
    cache.copy_prefix(0, 1, 1)  # positions 0 only: the image is at 1
    assert cache.image_position(1) == -1
    cache.copy_prefix(0, 1, 2)
    assert cache.image_position(1) == 1
    got, _, _ = _pass(backend, cache, [2], [1], [], q[:1])
    np.testing.assert_allclose(got, _reference(q[:1], *a), rtol=1e-5, atol=1e-6)


def test_removing_the_image_position_forgets_it_and_shifts_follow_it():
    backend = NumpyBackend()
    cache = Encoder()
    cache.init(backend, DType.F32, 1, 64, 16)
    q = rng.standard_normal((1, 2, 8)).astype(np.float32)
    _pass(backend, cache, [5], [0], [(0, 3)], q, new=[_image(3)])
    cache.remove(0, 1, 3)  # two positions before it go: it moves down
    assert cache.image_position(0) == 3
    cache.remove(0, 10)
    assert cache.image_position(0) == 3
    cache.remove(0, 3)
    assert cache.image_position(0) == -1
    assert cache.can_resume(0, 99)
