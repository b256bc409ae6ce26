"""Speculative decoding at its edges: a sliding window that a rejected draft's rows would
have let go of early (the cells later tokens take must be those they take without
speculation: cell order is summation order), and drafting that cannot pay (a check's lone
rows each read every float weight again: drafting switches itself off, and says why), while
on the default model, whose quantized weights Hearth's kernel takes as a batch, it stays on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from hearth.runner.core import Runner
from hearth.runner.draft_cost import DraftCost
from hearth.runner.drafting import DraftAsk, PromptLookups
from hearth.runner.protocol import CompletionOptions, CompletionRequest

from support.speculation import (
    SETTINGS,
    _differences,
    _prompt,
    _run,
    _runner,
    _with,
    run_both,
)
from tiny_models import tiny_llama, write_tiny_llama

WINDOW = 16  # the tiny gemma3's sliding window
NUM_BATCH = 8  # so the window's memory (window + batch) is short: 24 positions
HOTTEST = {"temperature": 4.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}


# -- a sliding window past its memory ---------------------------------------------------------
@pytest.fixture(scope="module")
def gemma3_narrow(tiny_gemma3_path):
    runner = _runner(tiny_gemma3_path, num_ctx=320, num_batch=NUM_BATCH, parallel=2)
    yield runner
    runner.close()


def _wrong_drafts(self: PromptLookups, asks: dict[int, DraftAsk]) -> dict[int, list[int]]:
    """Six drafted tokens every pass, rejected at once as a rule (byte 0x00 is not text)."""
    return {slot: [3] * min(6, ask.limit) for slot, ask in asks.items()}


@pytest.mark.slow
@pytest.mark.parametrize("drafts", ["prompt lookup", "rejected"])
def test_speculation_is_exact_where_rejected_drafts_pass_the_windows_memory(
    gemma3_narrow, drafts, monkeypatch
):
    """A prompt of 120 tokens, far past the window and its memory (16 + 8 positions): each
    row of a check lets go of the cell behind the memory as it takes its own, as decoding
    does, and a rejected row must not have. Decoding cycles through the 25 cells the memory
    holds; with six rejected rows a pass (`_wrong_drafts`), a check's rows cross the cycle's
    end every few tokens, where the next token would otherwise take the cycle's first cell
    rather than the one it takes without speculation. Greedy and sampled, logprobs
    compared exactly."""
    runner = gemma3_narrow
    if drafts == "rejected":
        monkeypatch.setattr(PromptLookups, "propose", _wrong_drafts)
    settings = {
        **{name: SETTINGS[name] for name in ("greedy", "warm")},
        # Hot enough that this model's loops break and drafts of them are rejected.
        **{f"hottest-{i}": {**HOTTEST, "seed": i} for i in range(2)},
    }
    if drafts == "rejected":  # every token a check: two requests are enough
        settings = {name: settings[name] for name in ("greedy", "hottest-0")}
    reqs = {
        name: CompletionRequest(
            tokens=_prompt(runner, 40 + i, length=120),
            options=CompletionOptions(num_predict=64, **opts),
            logprobs=True,
            top_logprobs=2,
        )
        for i, (name, opts) in enumerate(settings.items())
    }
    plain, spec = run_both(runner, reqs)
    found = [d for name in reqs for d in _differences(plain[name], spec[name], name)]
    assert not found, "\n".join(found)
    drafted = sum(r["done"].drafted for r in spec.values())
    accepted = sum(r["done"].accepted for r in spec.values())
    assert drafted > accepted  # drafts were rejected, every one far past the window
    assert all(len(r.tokens or []) > WINDOW + NUM_BATCH for r in reqs.values())


# -- drafting that cannot pay -------------------------------------------------------------------
def test_the_cost_rule_weighs_what_checks_cost_against_what_decoding_would():
    """Measured passes, made up: decoding one token a pass takes 10 ms (the median of its
    recent passes). Checks of 16 rows that take what 16 passes do produce at most 16
    tokens: off, even with every draft accepted. Checks of 9 rows that take 15 ms: on,
    however few of their drafts are accepted (the drafter's own pace, and resting, handle
    that), a pass slowed by other work counting at its shape's lowest cost. Decoding passes are
    asked for until three are measured, and again every 8 checks."""
    costly, cheap = DraftCost(), DraftCost()
    for cost in (costly, cheap):
        for seconds in (0.012, 0.010, 0.010):
            assert cost.wants_plain(1)
            cost.decoded(1, seconds)
        assert not cost.wants_plain(1)
    for _ in range(7):
        costly.checked(1, 16, 16, 0.160)
        cheap.checked(1, 9, 1, 0.015)
    assert costly.on and cheap.on  # not decided before 8 checks
    costly.checked(1, 16, 16, 0.200)
    cheap.checked(1, 9, 1, 0.500)
    assert not costly.on
    assert "a check of 16.0 rows cost what 16.0 decoding passes do, so it cannot pay" in (
        costly.reason or ""
    )
    assert cheap.on
    assert cheap.wants_plain(1)  # 8 checks since the last decoding pass (and more)
    assert cheap.wants_plain(2)  # passes of two sequences: not measured yet


def _float_llama(path: Path) -> Path:
    """A llama of F32 weights (50 MB): a pass is mostly reading them."""
    spec = tiny_llama(
        embd=512, layers=4, heads=8, kv_heads=4, ff=1536, default_type=QT.F32, types={}
    )
    return write_tiny_llama(path, spec)


def _taken_apart(runner: Runner, type_name: str) -> bool:
    """Whether products with weights of `type_name` take a lone row on its own (as probed
    when the model loaded: ml/invariance.py)."""
    from hearth.engine.ml.invariance import ProductRule

    rule = runner.engine.loaded.weights.product_rules.get(f"{type_name} (CPU)")
    return rule not in (None, ProductRule.INVARIANT)


@pytest.fixture(scope="module")
def float_llama(tmp_path_factory):
    """The F32 llama drafting for itself: greedy drafts of the model itself are always
    accepted (the check computes each row as decoding does), so draft lengths grow to the
    full check by construction, on any CPU; each check pass of R lone rows then reads every
    weight R times (F32 products take lone rows apart)."""
    path = _float_llama(tmp_path_factory.mktemp("f32") / "f32-llama.gguf")
    runner = _runner(path, num_ctx=512, parallel=1, weigh_drafts=True, draft_model=str(path))
    yield runner
    runner.close()


@pytest.mark.slow
def test_drafting_that_cannot_pay_switches_itself_off_and_says_why(float_llama):
    runner = float_llama
    assert _taken_apart(runner, "F32")  # the premise: each lone row reads the weights again
    assert runner.speculation()["enabled"] is True
    reqs = {
        name: CompletionRequest(
            tokens=_prompt(runner, 50 + i, length=60),
            options=CompletionOptions(num_predict=120, temperature=0),
            logprobs=True,
        )
        for i, name in enumerate(("first", "second"))
    }
    plain, spec = run_both(runner, reqs)
    found = [d for name in reqs for d in _differences(plain[name], spec[name], name)]
    assert not found, "\n".join(found)  # exact, drafting on and then off
    assert spec["first"]["done"].accepted > 0  # drafts were made and taken before the switch
    off = runner.speculation()
    assert off["enabled"] is False, runner.speculator.cost.__dict__
    assert off["reason"].startswith("drafting was switched off: a check of")
    assert runner.info().speculation == off
    assert spec["second"]["done"].speculation_off == off["reason"]  # the service hears of it
    again = _run(runner, _with(reqs["first"], True))["done"]
    assert again.drafted == 0 and again.speculation_off == off["reason"]


@pytest.fixture(scope="module")
def gemma3_weighed(gemma3_path):
    runner = _runner(gemma3_path, num_ctx=512, num_batch=128, parallel=1, weigh_drafts=True)
    yield runner
    runner.close()


@pytest.mark.slow
def test_drafting_that_pays_stays_on(gemma3_weighed):
    """The default model (Q4_K and Q8_0 weights, which Hearth's kernel takes as a batch: a
    check of 16 rows reads them once) repeating code: drafts are accepted in long runs and
    each check costs little more than a decoding pass, so drafting stays on. Where the
    products take lone rows apart (without Hearth's kernel) it must go off instead."""
    runner = gemma3_weighed
    code = Path(__file__).read_text()[:1200]
    prompt = (
        "<start_of_turn>user\nRepeat this code exactly:\n\n"
        f"{code}<end_of_turn>\n<start_of_turn>model\n"
    )
    req = CompletionRequest(
        prompt=prompt, options=CompletionOptions(num_predict=200, temperature=0)
    )
    plain, spec = run_both(runner, {"greedy": req})
    assert not _differences(plain["greedy"], spec["greedy"], "greedy")
    done = spec["greedy"]["done"]
    cost = runner.speculator.cost
    apart = [t for t in ("Q4_K", "Q8_0", "Q6_K") if _taken_apart(runner, t)]
    if not apart:
        assert cost.checks >= 8, cost.__dict__  # weighed, and kept on
        assert runner.speculation() == {"enabled": True, "drafts": "prompt lookup"}, cost.reason
        assert done.accepted > 0 and done.speculation_off is None
    else:
        assert runner.speculation()["enabled"] is False, (apart, cost.__dict__)
