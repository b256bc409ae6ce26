"""Choosing the next token from logits: penalties, temperature, top-k/p, min-p, seeded draws.

Order (llama.cpp's default chain, which users' settings were tuned against): penalties on the
raw logits, then top-k, temperature, softmax, top-p, min-p, and a draw. Temperature 0 is greedy
(after penalties). The same seed and the same logits give the same token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..options import GenerationOptions, default

__all__ = ["SamplingOptions", "Sampler", "log_softmax", "top_logprobs"]


# The sampler's options are a completion's (hearth.options.GenerationOptions: Ollama's names,
# declared there once with their defaults); a field left None takes its declared default.
SamplingOptions = GenerationOptions


def _given(opts: SamplingOptions, name: str) -> Any:
    """Option `name` of `opts`, or its declared default when it is None."""
    value = getattr(opts, name)
    return default(name) if value is None else value


class Sampler:
    """Per-sequence sampler; keeps the penalty window and the random state."""

    def __init__(self, opts: SamplingOptions, history: Iterable[int] = ()) -> None:
        self.opts = opts
        self.temperature = max(0.0, float(_given(opts, "temperature")))
        self.top_k = int(_given(opts, "top_k"))
        self.top_p = min(max(float(_given(opts, "top_p")), 0.0), 1.0)
        self.min_p = min(max(float(_given(opts, "min_p")), 0.0), 1.0)
        self.repeat_penalty = float(_given(opts, "repeat_penalty"))
        self.presence_penalty = float(_given(opts, "presence_penalty"))
        self.frequency_penalty = float(_given(opts, "frequency_penalty"))
        seed = int(_given(opts, "seed"))
        self.rng = np.random.Generator(np.random.PCG64(seed if seed >= 0 else None))
        self._window = max(0, int(_given(opts, "repeat_last_n")))
        self.history: list[int] = list(history)

    @property
    def picks_argmax(self) -> bool:
        """Whether `sample` is the logits' argmax whatever the history: greedy with no
        penalty that could apply (so the engine may pick the token itself:
        PassInput.greedy)."""
        if self.temperature != 0.0:
            return False
        return self._window == 0 or (
            self.repeat_penalty == 1.0
            and self.presence_penalty == 0.0
            and self.frequency_penalty == 0.0
        )

    def accept(self, token: int) -> None:
        """Record a token of the sequence (prompt or generated) for the penalties."""
        self.history.append(token)

    def _penalised(self, logits: np.ndarray) -> np.ndarray:
        repeat, presence, frequency = (
            self.repeat_penalty,
            self.presence_penalty,
            self.frequency_penalty,
        )
        if self._window == 0 or not self.history:
            return logits
        if repeat == 1.0 and presence == 0.0 and frequency == 0.0:
            return logits
        recent = Counter(self.history[-self._window :])
        ids = np.fromiter(recent.keys(), dtype=np.int64, count=len(recent))
        ids = ids[(ids >= 0) & (ids < logits.shape[0])]
        if not len(ids):
            return logits
        counts = np.array([recent[int(i)] for i in ids], dtype=np.float32)
        out = logits.astype(np.float32, copy=True)
        vals = out[ids]
        if repeat != 1.0:
            vals = np.where(vals > 0, vals / repeat, vals * repeat)
        vals = vals - counts * frequency - presence
        out[ids] = vals
        return out

    def sample(self, logits: np.ndarray) -> int:
        """Pick a token id from one row of logits (float32, length = vocabulary)."""
        logits = self._penalised(np.asarray(logits, dtype=np.float32))
        if self.temperature == 0.0:
            return int(np.argmax(logits))
        k = self.top_k
        n = logits.shape[0]
        if 0 < k < n:
            idx = np.argpartition(logits, n - k)[n - k :]
        else:
            idx = np.arange(n)
        vals = logits[idx]
        order = np.argsort(-vals, kind="stable")
        idx, vals = idx[order], vals[order]
        vals = vals / max(self.temperature, 1e-7)
        vals = vals - vals[0]
        probs = np.exp(vals)
        probs /= probs.sum()
        keep = len(probs)
        if self.top_p < 1.0:
            cum = np.cumsum(probs)
            keep = min(keep, int(np.searchsorted(cum, self.top_p, side="left")) + 1)
        if self.min_p > 0.0:
            keep = min(keep, max(1, int(np.count_nonzero(probs >= self.min_p * probs[0]))))
        probs = probs[:keep]
        total = probs.sum()
        if not np.isfinite(total) or total <= 0:
            raise FloatingPointError("sampling failed: the logits are not finite")
        r = self.rng.random() * total
        i = int(np.searchsorted(np.cumsum(probs), r, side="right"))
        return int(idx[min(i, keep - 1)])


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    m = x.max()
    return (x - m - np.log(np.exp(x - m).sum())).astype(np.float32)


def top_logprobs(logits: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k most likely tokens with their log-probabilities (from raw logits)."""
    lp = log_softmax(logits)
    k = max(0, min(k, lp.shape[0]))
    if k == 0:
        return []
    idx = np.argpartition(lp, lp.shape[0] - k)[lp.shape[0] - k :]
    idx = idx[np.argsort(-lp[idx], kind="stable")]
    return [(int(i), float(lp[i])) for i in idx]
