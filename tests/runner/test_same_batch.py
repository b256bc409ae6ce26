"""SameBatch runs (an image's positions) are never split: by batching, truncation, the prompt
cache or a context shift. Real batching loop on a tiny llama; slot logic on a recording cache."""

from __future__ import annotations

import numpy as np
import pytest

from hearth.engine.kvcache import MAX_POS
from hearth.engine.prompt_cache import InputCache, ReprocessInputs, group_start
from hearth.engine.sampling import SamplingOptions
from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.sequence import PromptTooLongError, Sequence, SequenceSettings

from support.runner import collect
from support.slots import RecordingCache


@pytest.fixture(scope="module")
def llama(tiny_llama_path):
    runner = Runner(RunnerConfig(str(tiny_llama_path), num_ctx=256, parallel=2, num_batch=32))
    yield runner
    runner.close()


def _greedy(num_predict: int = 4) -> SequenceSettings:
    return SequenceSettings(sampling=SamplingOptions(temperature=0.0), num_predict=num_predict)


def _submit(runner: Runner, prompt: list[int], marks: list[int] | None = None) -> Sequence:
    seq = Sequence(prompt, _greedy(), runner.tokenizer, runner.engine.num_ctx, same_batch=marks)
    runner.loop.submit(seq)
    return seq


def _batches_of(runner: Runner, monkeypatch) -> list[list[int]]:
    """Record each planned batch's positions."""
    seen: list[list[int]] = []
    plan = runner.engine.plan

    def spy(inputs):
        seen.append([int(p) for p in inputs.positions])
        return plan(inputs)

    monkeypatch.setattr(runner.engine, "plan", spy)
    return seen


def test_group_start():
    marks = [0, 0, 3, 0, 0, 0, 0, 1, 0]  # runs: inputs 2..5 and 7..8
    assert [group_start(marks, n) for n in range(10)] == [0, 1, 2, 2, 2, 2, 6, 7, 7, 9]
    assert group_start([0] * 5, 4) == 4


@pytest.mark.slow
def test_a_run_is_never_split_across_batches_and_changes_no_numbers(llama, monkeypatch):
    rng = np.random.default_rng(11)
    prompt = [1, *rng.integers(3, 500, 59).tolist()]
    marks = [0] * 60
    marks[25] = 9  # inputs 25..34 in one batch; batches of 32 would cut at 32
    batches = _batches_of(llama, monkeypatch)
    text, done = collect(_submit(llama, prompt, marks))
    plain, _ = collect(_submit(llama, prompt))  # (from the prompt cache: the same numbers)
    prompt_batches = [b for b in batches if len(b) > 1][:3]
    assert all(set(range(25, 35)) <= set(b) or not set(range(25, 35)) & set(b) for b in batches)
    assert prompt_batches[0] == list(range(25))  # cut before the run, not inside it
    assert all(len(b) <= 32 for b in batches)
    assert text == plain  # the split does not change the numbers
    assert done.prompt_eval_count == 60


@pytest.mark.slow
def test_a_run_longer_than_a_batch_fails_that_request_only(llama):
    rng = np.random.default_rng(12)
    prompt = [1, *rng.integers(3, 500, 49).tolist()]
    marks = [0] * 50
    marks[5] = 40  # 41 inputs, a batch holds 32
    bad = _submit(llama, prompt, marks)
    good = _submit(llama, prompt)
    with pytest.raises(RuntimeError, match=r"41 inputs .* one batch but a batch holds 32"):
        collect(bad)
    _, done = collect(good)
    assert done.eval_count == 4


def test_truncation_drops_a_cut_run_whole_and_refuses_one_inside_num_keep(llama):
    tok = llama.tokenizer
    prompt = list(range(3, 3 + 300))
    marks = [0] * 300
    # num_ctx 256: room 192, keep 4, so the tail would start at 300 - 188 = 112
    marks[110] = 5  # inputs 110..115: cut by the tail start, dropped whole
    settings = SequenceSettings(num_keep=4)
    seq = Sequence(prompt, settings, tok, 256, same_batch=marks)
    assert seq.truncated
    assert seq.prompt == prompt[:4] + prompt[116:]
    assert seq.marks == [0] * len(seq.prompt)
    inside = [0] * 300
    inside[2] = 4  # inputs 2..6 straddle num_keep 4
    with pytest.raises(PromptTooLongError, match="num_keep ends inside an image"):
        Sequence(prompt, settings, tok, 256, same_batch=inside)
    with pytest.raises(ValueError, match="one count per prompt input"):
        Sequence(prompt[:10], settings, tok, 256, same_batch=[0, 0, 0, 0, 0, 0, 0, 0, 0, 5])


def test_the_prompt_cache_resumes_before_a_run_not_inside_it():
    cache = RecordingCache()
    slots = InputCache(cache, 1, 2048)  # type: ignore[arg-type]
    slots.slots[0].set(list(range(1, 21)))  # what the cache holds
    prompt = [*range(1, 16), 99, 98, 97, 96, 95]  # shares 15 tokens
    marks = [0] * 20
    marks[12] = 5  # inputs 12..17: the shared prefix ends inside
    slot, cached = slots.acquire(prompt, marks=marks)
    assert cached == 12
    assert slot.tokens == prompt[:12] and slot.marks == marks[:12]
    assert cache.calls[-1] == ("remove", 0, 12, MAX_POS)


def test_a_shift_never_cuts_a_run():
    cache = RecordingCache()
    slots = InputCache(cache, 1, 10)  # type: ignore[arg-type]
    slot = slots.slots[0]
    marks = [0] * 10
    marks[4] = 3  # inputs 4..7; a plain shift would discard 2..5
    slot.set(range(1, 11), marks)
    assert slots.shift(slot, 2) == 6
    assert slot.tokens == [1, 2, 9, 10] and slot.marks == [0, 0, 0, 0]
    failing = InputCache(RecordingCache(shift_fails=True), 1, 10)  # type: ignore[arg-type]
    failing.slots[0].set(range(1, 11), marks)
    with pytest.raises(ReprocessInputs) as err:
        failing.shift(failing.slots[0], 2)
    assert err.value.kept == [1, 2, 9, 10] and err.value.marks == [0, 0, 0, 0]
