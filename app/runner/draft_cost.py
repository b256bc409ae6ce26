"""Whether speculative decoding pays on this runner, from the passes it measured.

A check pass evaluates a sequence's sampled token and its drafted ones, each row computed as
a lone decoding row is (`PassInput.lone_rows`). Where the weights' products take a lone row
as part of a batch (Hearth's kernel on Q4_K, Q8_0, ...), checking 16 rows costs little more
than decoding one, and every accepted draft saves a pass. Where they must take each lone row
on its own (F16/BF16/F32 weights, or quantized ones without Hearth's kernel: `rows_apart` in
ml/ggml.py), a check of 16 rows reads every weight 16 times and costs about what 16 decoding
passes do: even a draft accepted whole saves nothing, a rejected one costs.

`DraftCost` weighs what was measured, per number of sequences in a pass (a decoding pass of
n sequences has n rows; a check pass of n sequences has more):

* Each decoding pass without drafts gives what a pass of n sequences costs (`decoded`).
* Each check pass is measured against the decoding passes of its time, like with like: its
  seconds (the drafter's included) over the median of the last `_REFERENCE` decoding passes
  of as many sequences, so that other work on the machine, which only ever adds time,
  weighs on both sides alike and one lucky fast pass cannot make every check look dear. That
  ratio is what the check cost in decoding passes (`checked`).

Two rules follow:

1. **Cannot pay here** (the runner's drafting goes off for good, with a sentence, `reason`:
   `Runner.speculation()`, the runner's `/info`, and the `speculation_off` of each
   completion's last line, which the service's `/api/ps` shows). A check of R rows produces
   at most R / n tokens per sequence, every draft accepted. Its cost is the lowest ratio
   measured for checks of its shape (other work only ever adds time to a check too; one of
   fewer rows never counts as dearer than one of more). Over the last `_RECENT` checks of
   at least `_MIN_ROWS` rows a sequence (`_MIN_CHECKS` at least), when even that best case
   does not make tokens `_GAIN` times faster than decoding, the weights' products take each
   lone row on its own and drafting cannot pay.
2. **Does not pay now, with this many sequences** (drafting rests for passes of n > 1
   sequences: `pays`; one sequence alone is its own pace's business). Over the last
   `_JUDGE` or more checks of n sequences: the tokens they produced,
   less one for each sequence that waited for its sampled token to draft while the loop
   pipelines (`waits`: it sat out the pass planned meanwhile), against what decoding would
   have produced in their time (n tokens per decoding pass they cost, at their median). When
   that is not `_GAIN` times more, drafting with n sequences (and more) rests for
   `_FIRST_REST` passes of n sequences, twice as long each time it is tried again and still
   does not pay (up to `_MAX_REST`), from the first rest again once it does. A batch of
   several decoding rows already amortizes the weights' reads that drafting saves: on the
   default model, 4 streams drafting produced fewer tokens a second than 4 streams
   decoding, even with most drafts accepted, while one stream gained.

Acceptance for each sequence is its own pace's business (`DraftPace`, drafting.py): a
sequence whose drafts miss backs off in tokens. The speculator (speculation.py) leaves
drafts out of a decoding pass to measure it (`wants_plain`) until `_PLAIN_SAMPLES` such
passes are measured, and every `_REMEASURE` checks after. Nothing here changes the output
(drafts are checked exactly), only its speed.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

__all__ = ["DraftCost"]

_MIN_CHECKS = 8  # check passes weighed before rule 1 decides
_RECENT = 16  # the checks weighed, and the decoding passes kept, per number of sequences
_REFERENCE = 5  # the latest decoding passes whose median a check is measured against
# Rows a sequence's check needs to be weighed by rule 1: with fewer, even a cheap check saves
# too little at best to tell cheap rows from costly ones through the noise of other work.
_MIN_ROWS = 5
_PLAIN_SAMPLES = 3  # decoding passes measured before checks are weighed
_GAIN = 1.1  # drafting goes on only where checks make tokens at least this much faster
_REMEASURE = 8  # checks between measurements of decoding passes without drafts
_JUDGE = 3  # checks of n sequences before rule 2 judges them
_FIRST_REST = 32  # passes drafting with n sequences rests when it did not pay (rule 2)
_MAX_REST = 2048


@dataclass
class _Check:
    """One check pass, measured."""

    rows: int
    tokens: int  # tokens it produced, every sequence of the pass counted
    waits: int  # its drafting sequences that sat out a pipelined pass to draft
    passes: float  # its seconds over the decoding passes' of its time: its cost in them


class DraftCost:
    """See the module docstring: the measured cost of decoding passes and check passes of
    one runner, whether drafting is off (`reason`), and whether it pays with n sequences
    (`pays`)."""

    def __init__(self) -> None:
        self.reason: str | None = None  # why drafting is off; None while it is on
        self.plain: dict[int, deque[float]] = {}  # sequences -> seconds of recent passes
        # (sequences, rows) -> what recent checks of that shape cost, in decoding passes
        self.costs: dict[tuple[int, int], deque[float]] = {}
        self.recent: deque[tuple[int, int, int]] = deque(maxlen=_RECENT)  # (seqs, rows, tokens)
        self.checks = 0  # check passes weighed by rule 1
        self.judged: dict[int, deque[_Check]] = {}  # sequences -> recent checks (rule 2)
        self.passes: dict[int, int] = {}  # sequences -> decoding passes of so many weighed
        self.resting: dict[int, int] = {}  # sequences -> their pass number drafting resumes at
        self._rest: dict[int, int] = {}  # sequences -> the next rest's length in passes
        self._since_plain: dict[int, int] = {}  # sequences -> checks since a plain pass

    @property
    def on(self) -> bool:
        return self.reason is None

    def pays(self, sequences: int) -> bool:
        """Whether a pass of `sequences` decoding sequences may draft: drafting is on and not
        resting for that many, nor for fewer (rule 2: where drafting did not pay with fewer
        sequences, more of them amortize the weights' reads better still)."""
        if self.reason is not None:
            return False
        return all(
            self.passes.get(n, 0) >= resume for n, resume in self.resting.items() if n <= sequences
        )

    def wants_plain(self, sequences: int) -> bool:
        """Whether the next decoding pass of `sequences` sequences should go without drafts,
        to measure it (module docstring)."""
        if len(self.plain.get(sequences, ())) < _PLAIN_SAMPLES:
            return True
        return self._since_plain.get(sequences, 0) >= _REMEASURE

    def decoded(self, sequences: int, seconds: float) -> None:
        """A decoding pass of `sequences` rows, one per sequence, none drafted, took
        `seconds`."""
        self.passes[sequences] = self.passes.get(sequences, 0) + 1
        self.plain.setdefault(sequences, deque(maxlen=_RECENT)).append(seconds)
        self._since_plain[sequences] = 0

    def checked(
        self, sequences: int, rows: int, tokens: int, seconds: float, waits: int = 0
    ) -> None:
        """A decoding pass of `sequences` sequences and `rows` rows, some drafted, produced
        `tokens` tokens in `seconds` (drafting included); `waits` of its drafting sequences
        sat out a pipelined pass to draft. Switches drafting off when checks cannot pay
        (rule 1) and rests it for this many sequences when they did not (rule 2)."""
        self.passes[sequences] = self.passes.get(sequences, 0) + 1
        plain = self.plain.get(sequences, ())
        if self.reason is not None or len(plain) < _PLAIN_SAMPLES:
            return
        self._since_plain[sequences] = self._since_plain.get(sequences, 0) + 1
        reference = statistics.median(list(plain)[-_REFERENCE:])
        check = _Check(rows, tokens, waits, seconds / reference)
        if sequences > 1:
            self._judge(sequences, check)
        if rows < _MIN_ROWS * sequences:
            return  # a short check shows too little of what rows cost to decide on
        self.costs.setdefault((sequences, rows), deque(maxlen=_RECENT)).append(check.passes)
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
                "checks, each against the decoding passes of its time)"
            )

    def _judge(self, sequences: int, check: _Check) -> None:
        """Rule 2 (module docstring) over the recent checks of `sequences` sequences."""
        checks = self.judged.setdefault(sequences, deque(maxlen=_RECENT))
        checks.append(check)
        if len(checks) < _JUDGE:
            return
        made = sum(c.tokens - c.waits for c in checks)
        # Tokens decoding would have made in the same time (the checks' median cost: a check
        # slowed by other work does not outweigh the rest).
        decoding = sequences * len(checks) * statistics.median(c.passes for c in checks)
        if made >= _GAIN * decoding:
            self._rest[sequences] = _FIRST_REST
            return
        rest = self._rest.get(sequences, _FIRST_REST)
        self.resting[sequences] = self.passes[sequences] + rest
        self._rest[sequences] = min(_MAX_REST, 2 * rest)
        checks.clear()  # judged afresh when drafting is tried again

    def _passes(self, sequences: int, rows: int) -> float:
        """What a check of `rows` rows costs in decoding passes of `sequences` sequences:
        the lowest measured for its shape (or for a check of more rows, if lower)."""
        return min(
            min(costs) for (n, r), costs in self.costs.items() if n == sequences and r >= rows
        )
