"""Speculation that does not pay costs nothing: the cost rule is fair to a lucky fast
decoding pass (each check is measured against the decoding passes of its time), drafting
rests for as many sequences as it did not pay with (and the loop then pipelines them as if
they did not draft), and a sequence whose drafts are always rejected backs off in tokens to a
stated bound. Outputs stay those of speculation off throughout.
"""

from __future__ import annotations

import pytest

from hearth.runner.draft_cost import DraftCost
from hearth.runner.drafting import DraftAsk, DraftPace, PromptLookups
from hearth.runner.feed import Chosen, InputFeed
from hearth.runner.protocol import CompletionOptions, CompletionRequest
from hearth.runner.speculation import Speculator

from support.speculation import SETTINGS, _differences, _prompt, _runner, run_both

# Always-rejected drafts, checked twice in a row, then again after pauses of 8, 16, 32 and
# 64 sampled tokens (doubling), each check sampling a token: checks after 0, 1, 10, 11, 28,
# 29, 62, 63 tokens (the next pair would come after 128), so 8 in 128 tokens, drafting 4
# tokens the first time and 1 each time after.
DRAFTED_IN_128 = 11


# -- the cost rule ------------------------------------------------------------------------------
def _measured(cost: DraftCost, sequences: int, seconds: list[float]) -> None:
    for s in seconds:
        cost.decoded(sequences, s)


def test_a_lucky_fast_decoding_pass_does_not_make_cheap_checks_look_dear():
    """Decoding passes of 10 ms under load, 30 of them, the last of which ran at 1 ms (a
    lucky spell); checks of 5 rows (the least weighed) at 12 ms, each taken between decoding
    passes. A check costs 1.2 decoding passes and makes up to 5 tokens: drafting pays and
    stays on. Measured against the fastest decoding pass ever seen (the old rule), every
    check would have cost 12 passes and drafting would have gone off."""
    cost = DraftCost()
    _measured(cost, 1, [0.010] * 29 + [0.001])
    for _ in range(16):
        cost.checked(1, 5, 5, 0.012)
        cost.decoded(1, 0.010)
    assert cost.on, cost.reason
    assert cost.checks == 16  # weighed, not skipped


def test_checks_that_cost_as_much_as_their_rows_still_switch_drafting_off():
    """The same lucky fast pass does not hide dear checks either: 16 rows at 160 ms
    against decoding passes of 10 ms cost 16 passes, one check of a quiet spell 15 (checks
    count at their lowest cost): off, with the sentence."""
    cost = DraftCost()
    _measured(cost, 1, [0.010] * 10 + [0.001])
    for i in range(8):
        cost.checked(1, 16, 16, 0.150 if i == 3 else 0.160)
        cost.decoded(1, 0.010)
    assert not cost.on
    assert "a check of 16.0 rows cost what 15.0 decoding passes do" in (cost.reason or "")


def test_drafting_rests_with_as_many_sequences_as_it_did_not_pay_with():
    """Four sequences decode together in 20 ms a pass (4 tokens). Checks of 4 sequences take
    40 ms and make 5 tokens (one sequence drafted, one draft accepted): 2 passes for 5
    tokens where decoding makes 8. After 3 such checks drafting rests for passes of
    4 sequences (and more), not for one: 32 passes of 4, then 64 after a second failure.
    One sequence whose checks make 6 tokens for 1.5 passes keeps drafting."""
    cost = DraftCost()
    _measured(cost, 4, [0.020] * 3)
    _measured(cost, 1, [0.010] * 3)
    for _ in range(3):
        assert cost.pays(4)
        cost.checked(4, 8, 5, 0.040)
        cost.checked(1, 7, 6, 0.015)
    assert not cost.pays(4) and not cost.pays(8)
    assert cost.pays(1) and cost.pays(3) and cost.on
    _measured(cost, 1, [0.010] * 100)  # passes of one sequence do not end the rest of 4
    assert not cost.pays(4)
    _measured(cost, 4, [0.020] * 31)
    assert not cost.pays(4)
    cost.decoded(4, 0.020)
    assert cost.pays(4)  # tried again after 32 passes of 4 sequences
    for _ in range(3):
        cost.checked(4, 8, 5, 0.040)
    _measured(cost, 4, [0.020] * 63)
    assert not cost.pays(4)
    cost.decoded(4, 0.020)
    assert cost.pays(4)


def test_a_sequence_that_sits_out_a_pipelined_pass_to_draft_counts_it():
    """Checks of 4 sequences at 1.2 passes each, making 6 tokens (1 accepted draft each for
    two drafting sequences): 6 against 4.8 pays; but where both sat out a pipelined pass to
    draft (`waits` 2), 4 against 4.8 does not."""
    pays, waits = DraftCost(), DraftCost()
    for cost, waited in ((pays, 0), (waits, 2)):
        _measured(cost, 4, [0.020] * 3)
        for _ in range(3):
            cost.checked(4, 8, 6, 0.024, waits=waited)
    assert pays.pays(4) and not waits.pays(4)


# -- a sequence's back-off ----------------------------------------------------------------------
def test_a_pace_whose_drafts_are_always_rejected_backs_off_in_tokens():
    """A pace that drafts whenever it is active, every draft rejected, over 128 sampled
    tokens (each pass samples one): at most DRAFTED_IN_128 tokens drafted, in 8 checks."""
    pace = DraftPace()
    drafted = checks = 0
    for _ in range(128):
        k = pace.wanted(64)
        if k:
            drafted += k
            checks += 1
            pace.added()  # the check's sampled token
            pace.checked(k, 0)
        else:
            pace.added()
    assert (drafted, checks) == (DRAFTED_IN_128, 8)


def _always_rejected(self: PromptLookups, asks: dict[int, DraftAsk]) -> dict[int, list[int]]:
    """As many drafted tokens as each pace wants, never the sample (byte 0x00 is not text,
    and greedy sampling of these prompts never picks it)."""
    return {slot: [3] * ask.k for slot, ask in asks.items()}


@pytest.fixture(scope="module")
def llama_spacious(tiny_llama_path):
    runner = _runner(tiny_llama_path, num_ctx=320, parallel=4)
    yield runner
    runner.close()


def test_always_rejected_drafts_back_off_to_the_stated_bound(llama_spacious, monkeypatch):
    runner = llama_spacious
    monkeypatch.setattr(PromptLookups, "propose", _always_rejected)
    req = CompletionRequest(
        tokens=_prompt(runner, 7, length=48),
        options=CompletionOptions(num_predict=128, **SETTINGS["greedy"]),
        logprobs=True,
    )
    plain, spec = run_both(runner, {"greedy": req})
    assert not _differences(plain["greedy"], spec["greedy"], "greedy")
    done = spec["greedy"]["done"]
    assert done.accepted == 0
    assert 0 < done.drafted <= DRAFTED_IN_128


# -- resting: the loop pipelines as if nothing drafted ------------------------------------------
@pytest.fixture(scope="module")
def llama_pipelined_weighed(tiny_llama_path):
    runner = _runner(tiny_llama_path, threads=1, pipelined=True, weigh_drafts=True)
    assert runner.loop.pipelined
    yield runner
    runner.close()


def test_four_sequences_do_not_draft_where_drafting_rests_and_keep_pipelining(
    llama_pipelined_weighed, monkeypatch
):
    """Drafting with 4 sequences measured as not paying (made-up checks: 2 passes' time
    for 5 tokens), four repeating prompts (drafts would be accepted) decoded together for
    24 tokens (within the first rest of 32 passes): no pass of 4 sequences drafts, no
    sequence waits for its sampled token to draft after one (`drafts_next`: it takes its
    pipelined placeholder, as without speculation), and the outputs are those of
    speculation off. (While the prompts are read, fewer sequences decode: they may draft.)"""
    runner = llama_pipelined_weighed
    cost = runner.speculator.cost
    _measured(cost, 4, [0.020] * 3)
    for _ in range(3):
        cost.checked(4, 8, 5, 0.040)
    assert not cost.pays(4)
    passes: list[tuple[int, int]] = []  # (sequences, drafted rows) of each pass composed
    waits: list[tuple[int, bool]] = []  # (sequences of the last pass, waits) per question
    add_drafts, drafts_next = Speculator.add_drafts, Speculator.drafts_next

    def drafting(self: Speculator, chosen: list[Chosen], room: int) -> float:
        seconds = add_drafts(self, chosen, room)
        passes.append((len(chosen), sum(len(c.drafts or ()) for c in chosen)))
        return seconds

    def waiting(self: Speculator, feed: InputFeed) -> bool:
        waits.append((self.streams, drafts_next(self, feed)))
        return waits[-1][1]

    monkeypatch.setattr(Speculator, "add_drafts", drafting)
    monkeypatch.setattr(Speculator, "drafts_next", waiting)
    reqs = {
        f"s{i}": CompletionRequest(
            tokens=_prompt(runner, 20 + i, length=40),
            options=CompletionOptions(num_predict=24, **SETTINGS["greedy"]),
            logprobs=True,
        )
        for i in range(4)
    }
    plain, spec = run_both(runner, reqs, together=True)
    found = [d for name in reqs for d in _differences(plain[name], spec[name], name)]
    assert not found, "\n".join(found)
    of_four = [drafted for n, drafted in passes if n == 4]
    assert len(of_four) >= 16 and not any(of_four), passes
    asked = [waited for n, waited in waits if n == 4]
    assert asked and not any(asked), waits
