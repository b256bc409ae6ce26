"""One sequence generating text on a ForwardEngine, reusing its cached prefix between calls.

This is the single-sequence path used by `hearth run` in-process; the multi-sequence batching
loop builds on the same pieces (prefix matching, stop strings, timing).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..sampling import Sampler, SamplingOptions
from ..tokenizer import StreamDecoder, Tokenizer
from .forward import ForwardEngine

__all__ = ["GenerateOptions", "GenerationStats", "Session", "StopMatcher", "common_prefix"]


@dataclass(frozen=True)
class GenerateOptions:
    num_predict: int = -1  # -1: until end of turn or the context is full
    stop: tuple[str, ...] = ()
    sampling: SamplingOptions = field(default_factory=SamplingOptions)


@dataclass
class GenerationStats:
    prompt_tokens: int = 0  # tokens in the prompt
    prompt_cached: int = 0  # of which came from the cache
    prompt_seconds: float = 0.0
    eval_tokens: int = 0
    eval_seconds: float = 0.0
    done_reason: str = ""

    @property
    def prompt_evaluated(self) -> int:
        return self.prompt_tokens - self.prompt_cached


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n]) != np.asarray(b[:n])
    idx = np.flatnonzero(x)
    return int(idx[0]) if len(idx) else n


class StopMatcher:
    """Holds back text that might be the start of a stop string; cuts at a full match."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, whether a stop string matched)."""
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        cut = min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            out = self.pending[:cut]
            self.pending = ""
            return out, True
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(out) :]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class Session:
    """See the module docstring. `tokens` is what the cache holds for this sequence."""

    def __init__(self, engine: ForwardEngine, tokenizer: Tokenizer, seq: int = 0) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.seq = seq
        self.tokens: list[int] = []
        self.stats = GenerationStats()

    def _forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate `tokens` after what the cache holds; the logits after the last one."""
        n = len(tokens)
        start = len(self.tokens)
        positions = np.arange(start, start + n, dtype=np.int32)
        seqs = np.full(n, self.seq, dtype=np.int32)
        outputs = np.array([n - 1], dtype=np.int32)  # a pass always yields at least one row
        logits = self.engine.forward(np.asarray(tokens, np.int32), positions, seqs, outputs)
        self.tokens.extend(int(t) for t in tokens)
        return logits[0]

    def evaluate(self, prompt: Sequence[int]) -> np.ndarray:
        """Bring the cache to `prompt` (reusing the common prefix) and return the logits that
        follow it."""
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) > self.engine.num_ctx:
            raise ValueError(
                f"the prompt has {len(prompt)} tokens but the context holds "
                f"{self.engine.num_ctx}; raise num_ctx or shorten the prompt"
            )
        keep = common_prefix(self.tokens, prompt)
        if keep == len(prompt):
            keep -= 1  # at least one token must be evaluated to get logits
        cache = self.engine.cache
        if keep and not cache.can_resume(self.seq, keep):
            keep = 0
        cache.remove(self.seq, keep)
        self.tokens = self.tokens[:keep]
        self.stats = GenerationStats(prompt_tokens=len(prompt), prompt_cached=keep)
        rest = list(prompt[keep:])
        step = self.engine.num_batch
        for i in range(0, len(rest), step):
            logits = self._forward(rest[i : i + step])
        return logits

    def generate(self, prompt: Sequence[int], opts: GenerateOptions | None = None) -> Iterator[str]:
        """Yield the reply's text as it is produced; `stats` is complete when it ends."""
        opts = opts or GenerateOptions()
        t0 = time.perf_counter()
        logits = self.evaluate(prompt)
        t1 = time.perf_counter()
        self.stats.prompt_seconds = t1 - t0
        sampler = Sampler(opts.sampling, history=prompt)
        decoder = StreamDecoder(self.tokenizer)
        stops = StopMatcher(opts.stop)
        produced = 0
        reason = "stop"
        matched = False
        while True:
            token = sampler.sample(logits)
            sampler.accept(token)
            if self.tokenizer.is_eos(token):
                break
            produced += 1
            text, matched = stops.feed(decoder.feed(token))
            if text:
                yield text
            if matched:
                break
            if 0 <= opts.num_predict <= produced:
                reason = "length"
                break
            if len(self.tokens) + 1 > self.engine.num_ctx:
                reason = "length"
                break
            logits = self._forward([token])
        if not matched:
            tail, matched = stops.feed(decoder.flush())
            if not matched:
                tail += stops.flush()
            if tail:
                yield tail
        self.stats.eval_tokens = produced
        self.stats.eval_seconds = time.perf_counter() - t1
        self.stats.done_reason = reason
