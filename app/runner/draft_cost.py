"""Whether speculative decoding pays on this runner, from the passes it measured.

A check pass evaluates a sequence's sampled token and its drafted ones, each row computed as
a lone decoding row is (`PassInput.lone_rows`). Where the weights' products take a lone row
as part of a batch (Hearth's kernel on Q4_K, Q8_0, ...), checking 16 rows costs little more
than decoding one, and every accepted draft saves a pass. Where they must take each lone row
on its own (F16/BF16/F32 weights, or quantized ones without Hearth's kernel: `rows_apart` in
ml/ggml.py), a check of 16 rows reads every weight 16 times and costs about what 16 decoding
passes do: even a draft accepted whole saves nothing, a rejected one costs.

`DraftCost` weighs what was measured: decoding passes without drafts give what a pass of so
many sequences costs; each check pass gives its seconds (with the drafter's) and
its rows. Times are taken at their fastest (the minimum of the passes of a shape): other
work on the machine only ever adds time, so the fastest pass is the closest to what the pass
itself costs. A check of R rows then costs k(R) decoding passes (its fastest time over the
fastest decoding pass's; a check of more rows never counts as cheaper), and produces at most
R / sequences tokens per sequence, every draft accepted. Only checks of at least `_MIN_ROWS`
rows a sequence are weighed (the draft length grows while drafts are accepted). Over the
last checks, when even that best case does not make tokens `_GAIN` times faster than
decoding, drafting cannot pay here (the weights' products take each lone row on its own) and
is switched off for the runner, with a sentence saying why (`reason`:
`Runner.speculation()`, the runner's `/info`, and the `speculation_off` of each completion's
last line, which the service's `/api/ps` shows). Where checks are cheap but drafts miss, the
sequence's own pace pauses it (`DraftPace`, drafting.py): acceptance varies with the text, the
cost of a row does not. The speculator (speculation.py) leaves drafts out of a decoding pass to
measure it (`wants_plain`) until `_PLAIN_SAMPLES` such passes are measured, and every
`_REMEASURE` checks after.
Switching drafting off never changes the output (drafts are checked exactly), only its
speed.
"""

from __future__ import annotations

from collections import deque

__all__ = ["DraftCost"]

_MIN_CHECKS = 8  # check passes weighed before deciding
_RECENT = 16  # the checks weighed
# Rows a sequence's check needs to be weighed: with fewer, even a cheap check saves too
# little at best to tell cheap rows from costly ones through the noise of other work.
_MIN_ROWS = 5
_PLAIN_SAMPLES = 3  # decoding passes measured before checks are weighed
_GAIN = 1.1  # drafting stays on only where checks make tokens at least this much faster
_REMEASURE = 8  # checks between measurements of decoding passes without drafts


class DraftCost:
    """See the module docstring: the measured cost of decoding passes and check passes of
    one runner, and whether drafting is off (`reason`)."""

    def __init__(self) -> None:
        self.reason: str | None = None  # why drafting is off; None while it is on
        self.plain: dict[int, list[float]] = {}  # sequences -> seconds of recent passes
        self.fastest: dict[tuple[int, int], float] = {}  # (sequences, rows) -> check seconds
        self.recent: deque[tuple[int, int, int]] = deque(maxlen=_RECENT)  # (seqs, rows, tokens)
        self.checks = 0  # check passes weighed
        self._since_plain: dict[int, int] = {}  # sequences -> checks since a plain pass

    @property
    def on(self) -> bool:
        return self.reason is None

    def wants_plain(self, sequences: int) -> bool:
        """Whether the next decoding pass of `sequences` sequences should go without drafts,
        to measure it (module docstring)."""
        if len(self.plain.get(sequences, ())) < _PLAIN_SAMPLES:
            return True
        return self._since_plain.get(sequences, 0) >= _REMEASURE

    def decoded(self, sequences: int, seconds: float) -> None:
        """A decoding pass of `sequences` rows, one per sequence, none drafted, took
        `seconds`."""
        samples = self.plain.setdefault(sequences, [])
        samples.append(seconds)
        del samples[:-_RECENT]
        self._since_plain[sequences] = 0

    def checked(self, sequences: int, rows: int, tokens: int, seconds: float) -> None:
        """A decoding pass of `sequences` sequences and `rows` rows, some drafted, produced
        `tokens` tokens in `seconds` (drafting included). Switches drafting off when checks
        do not pay."""
        if self.reason is not None or len(self.plain.get(sequences, ())) < _PLAIN_SAMPLES:
            return
        self._since_plain[sequences] = self._since_plain.get(sequences, 0) + 1
        if rows < _MIN_ROWS * sequences:
            return  # a short check shows too little of what rows cost to decide on
        key = (sequences, rows)
        self.fastest[key] = min(seconds, self.fastest.get(key, seconds))
        self.recent.append((sequences, rows, tokens))
        self.checks += 1
        if self.checks < _MIN_CHECKS:
            return
        spent = sum(self._passes(n, r) for n, r, _ in self.recent)  # in decoding passes
        best = sum(r / n for n, r, _ in self.recent)  # decoding passes saved, all accepted
        if best < _GAIN * spent:
            count = len(self.recent)
            rows_each = sum(r for _, r, _ in self.recent) / count
            tokens_each = sum(t for _, _, t in self.recent) / count
            self.reason = (
                f"drafting was switched off: a check of {rows_each:.1f} rows cost what "
                f"{spent / count:.1f} decoding passes do, so it cannot pay even with every "
                f"draft accepted ({tokens_each:.1f} tokens a check were; the last {count} "
                "checks, each pass timed at its fastest)"
            )

    def _passes(self, sequences: int, rows: int) -> float:
        """What a check of `rows` rows costs in decoding passes of `sequences` sequences:
        its fastest time (or that of a check of more rows, if faster) over theirs."""
        check = min(s for (n, r), s in self.fastest.items() if n == sequences and r >= rows)
        return check / min(self.plain[sequences])
