"""Whether speculative decoding pays on this runner, from the passes it measured.

A check pass evaluates a sequence's sampled token and its drafted ones, each row computed as
a lone decoding row is (`PassInput.lone_rows`). Where the weights' products take a lone row
as part of a batch (Hearth's kernel on Q4_K, Q8_0, ...), checking 16 rows costs little more
than decoding one, and every accepted draft saves a pass. Where they must take each lone row
on its own (F16/BF16/F32 weights, or quantized ones without Hearth's kernel: `rows_apart` in
ml/ggml.py), a check of 16 rows reads every weight 16 times and costs about what 16 decoding
passes do: even a draft accepted whole saves nothing, a rejected one costs.

`DraftCost` weighs what was measured, not acceptance alone: each decoding pass without
drafts gives the seconds a pass of that many sequences takes; each check pass gives its
seconds (with the draft model's, if any) and the tokens it produced (accepted drafts plus
the sampled token of each sequence in it). Decoding would have produced those tokens in
`tokens / sequences` passes. Over the last checks (a decaying sum), when the checks took
longer than decoding would have (less than `_GAIN` faster), drafting is switched off for the
runner, with a sentence saying why (`reason`: `Runner.speculation()`, the runner's `/info`,
and the `speculation_off` of each completion's last line, which the service's `/api/ps`
shows). Until a pass of the check's size without drafts has been measured, the loop leaves
drafts out of one pass to measure it (`wants_plain`); it measures again every `_REMEASURE`
checks. Switching drafting off never changes the output (drafts are checked exactly), only
its speed.
"""

from __future__ import annotations

__all__ = ["DraftCost"]

_MIN_CHECKS = 8  # check passes weighed before deciding
_DECAY = 0.9  # weight of the older checks in the sums, per check (about the last ten count)
_ALPHA = 0.25  # weight of a new measurement in a decoding pass's average
_GAIN = 1.1  # drafting stays on only where checks make tokens at least this much faster
_REMEASURE = 16  # checks between measurements of decoding passes without drafts


class DraftCost:
    """See the module docstring: the measured cost of decoding passes and check passes of
    one runner, and whether drafting is off (`reason`)."""

    def __init__(self) -> None:
        self.reason: str | None = None  # why drafting is off; None while it is on
        self.plain: dict[int, float] = {}  # sequences in a decoding pass -> its seconds
        self.checks = 0  # check passes weighed
        self._spent = 0.0  # decaying sums over checks: their seconds,
        self._would = 0.0  # and the seconds decoding would have taken for their tokens
        self._tokens = 0.0  # and their tokens
        self._since_plain: dict[int, int] = {}  # sequences -> checks since its last plain pass

    @property
    def on(self) -> bool:
        return self.reason is None

    def wants_plain(self, sequences: int) -> bool:
        """Whether the next decoding pass of `sequences` sequences should go without drafts:
        its cost without them is not measured yet, or not for `_REMEASURE` checks."""
        if sequences not in self.plain:
            return True
        return self._since_plain.get(sequences, 0) >= _REMEASURE

    def decoded(self, sequences: int, seconds: float) -> None:
        """A decoding pass of `sequences` rows, one per sequence, none drafted, took
        `seconds`."""
        old = self.plain.get(sequences)
        self.plain[sequences] = seconds if old is None else old + _ALPHA * (seconds - old)
        self._since_plain[sequences] = 0

    def checked(self, sequences: int, tokens: int, seconds: float) -> None:
        """A decoding pass of `sequences` sequences, some with drafts, produced `tokens`
        tokens in `seconds` (drafting included). Switches drafting off when checks do not
        pay."""
        plain = self.plain.get(sequences)
        if plain is None or self.reason is not None:
            return
        self._since_plain[sequences] = self._since_plain.get(sequences, 0) + 1
        self._spent = _DECAY * self._spent + seconds
        self._would = _DECAY * self._would + tokens * plain / sequences
        self._tokens = _DECAY * self._tokens + tokens
        self.checks += 1
        if self.checks >= _MIN_CHECKS and self._would < _GAIN * self._spent:
            per_token = 1000 * self._spent / self._tokens
            decoding = 1000 * self._would / self._tokens
            self.reason = (
                f"drafting was switched off: checking drafted tokens took {per_token:.2f} ms "
                f"a token where decoding takes {decoding:.2f} ms (measured over the last "
                f"{min(self.checks, 10)} checks)"
            )
