"""Speculative decoding: what the batching loop (loop.py) calls to draft, check and weigh.

A decoding sequence that drafts evaluates its sampled token and the tokens its `Drafter`
(drafting.py: prompt lookup, or the draft model of draft_model.py) proposed in one pass, each
row computed as a lone decoding row is (`PassInput.lone_rows`), so every row's logits have
exactly the bits that decoding one token per pass gives. The `Speculator` then

* drafts (`add_drafts`): asks the drafter for the decoding sequences of the pass being
  composed, each as many tokens as its `DraftPace` wants, within the room the pass has left
  (drafts never take a row from another sequence's inputs), the context and the tokens left
  to it (drafts never make the context shift nor outrun the token limit), and at most
  `MAX_LONE_ROWS` lone rows a pass (each lone row is an attention run of its own in the
  pass's graph, whose context holds a bounded number of nodes: 64 lone rows of the default
  model overflowed it);
* checks (`check`): samples position by position as decoding would (`accept`: one draw per
  position sampled, penalties, grammar, stop strings and logprobs on the accepted tokens
  only) and accepts a drafted token while it equals the sample; the first sample that differs
  is the next token, as it would have been, so the output is the same with speculation on or
  off;
* cuts (`cut`): the cells of the rejected drafts leave the cache (`Cache.reject`) and the
  slot, as if their rows had never been evaluated;
* weighs (`weigh`): hands each decoding pass's measured seconds (the drafter's included) and
  tokens to `DraftCost` (draft_cost.py), which switches drafting off where it cannot pay and
  rests it for passes of as many sequences where it did not (`DraftCost.pays`).

A sequence that may draft takes no pipelined placeholder (`drafts_next`: its next input
depends on the check); one that is not going to draft (its pace paused, or drafting resting
for as many sequences as the last pass had) keeps pipelining. Drafting is on only where the
engine says it is exact (`RunnerEngine.speculation_off`) and while it pays; `off` says why
not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import numpy as np

from .draft_cost import DraftCost
from .drafting import MAX_DRAFT, DraftAsk, Drafter, DraftPace, PromptLookups
from .engine import RunnerEngine
from .feed import Chosen, Entry, InputFeed
from .sequence import Sequence

__all__ = ["Speculator", "MAX_LONE_ROWS"]

# Lone rows (drafting sequences' sampled and drafted tokens) in one pass: one sequence's
# longest check. The default model's graph took about 16 such rows in 5,000 of its 8,192
# nodes.
MAX_LONE_ROWS = MAX_DRAFT + 1

_log = logging.getLogger("hearth.runner")


class Speculator:
    """One runner's speculative decoding (module docstring), over its engine's cache."""

    def __init__(
        self, engine: RunnerEngine, drafter: Drafter | None = None, weigh: bool = True
    ) -> None:
        """`drafter` None: prompt lookup. `weigh`: drafting switches itself off where the
        measured passes say it does not pay (draft_cost.py); False drafts whatever it
        costs."""
        self.engine = engine
        self.drafter: Drafter = drafter if drafter is not None else PromptLookups()
        self.speculation_off = engine.speculation_off  # None: drafting is exact here
        self.cost = DraftCost() if weigh else None
        self.streams = 0  # decoding sequences in the last pass composed
        self.costly_wait = False  # waiting for a sampled token costs the loop a pass

    @property
    def off(self) -> str | None:
        """Why sequences do not draft (a sentence): the engine cannot check drafts exactly,
        or they did not pay here (draft_cost.py); None while they may."""
        if self.speculation_off is not None:
            return self.speculation_off
        return self.cost.reason if self.cost is not None else None

    def begin(self, feed: InputFeed, costly_wait: bool) -> None:
        """A sequence starts: it drafts if it asks to and drafting is on (`costly_wait`:
        waiting for its sampled token costs the loop its pipelining, `DraftPace`); where
        drafting was switched off, its final record says why."""
        seq = feed.seq
        self.costly_wait = costly_wait
        if self.off is None and seq.settings.speculate and not seq.embedding:
            feed.pace = DraftPace(costly_wait=costly_wait)
            self.drafter.begin(feed.slot.id, seq.prompt)
        elif self.speculation_off is None:
            seq.speculation_off = self.off

    def drafts_next(self, feed: InputFeed) -> bool:
        """Whether the sequence's next pass may draft: it then waits for its sampled token
        rather than planning it as a pipelined placeholder. Not while its pace is paused, nor
        while drafting rests for as many sequences as the last pass composed had."""
        if feed.pace is None or not feed.pace.active or self.off is not None:
            return False
        return self.cost is None or self.cost.pays(self.streams)

    def sampled(self, feed: InputFeed, token: int) -> None:
        """A drafting sequence (`feed.pace`) sampled `token` in a pass without drafts."""
        assert feed.pace is not None
        feed.pace.added()
        self.drafter.added(feed.slot.id, token)

    # -- drafting -------------------------------------------------------------------------
    def add_drafts(self, chosen: list[Chosen], room: int) -> float:
        """Drafted tokens after the sampled token of each decoding sequence of the pass that
        drafts, in the `room` (rows) the pass has left (module docstring), appended to its
        inputs (`Chosen.drafts`). Returns the drafter's seconds."""
        self.streams = len(chosen)
        if not any(c.feed.pace is not None for c in chosen):
            return 0.0
        cost = self.cost
        if cost is not None:
            if not cost.pays(len(chosen)):
                return 0.0  # off, or resting for passes of this many sequences
            decoding = all(len(c.inputs) == 1 and not c.feed.pending for c in chosen)
            if decoding and cost.wants_plain(len(chosen)):
                return 0.0  # this pass measures decoding without drafts (draft_cost.py)
        num_ctx = self.engine.num_ctx
        asks: dict[int, tuple[Chosen, DraftAsk]] = {}  # slot id -> (its inputs, its ask)
        for c in chosen:
            feed, seq, pace = c.feed, c.feed.seq, c.feed.pace
            if pace is None or c.placeholder or feed.pending or len(c.inputs) != 1:
                continue
            limit = min(
                num_ctx - len(feed.slot.tokens) - 1,
                seq.num_predict - len(seq.generated) - 1,
            )
            if feed.fed and limit > 0:
                ask = DraftAsk(feed.slot.tokens, c.inputs.ids[0], limit, pace.wanted(limit))
                asks[feed.slot.id] = (c, ask)
        if not asks:
            return 0.0
        began = time.perf_counter()
        drafts = self.drafter.propose({slot: ask for slot, (_, ask) in asks.items()})
        seconds = time.perf_counter() - began
        lone = MAX_LONE_ROWS
        for slot, (c, ask) in sorted(asks.items()):
            draft = drafts.get(slot, [])
            if not draft and ask.k > 0:
                assert c.feed.pace is not None
                c.feed.pace.nothing_drafted()
            draft = draft[: max(0, min(room, lone - 1))]
            if draft:
                for t in draft:
                    c.inputs.append_token(t)
                c.drafts = draft
                room -= len(draft)
                lone -= 1 + len(draft)
        return seconds

    # -- checking -------------------------------------------------------------------------
    def check(
        self, feed: InputFeed, drafts: list[int], logits: np.ndarray, row: int
    ) -> tuple[int | None, int]:
        """Sample a drafting sequence's rows (`logits[row:]`, its sampled token's then its
        drafts') as decoding would (`accept`), and cut the drafted tokens not accepted.
        Returns the next token to evaluate (None when the sequence finished) and how many
        tokens the pass produced for it."""
        seq, pace = feed.seq, feed.pace
        assert pace is not None
        accepted, token = self.accept(seq, drafts, logits, row)
        sampled = drafts[:accepted] if token is None else [*drafts[:accepted], token]
        for t in sampled:
            pace.added()
            self.drafter.added(feed.slot.id, t)
        seq.drafted(len(drafts), accepted)
        pace.checked(len(drafts), accepted)
        feed.fed += accepted  # an accepted draft's cell holds the sampled token: kept
        self.cut(feed, len(drafts) - accepted)
        return (None if seq.done else token), len(sampled)

    def accept(
        self, seq: Sequence, drafts: list[int], logits: np.ndarray, row: int
    ) -> tuple[int, int | None]:
        """The rule: sample row after row, accepting each drafted token while it is the
        sample. Returns the drafts accepted and the last token sampled (None: the sequence
        finished)."""
        accepted = 0
        token: int | None = None
        for j in range(len(drafts) + 1):
            token = seq.accept_logits(logits[row + j])
            if token is None or j == len(drafts) or token != drafts[j]:
                break
            accepted += 1
        return accepted, token

    def cut(self, feed: InputFeed, rejected: int) -> None:
        """The cells of the sequence's last `rejected` inputs (drafts not accepted) leave the
        cache and its slot, as if they had never been evaluated."""
        if rejected:
            kept = len(feed.slot.tokens) - rejected
            self.engine.cache.reject(feed.slot.id, kept)
            feed.slot.keep(kept)

    # -- cost -----------------------------------------------------------------------------
    def weigh(
        self, entries: list[Entry], seconds: float, drafting: float, active: Iterable[InputFeed]
    ) -> None:
        """Hand a decoding pass's cost (its compute `seconds`, and the drafter's for it) and
        tokens to the `DraftCost` (a pass with prompt rows says nothing of it); when drafting
        is switched off, tell the `active` sequences."""
        cost = self.cost
        if cost is None or not cost.on or not entries:
            return
        if not all(e.sample and (e.count == 1 or e.drafts) for e in entries):
            return
        if any(e.drafts for e in entries):
            tokens = sum(e.produced if e.drafts else 1 for e in entries)
            rows = sum(e.count for e in entries)
            # Where the loop pipelines, a drafting sequence among others sat out the pass
            # planned while its sampled token was computed.
            alone = len(entries) == 1
            waits = 0 if alone or not self.costly_wait else sum(1 for e in entries if e.drafts)
            cost.checked(len(entries), rows, tokens, seconds + drafting, waits)
            if not cost.on:
                _log.info("%s", cost.reason)
                for feed in active:
                    feed.seq.speculation_off = cost.reason
        else:
            cost.decoded(len(entries), seconds)

    def close(self) -> None:
        self.drafter.close()
