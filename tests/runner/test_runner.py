"""The batching loop with real models: many sequences, prefix reuse, shifts, stops, seeds."""

from __future__ import annotations

import time

import numpy as np
import pytest

from hearth.runner.core import RequestError, Runner, RunnerConfig
from hearth.runner.protocol import (
    CompletionChunk,
    CompletionOptions,
    CompletionRequest,
)

from support.runner import collect


def greedy(**kw) -> CompletionOptions:
    return CompletionOptions(temperature=0, repeat_penalty=1.0, **kw)


@pytest.fixture(scope="module")
def gemma(gemma3_path):
    runner = Runner(
        RunnerConfig(str(gemma3_path), num_ctx=512, parallel=4, num_batch=64, threads=2)
    )
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def llama(tiny_llama_path):
    runner = Runner(RunnerConfig(str(tiny_llama_path), num_ctx=256, parallel=4, num_batch=32))
    yield runner
    runner.close()


PROMPTS = ["The capital of France is", "Once upon a time", "def add(a, b):", "Rain falls because"]


def _requests(runner: Runner, n_predict: int) -> list[CompletionRequest]:
    if runner.architecture == "gemma3":
        return [CompletionRequest(prompt=p, options=greedy(num_predict=n_predict)) for p in PROMPTS]
    rng = np.random.default_rng(0)
    return [
        CompletionRequest(
            tokens=[1, *rng.integers(3, 500, n).tolist()], options=greedy(num_predict=n_predict)
        )
        for n in (4, 11, 23, 40)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gemma", "llama"])
def test_four_sequences_together_give_exactly_what_each_gives_alone(which, request):
    runner = request.getfixturevalue(which)
    reqs = _requests(runner, 32)
    alone = [collect(runner.completion(r)) for r in reqs]
    together = [runner.completion(r) for r in reqs]  # submitted at once, decoded in one batch
    results = [collect(s) for s in together]
    for (a_text, a_done), (t_text, t_done) in zip(alone, results, strict=True):
        assert t_text == a_text
        assert t_done.context == a_done.context  # the same token ids
        assert t_done.eval_count == 32
    assert runner.loop.max_batch_seen >= 4


@pytest.fixture(scope="module")
def llama_pipelined(tiny_llama_path):
    """The loop that builds batch N+1 while N computes (on when a core is spare)."""
    config = RunnerConfig(
        str(tiny_llama_path), num_ctx=256, parallel=4, num_batch=32, threads=1, pipelined=True
    )
    runner = Runner(config)
    assert runner.loop.pipelined
    yield runner
    runner.close()


@pytest.mark.slow
def test_the_pipelined_loop_gives_exactly_what_the_serial_one_gives(llama, llama_pipelined):
    # Different lengths: sequences end while their next input is already planned.
    reqs = [
        CompletionRequest(tokens=r.tokens, options=greedy(num_predict=n))
        for r, n in zip(_requests(llama, 0), (24, 7, 13, 30), strict=True)
    ]
    serial = [collect(llama.completion(r)) for r in reqs]
    for _ in range(2):  # twice: the second time from the prompt cache
        results = [collect(s) for s in [llama_pipelined.completion(r) for r in reqs]]
        for (s_text, s_done), (p_text, p_done) in zip(serial, results, strict=True):
            assert p_text == s_text
            assert p_done.context == s_done.context
            assert p_done.eval_count == s_done.eval_count
    assert llama_pipelined.loop.max_batch_seen >= 4
    _, again = collect(llama_pipelined.completion(reqs[3]))  # alone, after the others
    assert again.context == serial[3][1].context


@pytest.mark.slow
def test_the_pipelined_loop_shifts_the_context_exactly_as_the_serial_one(llama, llama_pipelined):
    """A context shift rewrites the keys of the cache, which a pass in flight also writes: it
    waits for that pass (or the shifted sequence, and the others, would differ)."""
    n_ctx = llama.engine.num_ctx
    reqs = _requests(llama, n_ctx + 40)
    serial = [collect(llama.completion(r)) for r in reqs]
    assert all(done.shifted for _, done in serial)
    results = [collect(s) for s in [llama_pipelined.completion(r) for r in reqs]]
    for (s_text, s_done), (p_text, p_done) in zip(serial, results, strict=True):
        assert p_done.shifted and p_text == s_text
        assert p_done.context == s_done.context


@pytest.mark.slow
def test_a_long_prompt_does_not_starve_a_short_one(llama):
    rng = np.random.default_rng(3)
    long_req = CompletionRequest(
        tokens=[1, *rng.integers(3, 500, 230).tolist()], options=greedy(num_predict=4)
    )
    short_req = CompletionRequest(tokens=[1, 5, 6, 7], options=greedy(num_predict=4))
    with llama.loop._wake:  # both arrive before the loop looks: the long one is first in line
        seqs = {"long": llama.completion(long_req), "short": llama.completion(short_req)}
    ended = {}
    for name, seq in seqs.items():
        _, done = collect(seq)
        # When the loop finished it, on the loop's own clock (not when a reader thread woke).
        ended[name] = seq.t_start + (done.prompt_eval_duration + done.eval_duration) / 1e9
    # 231 prompt tokens at 32 per batch take 8 batches; round robin serves the short one first.
    assert ended["short"] < ended["long"]
    assert llama.loop.max_batch_seen <= llama.loop.num_batch  # shared between the two


@pytest.mark.parametrize("num_batch", [1, 2])
def test_a_batch_too_small_for_runs_of_two_still_takes_the_prompt(tiny_llama_path, num_batch):
    """Prompt rows go in runs of two, but not when the batch holds fewer than a run: the live
    fuzz run's num_batch 1 spun the loop for ever (num_batch 2: on an odd prompt)."""
    config = RunnerConfig(str(tiny_llama_path), num_ctx=64, parallel=1, num_batch=num_batch)
    runner = Runner(config)
    try:
        seq = runner.completion(
            CompletionRequest(tokens=[1, 5, 6, 7, 8], options=greedy(num_predict=2))
        )
        _, done = collect(seq)
        assert done.eval_count == 2
    finally:
        runner.close()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gemma", "llama"])
def test_a_second_turn_evaluates_only_the_new_tokens(which, request):
    runner = request.getfixturevalue(which)
    first = _requests(runner, 16)[2]
    _, done = collect(runner.completion(first))
    history = done.context  # prompt + reply
    follow = CompletionRequest(tokens=history + [7, 8, 9, 10, 11], options=greedy(num_predict=4))
    _, done2 = collect(runner.completion(follow))
    # The reply's last token was sampled but never evaluated, so it is new to the cache too.
    assert done2.prompt_cached == len(history) - 1
    assert done2.prompt_eval_count == 6


@pytest.mark.slow
@pytest.mark.parametrize("which", ["gemma", "llama"])
def test_generation_continues_past_num_ctx_through_a_shift(which, request):
    runner = request.getfixturevalue(which)
    n_ctx = runner.engine.num_ctx
    req = _requests(runner, n_ctx + 40)[0]
    text, done = collect(runner.completion(req))
    assert done.shifted is True
    prompt_len = len(req.tokens) if req.tokens else done.prompt_eval_count
    assert prompt_len + done.eval_count > n_ctx + 16  # went on well past the context
    # A random model may sample its end-of-text token after the shift; else it ran to the limit.
    if done.done_reason == "length":
        assert done.eval_count == n_ctx + 40
    else:
        assert done.done_reason == "stop"  # no stop strings were given: end of text
    assert len(text) > 0


def test_a_shift_re_ropes_the_kept_keys(tiny_llama_path):
    """Discarding the middle of a sequence moves later keys to new positions: layer 0's keys
    then equal a fresh evaluation of the kept tokens, and rotating every layer's moved keys
    back by the same delta gives the original keys."""
    from hearth.engine.forward import ForwardEngine
    from hearth.engine.input import PassInput
    from hearth.engine.ml import DType
    from hearth.engine.prompt_cache import InputCache
    from hearth.plugins.registry import load_installed_model as load_model

    loaded = load_model(tiny_llama_path, num_threads=1)
    engine = ForwardEngine(loaded, num_ctx=64, num_batch=64, parallel=2)
    cache = engine.cache
    try:
        slots = InputCache(cache, 2, 64)
        ids = np.random.default_rng(4).integers(3, 500, 63).tolist()
        slot, _ = slots.acquire(ids)
        engine.forward(PassInput(np.array(ids), np.arange(63), np.zeros(63), np.array([62])))
        slot.set(ids)
        before = {layer: k.numpy().copy() for layer, k in cache._keys.items()}
        discard = slots.shift(slot, num_keep=4)
        assert discard == 29 and len(slot.tokens) == 34
        moved = np.flatnonzero((cache.cell_pos >= 4) & (cache.cell_seqs == 1))
        assert sorted(cache.cell_pos[moved].tolist()) == list(range(4, 34))
        after = {layer: k.numpy().copy() for layer, k in cache._keys.items()}
        # layer 0: the same keys as evaluating the kept tokens from scratch (in sequence 1)
        engine.forward(PassInput(np.array(slot.tokens), np.arange(34), np.ones(34), np.array([33])))
        fresh = cache._keys[0].numpy()
        for cell in moved:
            twin = cache.region + int(cache.cell_pos[cell])
            np.testing.assert_allclose(after[0][cell], fresh[twin], atol=4e-3)
        # every layer: rotating back by +29 restores the keys computed before the shift
        model = loaded.model
        for layer, k_after in after.items():
            ctx = engine.backend.new_context()
            try:
                keys = ctx.from_numpy(k_after[moved].astype(np.float32))
                delta = ctx.from_numpy(np.full(len(moved), discard, np.int32))
                back = model.shift(ctx, layer, keys, delta)
                ctx.compute(back)
                restored = back.numpy()
            finally:
                ctx.close()
            np.testing.assert_allclose(restored, before[layer][moved], atol=4e-3)
        assert cache.dtype == DType.F16
    finally:
        engine.close()
        loaded.close()


@pytest.mark.slow
def test_stop_strings_cut_the_text_and_the_cache(gemma):
    req = CompletionRequest(prompt="def add(a, b):", options=greedy(num_predict=32, stop=["def "]))
    text, done = collect(gemma.completion(req))
    assert "def " not in text and done.done_reason == "stop"
    # what was sent is all the cache keeps: the follow-up reuses exactly prompt + sent reply
    assert gemma.tokenizer.decode(done.context).endswith(text)
    again = CompletionRequest(tokens=done.context + [108], options=greedy(num_predict=1))
    _, done2 = collect(gemma.completion(again))
    assert done2.prompt_cached >= len(done.context) - 1


@pytest.mark.slow
def test_same_seed_same_text_and_other_seeds_differ(gemma):
    def sample(seed: int) -> str:
        opts = CompletionOptions(temperature=1.0, seed=seed, num_predict=24, top_k=100)
        return collect(
            gemma.completion(CompletionRequest(prompt="Once upon a time", options=opts))
        )[0]

    assert sample(7) == sample(7)
    assert len({sample(7), sample(8), sample(9)}) >= 2


def test_a_too_long_prompt_is_refused_while_another_request_finishes(llama):
    ok = llama.completion(CompletionRequest(tokens=[1, 5, 6], options=greedy(num_predict=8)))
    with pytest.raises(RequestError, match="context holds 256"):
        llama.completion(CompletionRequest(tokens=[1] + [5] * 400, truncate=False))
    _, done = collect(ok)
    assert done.eval_count == 8


def test_a_sequence_that_fills_its_context_without_shift_stops_while_others_go_on(llama):
    filling = _requests(llama, 1000)[0]  # greedy on this prompt never reaches end-of-turn
    filling.shift = False
    full = llama.completion(filling)
    other = llama.completion(CompletionRequest(tokens=[1, 9, 9], options=greedy(num_predict=20)))
    _, done_full = collect(full)
    _, done_other = collect(other)
    assert done_full.done_reason == "length" and done_full.shifted is False
    assert len(filling.tokens) + done_full.eval_count == 257  # up to the context, not beyond
    assert done_other.eval_count == 20 and done_other.done_reason == "length"


def test_truncation_keeps_num_keep_and_the_tail_and_says_so(llama):
    prompt = [1] + list(range(3, 403))
    req = CompletionRequest(tokens=prompt, options=greedy(num_predict=2, num_keep=5))
    _, done = collect(llama.completion(req))
    assert done.truncated is True
    ctx = done.context[: -done.eval_count or None]
    assert ctx[:5] == prompt[:5] and ctx[-10:] == prompt[-10:] and len(ctx) < 256


def test_logprobs_come_from_the_raw_logits(llama):
    req = CompletionRequest(
        tokens=[1, 5, 6, 7], options=greedy(num_predict=3), logprobs=True, top_logprobs=5
    )
    seq = llama.completion(req)
    chunks = []
    while (event := seq.events.get(timeout=60)) is not None:
        chunks.append(event)
    lps = [lp for c in chunks if isinstance(c, CompletionChunk) for lp in c.logprobs or []]
    assert len(lps) == 3
    for lp in lps:
        tops = lp.top_logprobs
        assert len(tops) == 5
        assert tops[0].logprob >= tops[-1].logprob
        # greedy: the chosen token is the most likely one, with the top logprob
        assert lp.logprob == pytest.approx(tops[0].logprob)
        assert sum(np.exp(t.logprob) for t in tops) <= 1.0 + 1e-5


def test_cancelling_frees_the_slot(llama):
    seq = llama.completion(CompletionRequest(tokens=[1, 5], options=greedy(num_predict=10_000)))
    seq.events.get(timeout=60)
    seq.cancelled.set()
    while seq.events.get(timeout=60) is not None:
        pass
    deadline = time.time() + 10
    while any(s.in_use for s in llama.loop.slots.slots) and time.time() < deadline:
        time.sleep(0.01)
    assert not any(s.in_use for s in llama.loop.slots.slots)


@pytest.mark.slow
def test_embeddings_match_llama_cpp(gemma3_path, gemma, tmp_path):
    from oracle import run_oracle

    texts = ["The sky is blue.", "Hearth runs language models on your own machine.", "日本語"]
    oracle = run_oracle("llamacpp_embed", {"model": str(gemma3_path), "texts": texts}, tmp_path)
    for i, _ in enumerate(texts):
        ids = [int(t) for t in oracle[f"ids_{i}"]]
        seq = gemma.embedding(ids)
        result = seq.events.get(timeout=120)
        ours = np.asarray(result["embedding"], dtype=np.float32)
        theirs = oracle[f"emb_{i}"]
        assert result["prompt_eval_count"] == len(ids)
        assert ours.shape == theirs.shape == (640,)
        assert float(ours @ theirs) > 0.9999
        np.testing.assert_allclose(np.linalg.norm(ours), 1.0, rtol=1e-5)


def test_embedding_longer_than_the_context_is_truncated_or_refused(llama):
    seq = llama.embedding(list(range(3, 403)), truncate=True)
    result = seq.events.get(timeout=120)
    assert result["prompt_eval_count"] == 256
    with pytest.raises(RequestError, match="400 tokens but the context holds 256"):
        llama.embedding(list(range(3, 403)), truncate=False)


def test_greedy_sequences_take_the_engines_picks_and_get_the_same_tokens(llama, monkeypatch):
    """A greedy sequence without penalties, grammar or logprobs lets the engine pick its
    tokens (PassInput.greedy: on a device only the ids cross); the tokens are those the
    sampler picks from the logits (the same request with logprobs on, which needs them,
    and with a repeat penalty of a window too short to apply)."""
    passes: list[bool] = []
    plan = llama.engine.plan

    def spy(inputs):
        if len(inputs.tokens) == 1:
            passes.append(inputs.greedy)
        return plan(inputs)

    monkeypatch.setattr(llama.engine, "plan", spy)
    tokens = [1, *np.random.default_rng(4).integers(3, 500, 9).tolist()]

    def run(**kw) -> tuple[list[int], list[bool]]:
        passes.clear()
        _, done = collect(llama.completion(CompletionRequest(tokens=tokens, options=kw["o"])))
        return done.context[len(tokens) :], list(passes)

    picked, picked_passes = run(o=greedy(num_predict=24))
    assert picked_passes and all(picked_passes)
    logits = CompletionRequest(tokens=tokens, options=greedy(num_predict=24), logprobs=True)
    passes.clear()
    _, done = collect(llama.completion(logits))
    assert passes and not any(passes)  # logprobs need the logits
    assert done.context[len(tokens) :] == picked
    penalised = CompletionOptions(temperature=0, repeat_penalty=1.3, num_predict=8)
    run(o=penalised)
    assert not any(passes)  # a penalty changes the argmax: the sampler picks
