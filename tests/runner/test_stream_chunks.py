"""Stream chunks: fast tokens go out several to a chunk, never later than the interval allows;
slow tokens, the first token, the end and a long pass of another request send at once."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import hearth.runner.sequence as sequence_module
from hearth.engine.sampling import SamplingOptions
from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.protocol import (
    CompletionChunk,
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
)
from hearth.runner.sequence import Sequence, SequenceSettings

from tiny_models import byte_token


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(sequence_module, "time", SimpleNamespace(perf_counter=c))
    return c


def _generate(tok, clock: Clock, gaps_ms: list[float], interval: float, logprobs=False):
    """Feed one byte token per gap (the gap before each token); return the chunks with the
    clock time each was put on the stream, and the final event."""
    settings = SequenceSettings(
        sampling=SamplingOptions(temperature=0, repeat_penalty=1.0),
        stream_interval=interval,
        logprobs=logprobs,
        num_predict=len(gaps_ms),
    )
    seq = Sequence([1], settings, tok, num_ctx=512)
    chunks: list[tuple[float, CompletionChunk]] = []
    done = None

    def drain() -> None:
        nonlocal done
        while not seq.events.empty():
            event = seq.events.get_nowait()
            if event is None:
                continue
            if isinstance(event, CompletionDone):
                done = event
            else:
                chunks.append((clock.now, event))

    text = "".join(chr(ord("a") + i % 26) for i in range(len(gaps_ms)))
    for gap, ch in zip(gaps_ms, text, strict=True):
        clock.now += gap / 1000
        logits = np.zeros(tok.vocab_size, dtype=np.float32)
        logits[byte_token(tok, ord(ch))] = 100.0
        seq.accept_logits(logits)
        drain()
    drain()
    assert done is not None
    return text, chunks, done


def test_fast_tokens_are_sent_several_to_a_chunk_within_the_interval(tok, clock):
    gaps = [10.0] * 40  # 100 tokens a second, 50 ms interval
    text, chunks, done = _generate(tok, clock, gaps, interval=0.05)
    assert "".join(c.content for _, c in chunks) == text  # all of it, in order
    assert chunks[0][1].content == text[0]  # the first token at once
    assert len(chunks) < len(text) / 3  # several tokens to a chunk
    # No text waited longer than the interval: token i was sampled at 10 ms * (i + 1).
    sent = 0
    for at, chunk in chunks:
        oldest = clock_start(clock, gaps) + sum(gaps[: sent + 1]) / 1000
        assert at - oldest <= 0.05 + 1e-9
        sent += len(chunk.content)
    assert done.eval_count == len(text)


def clock_start(clock: Clock, gaps: list[float]) -> float:
    """The clock time before the first gap (the clock ends at start + all gaps)."""
    return clock.now - sum(gaps) / 1000


def test_slow_tokens_and_interval_zero_send_every_token_alone(tok, clock):
    text, chunks, _ = _generate(tok, clock, [80.0] * 10, interval=0.05)
    assert [c.content for _, c in chunks] == list(text)
    text, chunks, _ = _generate(tok, clock, [1.0] * 10, interval=0)
    assert [c.content for _, c in chunks] == list(text)


def test_a_chunk_carries_the_logprobs_of_its_tokens(tok, clock):
    text, chunks, _ = _generate(tok, clock, [5.0] * 30, interval=0.05, logprobs=True)
    assert len(chunks) < len(text)
    for _, chunk in chunks:
        assert "".join(lp.token for lp in chunk.logprobs) == chunk.content


def test_the_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("HEARTH_STREAM_INTERVAL_MS", "0")
    assert SequenceSettings().stream_interval == 0
    monkeypatch.setenv("HEARTH_STREAM_INTERVAL_MS", "120")
    assert SequenceSettings().stream_interval == pytest.approx(0.12)
    monkeypatch.delenv("HEARTH_STREAM_INTERVAL_MS")
    assert SequenceSettings().stream_interval == pytest.approx(0.05)


@pytest.mark.slow
def test_held_text_goes_out_before_another_requests_prompt_is_evaluated(
    tiny_llama_path, monkeypatch
):
    # An interval so long that, without the loop's flush, the text after the first token
    # would arrive only with the end.
    monkeypatch.setenv("HEARTH_STREAM_INTERVAL_MS", "100000")
    runner = Runner(RunnerConfig(str(tiny_llama_path), num_ctx=256, parallel=2, num_batch=32))
    try:
        greedy = CompletionOptions(temperature=0, repeat_penalty=1.0, num_predict=200)
        first = runner.completion(CompletionRequest(tokens=[1, 5, 6, 7], options=greedy))
        deadline = time.monotonic() + 60
        while len(first.generated) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(first.generated) >= 3
        rng = np.random.default_rng(1)
        prompt = [1, *rng.integers(3, 500, 20).tolist()]
        second = runner.completion(
            CompletionRequest(tokens=prompt, options=replace(greedy, num_predict=2))
        )
        events: list[CompletionChunk | CompletionDone] = []
        reader = threading.Thread(target=lambda: _read_all(first, events))
        reader.start()
        _read_all(second, [])
        reader.join(timeout=120)
        chunks = [e for e in events if isinstance(e, CompletionChunk)]
        done = events[-1]
        assert isinstance(done, CompletionDone) and done.eval_count == 200, done
        # The first token alone, the held text flushed before the second prompt's pass,
        # the rest with the end.
        assert len(chunks) >= 3
    finally:
        runner.close()


def _read_all(seq: Sequence, out: list[CompletionChunk | CompletionDone]) -> None:
    while (event := seq.events.get(timeout=120)) is not None:
        assert isinstance(event, CompletionChunk | CompletionDone), event
        out.append(event)
