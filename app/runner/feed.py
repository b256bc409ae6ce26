"""What the batching loop feeds each active sequence's KV cache, and how far it has got.

A sequence (sequence.py) owns its output; the loop owns its input side: an `InputFeed` per
active sequence holds its slot (the KV-cache sequence, see prompt_cache.py), the inputs still
to evaluate (`Inputs`: ids with their same-batch marks, edited together), how many generated
tokens have been evaluated into the cache, and the state of a pipelined placeholder (the
next token's input planned before the token is sampled). `Chosen` and `Entry` are one feed's
share of a pass: its inputs chosen for it, then their rows.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from ..engine.prompt_cache import Slot, group_start
from .drafting import DraftPace
from .sequence import Sequence

__all__ = ["Inputs", "InputFeed", "Chosen", "Entry"]


class Inputs:
    """Inputs in order, each an id (a token, or a negative image placeholder,
    multimodal_store.py) with its same-batch mark (the next `mark` inputs must share this
    input's batch: an image's positions). Runs of marked inputs are never split by the
    methods here unless the caller asks for a cut inside one (`group_start` finds a cut that
    is not)."""

    def __init__(self, ids: Seq[int], marks: Seq[int] | None = None) -> None:
        self.ids = list(ids)
        self.marks = list(marks) if marks is not None else [0] * len(self.ids)
        if len(self.marks) != len(self.ids):
            raise ValueError("one same-batch mark per input")

    def __len__(self) -> int:
        return len(self.ids)

    def group_start(self, n: int) -> int:
        """The largest cut at or before `n` that splits no same-batch run."""
        return group_start(self.marks, n)

    @classmethod
    def one(cls, id: int, mark: int = 0) -> Inputs:
        """A single input (what decoding feeds each pass: built without the checks)."""
        inputs = cls.__new__(cls)
        inputs.ids, inputs.marks = [id], [mark]
        return inputs

    def take(self, n: int) -> Inputs:
        """Remove the first `n` inputs and return them."""
        if n == 1:
            return Inputs.one(self.ids.pop(0), self.marks.pop(0))
        head = Inputs(self.ids[:n], self.marks[:n])
        del self.ids[:n], self.marks[:n]
        return head

    def prepend(self, head: Inputs) -> None:
        self.ids[:0] = head.ids
        self.marks[:0] = head.marks

    def append_token(self, token: int) -> None:
        """A sampled token (never marked)."""
        self.ids.append(token)
        self.marks.append(0)


class InputFeed:
    """One active sequence as the loop feeds it (see the module docstring).

    pending: inputs still to evaluate (the prompt's rest, or the last sampled token).
    fed: generated tokens evaluated into the cache (or planned: a placeholder counts).
    placeholder_planned: the next token's input is in a planned pass as a placeholder, to be
        filled once the token is sampled (`fill_placeholder`) or dropped if the sequence ends
        first (`drop_placeholder`).
    limit_reached: the context is full and may not shift: the sequence ends after the token
        being sampled now.
    pace: how it drafts for speculative decoding (drafting.py), None when it does not.
    """

    def __init__(self, seq: Sequence, slot: Slot, pending: Inputs) -> None:
        self.seq = seq
        self.slot = slot
        self.pending = pending
        self.fed = 0
        self.placeholder_planned = False
        self.limit_reached = False
        self.pace: DraftPace | None = None

    def plan_placeholder(self) -> Inputs:
        """The input of the token being sampled now, planned before it exists."""
        self.fed += 1
        self.placeholder_planned = True
        return Inputs.one(0)

    def fill_placeholder(self, token: int) -> None:
        """The planned placeholder, the slot's last input, is `token`."""
        self.slot.tokens[-1] = token
        self.placeholder_planned = False

    def drop_placeholder(self) -> None:
        """The sequence ended before its planned placeholder's token existed."""
        self.slot.keep(len(self.slot.tokens) - 1)
        self.fed -= 1
        self.placeholder_planned = False

    def add_sampled(self, token: int) -> None:
        """A sampled token not planned yet: it is evaluated in a later pass."""
        self.pending.append_token(token)
        self.fed += 1

    def reprocess(self, kept: Inputs) -> None:
        """The cache could not shift and was cleared: evaluate `kept` again from the start."""
        self.pending.prepend(kept)
        self.slot.set([])

    def state_cut(self, take: int, replaces: Callable[[int], bool]) -> int:
        """Where the first `take` pending inputs must end in this pass (0: nowhere) so that a
        whole multimodal item replacing an earlier one of the sequence (`replaces`, the
        engine's `replaces_state`: a second mllama image) starts a pass: the inputs before it
        still attend to the earlier item, which the new one replaces in the cache during its
        pass."""
        pending = self.pending.ids
        if not any(t < 0 for t in pending[:take]):
            return 0
        held = any(replaces(t) for t in self.slot.tokens if t < 0)
        for i in range(take):
            if replaces(pending[i]):
                if i and held:
                    return i
                held = True
        return 0

    def tokens_to_keep(self) -> int:
        """How many of the slot's inputs the prompt cache should keep once the sequence is
        done: all but the generated tokens whose text was never sent (a stop string trims
        those)."""
        unsent = self.fed - min(self.fed, self.seq.sent_tokens)
        return max(0, len(self.slot.tokens) - unsent)


@dataclass(slots=True)
class Chosen:
    """Inputs of one sequence that go into the next pass."""

    feed: InputFeed
    inputs: Inputs
    placeholder: bool  # the single input is a token still being sampled
    drafts: list[int] | None = None  # drafted tokens after the sampled one (`inputs` ends so)


@dataclass(slots=True)
class Entry:
    """One sequence's rows in a planned pass."""

    feed: InputFeed
    start: int  # batch row of the first input
    count: int
    sample: bool  # the last input's logits are sampled
    placeholder: bool = False  # the single input is a token still being sampled
    drafts: list[int] | None = None  # the last len(drafts) inputs were drafted: every row samples
    produced: int = 0  # tokens its sampling produced (a check: the accepted drafts and one)
