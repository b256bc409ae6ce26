"""Forward passes: batch vs token-by-token, graph reuse, prefix reuse, failing at load."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.forward import ForwardEngine
from hearth.engine.input import PassInput
from hearth.engine.kvcache import CacheFullError
from hearth.engine.ml.api import OutOfMemoryError
from hearth.engine.prompt_cache import common_prefix
from hearth.plugins.registry import load_installed_model as load_model


@pytest.fixture(scope="module")
def gemma3(gemma3_path):
    loaded = load_model(gemma3_path, num_threads=2)
    yield loaded
    loaded.close()


def _one_by_one(engine: ForwardEngine, ids: np.ndarray, seq: int = 0) -> np.ndarray:
    engine.cache.remove(seq, 0)
    logits = None
    for i, t in enumerate(ids):
        logits = engine.forward(
            PassInput(np.array([t]), np.array([i]), np.array([seq]), np.array([0]))
        )
    return logits[0]


def _batched(engine: ForwardEngine, ids: np.ndarray, seq: int = 0) -> np.ndarray:
    engine.cache.remove(seq, 0)
    n = len(ids)
    return engine.forward(PassInput(ids, np.arange(n), np.full(n, seq), np.array([n - 1])))[0]


@pytest.mark.slow
def test_batch_and_token_by_token_agree_gemma3(gemma3):
    ids = np.array(gemma3.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 4))
    engine = ForwardEngine(gemma3, num_ctx=512, num_batch=128)
    try:
        a = _batched(engine, ids)
        b = _one_by_one(engine, ids)
        assert engine.graphs_reused >= len(ids) - 3  # token-by-token passes reuse one graph
    finally:
        engine.close()
    # Quantized matmuls round activations differently for a batch than for one row; llama.cpp
    # itself differs by about 1.06 (max |logit| 23.5) between the two on this prompt.
    assert a.argmax() == b.argmax()
    assert len(set(np.argsort(-a)[:10]) & set(np.argsort(-b)[:10])) >= 8
    assert np.abs(a - b).max() < 0.07 * np.abs(a).max()


def test_batch_and_token_by_token_agree_tiny_llama(tiny_llama_path):
    loaded = load_model(tiny_llama_path, num_threads=2)
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=64)
    try:
        ids = np.random.default_rng(1).integers(3, 500, 60)
        a = _batched(engine, ids)
        b = _one_by_one(engine, ids)
    finally:
        engine.close()
        loaded.close()
    np.testing.assert_allclose(a, b, atol=0.02 * np.abs(a).max())


def test_two_sequences_in_one_batch_equal_each_alone(tiny_llama_path):
    loaded = load_model(tiny_llama_path, num_threads=2)
    engine = ForwardEngine(loaded, num_ctx=128, num_batch=64, parallel=2)
    try:
        rng = np.random.default_rng(2)
        x, y = rng.integers(3, 500, 20), rng.integers(3, 500, 13)
        alone_x = _batched(engine, x, seq=0)
        alone_y = _batched(engine, y, seq=1)
        engine.cache.remove(0, 0)
        engine.cache.remove(1, 0)
        both = engine.forward(
            PassInput(
                np.r_[x, y],
                np.r_[np.arange(20), np.arange(13)],
                np.r_[np.zeros(20), np.ones(13)],
                np.array([19, 32]),
            ),
        )
    finally:
        engine.close()
        loaded.close()
    np.testing.assert_allclose(both[0], alone_x, atol=1e-3 * np.abs(alone_x).max())
    np.testing.assert_allclose(both[1], alone_y, atol=1e-3 * np.abs(alone_y).max())


@pytest.mark.parametrize("lengths", [(9, 20, 14), (9, 40, 70)])  # cells seen: equal, unequal
@pytest.mark.parametrize("which", ["tiny_llama_path", "tiny_gemma3_path"])
def test_decoding_sequences_together_is_bit_identical_to_each_alone(which, lengths, request):
    """Several sequences decoding one token each share one stacked attention view; the
    logits must be exactly those each sequence gets alone."""
    loaded = load_model(request.getfixturevalue(which), num_threads=2)
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=128, parallel=3)
    rng = np.random.default_rng(5)
    prompts = [rng.integers(3, 500, n) for n in lengths]
    nexts = rng.integers(3, 500, 3)
    lengths = np.array([len(p) for p in prompts])
    caches = getattr(engine.cache, "caches", [engine.cache])
    try:
        alone = []
        for s, ids in enumerate(prompts):
            engine.forward(
                PassInput(ids, np.arange(len(ids)), np.full(len(ids), s), np.array([len(ids) - 1]))
            )
            one = engine.forward(
                PassInput(nexts[s : s + 1], lengths[s : s + 1], np.array([s]), np.zeros(1))
            )
            assert not any(c.stacked for c in caches)
            alone.append(one[0])
            engine.cache.remove(s, len(ids))  # undo the decode step
        together = engine.forward(PassInput(nexts, lengths, np.arange(3), np.arange(3)))
        assert all(c.stacked for c in caches)
    finally:
        engine.close()
        loaded.close()
    for a, t in zip(alone, together, strict=True):
        assert np.array_equal(a, t)


def test_model_too_large_for_the_budget_fails_at_load(tiny_llama_path):
    loaded = load_model(tiny_llama_path, num_threads=1)
    try:
        with pytest.raises(OutOfMemoryError, match=r"needs .* MiB .* but only .* is available"):
            ForwardEngine(loaded, num_ctx=2048, num_batch=512, memory_limit=1 << 20)
    finally:
        loaded.close()


def test_full_cache_is_an_error_not_a_crash(tiny_llama_path):
    loaded = load_model(tiny_llama_path, num_threads=1)
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=64)
    try:
        cells = engine.cache.cells
        ids = np.arange(3, 3 + 64)
        for start in range(0, cells, 64):
            engine.forward(
                PassInput(ids, np.arange(start, start + 64), np.zeros(64), np.array([63]))
            )
        with pytest.raises(CacheFullError):
            engine.forward(PassInput(ids[:1], np.array([cells]), np.zeros(1), np.array([0])))
        # the engine still works after the error
        engine.cache.remove(0, 0)
        out = engine.forward(PassInput(ids[:4], np.arange(4), np.zeros(4), np.array([3])))
        assert np.isfinite(out).all()
    finally:
        engine.close()
        loaded.close()


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2]) == 2


def test_speculative_checks_never_evict_the_decoding_graph(tiny_llama_path):
    """Checks of drafts (lone rows) of many lengths come between decoding passes: each check
    shape is built once, and the decoding pass's graph stays built through all of them."""
    loaded = load_model(tiny_llama_path, num_threads=1)
    engine = ForwardEngine(loaded, num_ctx=256, num_batch=64)
    try:
        ids = np.array([1, 17, 33, 49])
        engine.forward(PassInput(ids, np.arange(4), np.zeros(4), np.array([3])))
        pos, tok = 4, 5
        built = []
        for drafts in [1, 2, 3, 4, 5, 6, 7, 8] * 2:
            engine.forward(PassInput(np.array([tok]), np.array([pos]), np.zeros(1), np.array([0])))
            pos += 1
            rows = drafts + 1  # the sampled token and its drafts, every row sampled
            engine.forward(
                PassInput(np.full(rows, tok), np.arange(pos, pos + rows), np.zeros(rows),
                          np.arange(rows), lone_rows=frozenset({0}))
            )  # fmt: skip
            engine.cache.reject(0, pos)  # all rejected: the cells stay within one padding
            built.append(engine.graphs_built)
    finally:
        engine.close()
        loaded.close()
    # The prompt's graph, the decoding one and one per check length, each built once: the
    # second round of the same check lengths builds nothing.
    assert built[7] == built[-1] == 2 + 8
