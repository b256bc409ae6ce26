"""Choosing the next token from logits: penalties, temperature, top-k/p, min-p, seeded draws.

Order (llama.cpp's default chain, which users' settings were tuned against): penalties on the
raw logits, then top-k, temperature, softmax, top-p, min-p, and a draw. Temperature 0 is greedy
(after penalties). The same seed and the same logits give the same token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["SamplingOptions", "Sampler", "log_softmax", "top_logprobs"]


@dataclass(frozen=True)
class SamplingOptions:
    """Ollama's option names and defaults."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    seed: int = -1
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0


class Sampler:
    """Per-sequence sampler; keeps the penalty window and the random state."""

    def __init__(self, opts: SamplingOptions, history: Iterable[int] = ()) -> None:
        self.opts = opts
        self.temperature = max(0.0, opts.temperature)
        self.top_p = min(max(opts.top_p, 0.0), 1.0)
        self.min_p = min(max(opts.min_p, 0.0), 1.0)
        seed = opts.seed if opts.seed >= 0 else None
        self.rng = np.random.Generator(np.random.PCG64(seed))
        last_n = opts.repeat_last_n
        self._window = max(0, last_n)
        self.history: list[int] = list(history)

    def accept(self, token: int) -> None:
        """Record a token of the sequence (prompt or generated) for the penalties."""
        self.history.append(token)

    def _penalised(self, logits: np.ndarray) -> np.ndarray:
        o = self.opts
        if self._window == 0 or not self.history:
            return logits
        if o.repeat_penalty == 1.0 and o.presence_penalty == 0.0 and o.frequency_penalty == 0.0:
            return logits
        recent = Counter(self.history[-self._window :])
        ids = np.fromiter(recent.keys(), dtype=np.int64, count=len(recent))
        ids = ids[(ids >= 0) & (ids < logits.shape[0])]
        if not len(ids):
            return logits
        counts = np.array([recent[int(i)] for i in ids], dtype=np.float32)
        out = logits.astype(np.float32, copy=True)
        vals = out[ids]
        if o.repeat_penalty != 1.0:
            vals = np.where(vals > 0, vals / o.repeat_penalty, vals * o.repeat_penalty)
        vals = vals - counts * o.frequency_penalty - o.presence_penalty
        out[ids] = vals
        return out

    def sample(self, logits: np.ndarray) -> int:
        """Pick a token id from one row of logits (float32, length = vocabulary)."""
        logits = self._penalised(np.asarray(logits, dtype=np.float32))
        if self.temperature == 0.0:
            return int(np.argmax(logits))
        k = self.opts.top_k
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
