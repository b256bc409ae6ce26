"""The loop's choice to pipeline (runner/pipelining.py), on a clock the test controls: steps
whose durations are known give the choice that the module's rule must make."""

from __future__ import annotations

import pytest

from hearth.runner import pipelining
from hearth.runner.pipelining import PipelineChoice


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(pipelining.time, "perf_counter", c)
    return c


def _run(choice: PipelineChoice, clock: _Clock, steps: int, cost: dict[bool, float],
         width: int = 1) -> list[bool]:  # fmt: skip
    """`steps` decoding steps of `width` sequences, each taking cost[pipelining]."""
    ways = []
    for _ in range(steps):
        way = choice.now()
        ways.append(way)
        clock.now += cost[way]
        choice.step(width)
    return ways


@pytest.mark.parametrize("faster", [False, True])
def test_the_faster_way_is_kept(clock, faster):
    choice = PipelineChoice(allowed=True, forced=None, window=8, hold=100)
    cost = {faster: 1.0, not faster: 1.5}
    ways = _run(choice, clock, 40, cost)
    assert False in ways[:12] and True in ways[:30]  # both were measured
    assert choice.trials == 1 and choice.last == {faster: 1.0, not faster: 1.5}
    assert ways[-5:] == [faster] * 5


def test_it_measures_again_after_holding(clock):
    choice = PipelineChoice(allowed=True, forced=None, window=8, hold=50)
    _run(choice, clock, 40, {False: 1.0, True: 2.0})
    assert choice.now() is False
    # The machine changed: pipelining now pays.
    _run(choice, clock, 120, {False: 2.0, True: 1.0})
    assert choice.trials >= 2 and choice.last == {False: 2.0, True: 1.0}


def test_steps_of_other_kinds_and_other_widths_are_not_counted(clock):
    choice = PipelineChoice(allowed=True, forced=None, window=8, hold=100)
    for _ in range(30):  # prompt passes (width 0) between decoding steps never count
        clock.now += 1.0
        choice.step(1)
        clock.now += 50.0
        choice.step(0)
    assert choice.trials == 0
    _run(choice, clock, 12, {False: 1.0, True: 3.0}, width=1)
    _run(choice, clock, 4, {False: 1.0, True: 3.0}, width=3)  # other sequences: start over
    assert choice.trials == 0 and choice.now() is False
    _run(choice, clock, 40, {False: 3.0, True: 1.0}, width=3)
    assert choice.trials == 1 and choice.now() is True


@pytest.mark.parametrize("forced", [False, True])
def test_a_fixed_choice_never_changes(clock, forced):
    choice = PipelineChoice(allowed=True, forced=forced, window=4, hold=8)
    ways = _run(choice, clock, 50, {forced: 5.0, not forced: 1.0})
    assert set(ways) == {forced} and choice.trials == 0


def test_no_pipelining_where_it_is_not_allowed(clock):
    choice = PipelineChoice(allowed=False, forced=None, window=4, hold=8)
    assert set(_run(choice, clock, 50, {False: 5.0, True: 1.0})) == {False}


def test_a_drift_in_speed_weighs_on_both_ways_alike(clock):
    """Steps get faster as the trial goes on (a warm-up): measured one way after the other,
    the way measured first would look slower; alternating blocks see the same drift."""
    choice = PipelineChoice(allowed=True, forced=None, window=24, hold=1000, block=6)
    step = 0
    while choice.trials == 0 and step < 500:
        way = choice.now()
        clock.now += 2.0 / (1 + step / 10) + (0.01 if way else 0.0)  # pipelining a bit dearer
        choice.step(1)
        step += 1
    assert choice.trials == 1 and choice.now() is False


def test_a_choice_whose_steps_grow_past_the_other_way_is_measured_again(clock):
    """Serial steps were faster when the trial ran; passes grow longer (a growing context)
    and now hide the planning: serial steps slower than pipelined ones were start a new
    trial, which pipelines. Steps that change less are held to."""
    choice = PipelineChoice(allowed=True, forced=None, window=8, hold=10_000)
    _run(choice, clock, 60, {False: 1.0, True: 1.2})
    assert choice.trials == 1 and choice.now() is False
    _run(choice, clock, 200, {False: 1.15, True: 1.2})  # still cheaper than pipelining was
    assert choice.trials == 1 and choice.now() is False
    _run(choice, clock, 120, {False: 1.5, True: 1.3})
    assert choice.trials == 2 and choice.now() is True
    _run(choice, clock, 200, {False: 1.2, True: 1.4})  # pipelined, still under serial's 1.5
    assert choice.trials == 2 and choice.now() is True


def test_other_sequences_are_measured_for_even_while_a_choice_holds(clock):
    choice = PipelineChoice(allowed=True, forced=None, window=8, hold=10_000)
    _run(choice, clock, 60, {False: 1.0, True: 1.2}, width=1)
    assert choice.trials == 1 and choice.now() is False
    _run(choice, clock, 80, {False: 4.0, True: 3.0}, width=4)
    assert choice.trials == 2 and choice.now() is True


def test_the_two_steps_after_a_switch_are_not_counted(clock):
    """The compute thread wakes up from a serial block: the first two pipelined steps are
    slow, the rest faster than serial ones."""
    choice = PipelineChoice(allowed=True, forced=None, window=8, hold=10_000, block=3)
    run = 0
    while choice.trials == 0:
        way = choice.now()
        run = run + 1 if way else 0
        clock.now += (5.0 if run <= 2 else 0.8) if way else 1.0
        choice.step(1)
    assert choice.now() is True and choice.last[True] == pytest.approx(0.8)
