"""The sampler against independent numpy references of each rule."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from hearth.engine.sampling import Sampler, SamplingOptions, log_softmax, top_logprobs

rng = np.random.default_rng(0)


def reference_penalties(logits, history, last_n, repeat, presence, frequency):
    """llama.cpp's penalties sampler, written out plainly."""
    out = logits.astype(np.float64).copy()
    counts = Counter(history[-last_n:] if last_n > 0 else [])
    for token, count in counts.items():
        x = out[token]
        x = x / repeat if x > 0 else x * repeat
        out[token] = x - count * frequency - presence
    return out


@pytest.mark.parametrize("case", range(50))
def test_penalties_change_the_greedy_choice_exactly_as_llama_cpp_defines_them(case):
    r = np.random.default_rng(case)
    logits = r.standard_normal(40).astype(np.float32) * 3
    history = r.integers(0, 40, 30).tolist()
    opts = SamplingOptions(
        temperature=0,
        repeat_penalty=float(r.uniform(1.0, 2.0)),
        repeat_last_n=int(r.integers(0, 40)),
        presence_penalty=float(r.uniform(0, 1.5)),
        frequency_penalty=float(r.uniform(0, 1.0)),
    )
    sampler = Sampler(opts, history=history)
    expected = reference_penalties(
        logits, history, opts.repeat_last_n, opts.repeat_penalty,
        opts.presence_penalty, opts.frequency_penalty,
    )  # fmt: skip
    assert sampler.sample(logits) == int(np.argmax(expected))


def test_without_penalties_greedy_is_argmax():
    logits = rng.standard_normal(1000).astype(np.float32)
    opts = SamplingOptions(temperature=0, repeat_penalty=1.0)
    assert Sampler(opts, history=[int(np.argmax(logits))] * 10).sample(logits) == np.argmax(logits)


def _frequencies(opts: SamplingOptions, logits: np.ndarray, n: int = 20000) -> np.ndarray:
    sampler = Sampler(opts)
    counts = np.bincount([sampler.sample(logits) for _ in range(n)], minlength=len(logits))
    return counts / n


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def test_temperature_sampling_follows_the_softmax():
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0], dtype=np.float32)
    opts = SamplingOptions(temperature=0.7, top_k=0, top_p=1.0, repeat_penalty=1.0, seed=1)
    freq = _frequencies(opts, logits)
    np.testing.assert_allclose(freq, _softmax(logits / 0.7), atol=0.015)


def test_top_k_keeps_only_the_k_most_likely():
    logits = rng.standard_normal(50).astype(np.float32)
    opts = SamplingOptions(temperature=1.5, top_k=3, top_p=1.0, repeat_penalty=1.0, seed=2)
    freq = _frequencies(opts, logits, 6000)
    top3 = set(np.argsort(-logits)[:3].tolist())
    assert set(np.flatnonzero(freq).tolist()) <= top3
    np.testing.assert_allclose(freq[sorted(top3)], _softmax(logits[sorted(top3)] / 1.5), atol=0.03)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.log(probs).astype(np.float32)
    opts = SamplingOptions(temperature=1.0, top_k=0, top_p=0.75, repeat_penalty=1.0, seed=3)
    freq = _frequencies(opts, logits, 6000)
    # 0.5 < 0.75 <= 0.8: the first two tokens, renormalised
    assert freq[2] == 0 and freq[3] == 0
    np.testing.assert_allclose(freq[:2], [0.5 / 0.8, 0.3 / 0.8], atol=0.03)


def test_min_p_drops_tokens_below_a_fraction_of_the_best():
    probs = np.array([0.6, 0.25, 0.1, 0.05])
    logits = np.log(probs).astype(np.float32)
    opts = SamplingOptions(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2, repeat_penalty=1.0)
    freq = _frequencies(opts, logits, 6000)
    assert freq[2] == 0 and freq[3] == 0  # 0.1 and 0.05 < 0.2 * 0.6
    assert freq[0] > 0 and freq[1] > 0


def test_the_same_seed_gives_the_same_draws():
    logits = rng.standard_normal(300).astype(np.float32)

    def draws(seed: int) -> list[int]:
        sampler = Sampler(SamplingOptions(temperature=1.0, seed=seed))
        return [sampler.sample(logits) for _ in range(50)]

    assert draws(42) == draws(42)
    assert draws(42) != draws(43)


def test_log_softmax_and_top_logprobs_match_a_float64_reference():
    logits = (rng.standard_normal(5000) * 4).astype(np.float32)
    x = logits.astype(np.float64)
    ref = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
    np.testing.assert_allclose(log_softmax(logits), ref, atol=1e-5)
    top = top_logprobs(logits, 20)
    assert [t for t, _ in top] == np.argsort(-ref)[:20].tolist()
    np.testing.assert_allclose([lp for _, lp in top], np.sort(ref)[::-1][:20], atol=1e-5)
