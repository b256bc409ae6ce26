"""Speculative decoding is exact: the same requests with drafting off and on give the same
bytes, the same logprobs and the same token ids, on a tiny model of each built-in
architecture and on the default model, greedy and sampled (temperatures, top-k, top-p,
min-p, penalties, seeds), with JSON-schema output, stop strings and context shifts, one
sequence at a time and four at once. Loosening the acceptance rule (accepting a draft that
is the argmax rather than the sample, or drawing for positions after a rejected draft) makes
the same comparison fail, so the comparison can fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hearth.runner import drafting
from hearth.runner.core import Runner
from hearth.runner.drafting import DraftAsk, DraftPace, PromptLookup, PromptLookups
from hearth.runner.protocol import (
    CompletionOptions,
    CompletionRequest,
)
from hearth.runner.sequence import Sequence
from hearth.runner.speculation import Speculator

from support.speculation import (
    SCHEMA,
    SETTINGS,
    _differences,
    _prompt,
    _run,
    _runner,
    _with,
    compare,
    requests_for,
    run_both,
    with_stop_strings,
)


@pytest.fixture(scope="module")
def llama(tiny_llama_path):
    runner = _runner(tiny_llama_path)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def llama_pipelined(tiny_llama_path):
    """The loop that plans pass N+1 while N computes (placeholders for sampled tokens)."""
    runner = _runner(tiny_llama_path, threads=1, pipelined=True)
    assert runner.loop.pipelined
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def gemma3_tiny(tiny_gemma3_path):
    runner = _runner(tiny_gemma3_path)  # its window of 16: drafts reach past the window
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def mllama_text(tmp_path_factory):
    """The tiny Llama 3.2 Vision model (transformers', converted), used for text."""
    tests = Path(__file__).resolve().parents[2]
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))
    from hearth_mllama.testing import TinyMllamaVision, tiny_mllama
    from tests.plugins.mllama_checkpoint import convert_tiny

    model = tiny_mllama(TinyMllamaVision(vocab=300, text_layers=5))
    path = tmp_path_factory.mktemp("mllama") / "tiny-mllama.gguf"
    convert_tiny(model, tmp_path_factory.mktemp("mllama-hf"), path)
    runner = _runner(path)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def gemma3_default(gemma3_path):
    runner = _runner(gemma3_path, num_ctx=512, num_batch=128)
    yield runner
    runner.close()


TINY = ["llama", "gemma3_tiny", pytest.param("mllama_text", marks=pytest.mark.slow)]


# -- exactness ------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", TINY)
def test_speculation_gives_the_same_bytes_and_logprobs_one_sequence_at_a_time(which, request):
    runner: Runner = request.getfixturevalue(which)
    assert runner.speculation() == {"enabled": True, "drafts": "prompt lookup"}
    reqs = requests_for(runner)
    with_stop_strings(runner, reqs)
    assert any(r.options.stop for r in reqs.values())
    found, drafted, accepted = compare(runner, reqs)
    assert not found, "\n".join(found)
    assert 0 < accepted < drafted  # drafts were both accepted and rejected


@pytest.mark.slow
@pytest.mark.parametrize("which", [*TINY, "llama_pipelined"])
def test_speculation_gives_the_same_with_four_sequences_at_once(which, request, monkeypatch):
    runner: Runner = request.getfixturevalue(which)
    # Drafts at every chance (no pause after misses): the comparison wants drafts both
    # accepted and rejected from every sequence, whatever the tiny model's text.
    monkeypatch.setattr(drafting, "_MISSES", 10**9)
    reqs = requests_for(runner)
    names = ["greedy", "warm", "hot-min-p", "json-schema"]
    before = runner.loop.max_batch_seen
    runner.loop.max_batch_seen = 0
    found, drafted, accepted = compare(runner, {n: reqs[n] for n in names}, together=True)
    assert not found, "\n".join(found)
    assert 0 < accepted < drafted
    assert runner.loop.max_batch_seen >= 8  # several sequences' drafts in one pass
    runner.loop.max_batch_seen = max(before, runner.loop.max_batch_seen)


def _longest_token(runner: Runner) -> int:
    """The most bytes (so characters) any one token writes."""
    tok = runner.tokenizer
    return max(len(tok.token_bytes(i)) for i in range(tok.vocab_size))


def _lone_character(runner: Runner) -> tuple[str, int]:
    """A printable character that no token but its own byte token writes (alone or
    repeated), and that token: a JSON constant of it repeated is written one token a
    character, each the only token the constraint allows."""
    tok = runner.tokenizer
    written = [bytes(tok.token_bytes(i)) for i in range(tok.vocab_size)]
    for c in "~^|`#%&@!?*+=<>0123456789":
        ids = [i for i, b in enumerate(written) if b and set(b) == {ord(c)}]
        if len(ids) == 1 and written[ids[0]] == c.encode():
            return c, ids[0]
    raise AssertionError("no character has a token of its own in this vocabulary")


@pytest.mark.slow
def test_speculation_is_exact_through_context_shifts(llama):
    """Every request must shift its context whatever its tokens: each is constrained to a
    JSON string that needs more tokens than the context has room for (a token writes at most
    `_longest_token` characters; the end of generation is not allowed before the string
    ends), and one writes a constant of a character that only one token writes (each token
    forced, so drafts of it are accepted)."""
    num_ctx, longest = llama.engine.num_ctx, _longest_token(llama)
    reqs = {}
    for i, name in enumerate(("greedy", "warm")):
        prompt = _prompt(llama, 20 + i, length=60)
        room = num_ctx - len(prompt)
        reqs[name] = CompletionRequest(
            tokens=prompt,
            options=CompletionOptions(num_predict=room + 60, num_keep=8, **SETTINGS[name]),
            format={"type": "string", "minLength": longest * (room + 1)},
            logprobs=True,
        )
    char, token = _lone_character(llama)
    prompt = [*_prompt(llama, 22, length=60), *[token] * 8]
    reqs["constant"] = CompletionRequest(
        tokens=prompt,
        options=CompletionOptions(num_predict=num_ctx + 40, num_keep=8, **SETTINGS["warm"]),
        format={"const": char * (num_ctx - len(prompt) + 30)},
        logprobs=True,
    )
    plain, spec = run_both(llama, reqs)
    found = [d for name in reqs for d in _differences(plain[name], spec[name], name)]
    assert not found, "\n".join(found)
    assert all(r["done"].shifted for r in [*plain.values(), *spec.values()])
    done = spec["constant"]["done"]
    # At most 20 spaces and a newline before the constant (the grammar's bound).
    written = plain["constant"]["bytes"].lstrip(b" \t\n")
    assert written == f'"{char * (num_ctx - len(prompt) + 30)}"'.encode()
    assert done.accepted > 0


@pytest.mark.slow
def test_speculation_is_exact_on_the_default_model(gemma3_default):
    runner = gemma3_default
    assert runner.speculation() == {"enabled": True, "drafts": "prompt lookup"}
    code = Path(__file__).read_text()[:900]
    prompt = (
        "<start_of_turn>user\nRepeat this code exactly, with `plain` renamed to `base`:\n\n"
        f"{code}<end_of_turn>\n<start_of_turn>model\n"
    )
    reqs = {}
    for name in ("greedy", "greedy-penalties", "warm", "hot-min-p", "cool-top-p"):
        opts = CompletionOptions(num_predict=48, **SETTINGS[name])
        reqs[name] = CompletionRequest(prompt=prompt, options=opts, logprobs=True, top_logprobs=2)
    reqs["json-schema"] = CompletionRequest(
        prompt=prompt.replace("Repeat this code", "Describe this code as JSON"),
        options=CompletionOptions(num_predict=48, temperature=0.6, seed=7),
        format=SCHEMA,
        logprobs=True,
    )
    with_stop_strings(runner, reqs)
    found, drafted, accepted = compare(runner, reqs)
    assert not found, "\n".join(found)
    assert 0 < accepted < drafted
    names = ["greedy", "warm", "hot-min-p", "json-schema"]
    found, drafted, accepted = compare(runner, {n: reqs[n] for n in names}, together=True)
    assert not found, "\n".join(found)
    assert accepted > 0


# -- a draft model -------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["itself", "another"])
def llama_drafted(request, tiny_llama_path, tmp_path_factory):
    """The tiny llama drafted for by itself (most drafts accepted) or by another tiny llama
    of the same vocabulary and other weights (most rejected)."""
    from tiny_models import tiny_llama, write_tiny_llama

    draft = tiny_llama_path
    if request.param == "another":
        draft = write_tiny_llama(tmp_path_factory.mktemp("draft") / "d.gguf", tiny_llama(seed=9))
    runner = _runner(tiny_llama_path, draft_model=str(draft))
    yield runner
    runner.close()


@pytest.mark.slow
def test_a_draft_model_drafts_exactly_one_sequence_and_four_at_once(llama_drafted):
    runner = llama_drafted
    assert runner.speculation() == {"enabled": True, "drafts": "draft model"}
    reqs = requests_for(runner)
    with_stop_strings(runner, reqs)
    found, drafted, accepted = compare(runner, reqs)
    assert not found, "\n".join(found)
    assert drafted > accepted
    names = ["greedy", "warm", "hot-min-p", "json-schema"]
    found, drafted_4, accepted_4 = compare(runner, {n: reqs[n] for n in names}, together=True)
    assert not found, "\n".join(found)
    assert drafted_4 > 0
    if runner.config.draft_model == runner.config.model:  # greedy drafts for itself hold
        done = _run(runner, _with(reqs["greedy"], True))["done"]
        assert done.accepted > 0.8 * done.drafted


@pytest.fixture(scope="module")
def qwen2_pair(tmp_path_factory):
    """A tiny Qwen2 (2 layers) and a smaller sibling (1 layer, other weights) with one
    vocabulary, made by transformers and converted by llama.cpp, as Qwen2.5 7B and 0.5B."""
    from convert.chat_models import tiny_chat_gguf

    work = tmp_path_factory.mktemp("qwen2-pair")
    target = tiny_chat_gguf(work, "qwen2", seed=3)
    draft = tiny_chat_gguf(work, "qwen2", seed=11, num_hidden_layers=1)
    runner = _runner(target, draft_model=str(draft))
    yield runner
    runner.close()


@pytest.mark.slow
def test_a_qwen2_draft_model_is_exact_on_and_off(qwen2_pair):
    runner = qwen2_pair
    assert runner.info().engine == "hearth"
    assert runner.speculation() == {"enabled": True, "drafts": "draft model"}
    reqs = requests_for(runner, num_predict=32)
    found, drafted, accepted = compare(runner, reqs)
    assert not found, "\n".join(found)
    assert drafted > 0
    names = ["greedy", "warm", "json-schema"]
    found, drafted_3, _ = compare(runner, {n: reqs[n] for n in names}, together=True)
    assert not found, "\n".join(found)
    assert drafted_3 > 0


@pytest.mark.slow
def test_a_draft_model_of_another_vocabulary_is_refused(tiny_llama_path, gemma3_path):
    with pytest.raises(ValueError, match="a draft model needs the same vocabulary"):
        _runner(tiny_llama_path, draft_model=str(gemma3_path))


# -- the comparison fails when the rule is loosened ------------------------------------------
def _accept_argmax(
    self: Speculator, seq: Sequence, drafts: list[int], logits: np.ndarray, row: int
) -> tuple[int, int | None]:
    """A loosened rule: a drafted token the model ranks first is taken without sampling it."""
    accepted, token = 0, None
    for j in range(len(drafts) + 1):
        row_logits = logits[row + j]
        if j < len(drafts) and int(np.argmax(row_logits)) == drafts[j]:
            forced = np.full_like(row_logits, -1e30)
            forced[drafts[j]] = 0.0
            token = seq.accept_logits(forced)
        else:
            token = seq.accept_logits(row_logits)
        if token is None or j == len(drafts) or token != drafts[j]:
            break
        accepted += 1
    return accepted, token


def _draw_every_row(
    self: Speculator, seq: Sequence, drafts: list[int], logits: np.ndarray, row: int
) -> tuple[int, int | None]:
    """A loosened rule: the rows after a rejected draft are sampled too (their draws spent)."""
    accepted, token, stopped = 0, None, False
    for j in range(len(drafts) + 1):
        if stopped:
            seq.sampler.sample(logits[row + j])
            continue
        token = seq.accept_logits(logits[row + j])
        if token is None or j == len(drafts) or token != drafts[j]:
            stopped = True
            continue
        accepted += 1
    return accepted, token


@pytest.fixture(scope="module")
def llama_self_drafted(tiny_llama_path):
    """The tiny llama drafted for by itself: each draft is the model's argmax."""
    runner = _runner(tiny_llama_path, draft_model=str(tiny_llama_path))
    yield runner
    runner.close()


@pytest.mark.slow
@pytest.mark.parametrize("loosened", [_accept_argmax, _draw_every_row])
def test_the_comparison_fails_when_the_acceptance_rule_is_loosened(
    llama_self_drafted, loosened, monkeypatch
):
    """Built so that each loosened rule must change the text: the drafts are the model's
    own argmax (it drafts for itself) and sampling is hot (temperature 2 over the whole
    vocabulary), so a check soon meets a position whose sample is not the argmax (the exact
    run shows where: its sampled token is not its top one). There the argmax rule takes the
    draft instead; and the draft after a rejected one has a row whose extra draw shifts
    every later sample."""
    runner = llama_self_drafted
    reqs = {
        f"hot-{i}": CompletionRequest(
            tokens=_prompt(runner, 30 + i),
            options=CompletionOptions(
                num_predict=24, temperature=2.0, top_k=0, top_p=1.0, min_p=0.0, seed=i
            ),
            logprobs=True,
            top_logprobs=1,
        )
        for i in range(4)
    }
    plain = {name: _run(runner, _with(req, False)) for name, req in reqs.items()}
    # The precondition: in its first tokens (where the first checks are) a sample is not
    # the argmax.
    assert all(
        any(lp.bytes != lp.top_logprobs[0].bytes for lp in r["logprobs"][:8])
        for r in plain.values()
    )
    with monkeypatch.context() as m:
        m.setattr(Speculator, "accept", loosened)
        found, drafted, _ = compare(runner, reqs)
    assert drafted > 0
    assert any(": text " in f for f in found), found  # the loosened rule changes the text


# -- the drafter -------------------------------------------------------------------------------
def test_prompt_lookup_drafts_what_followed_the_longest_recent_ngram():
    lookup = PromptLookup([5, 6, 7, 8, 9, 1, 6, 7, 3, 4, 2, 6, 7])
    assert lookup.propose(3) == [3, 4, 2]  # "6 7" last occurred before "3 4 2"
    lookup.append(8)
    assert lookup.propose(2) == [9, 1]  # "6 7 8" beats the shorter "7 8" and "8"
    assert PromptLookup([1, 2, 3]).propose(4) == []
    assert PromptLookup([4, 5, -2, 4, 5]).propose(3) == []  # an image placeholder ends a draft


def test_the_drafter_adapts_its_length_and_pauses_when_drafts_miss():
    lookups, pace = PromptLookups(), DraftPace(max_draft=7)
    lookups.begin(0, [1, 2, 3, 1, 2, 3, 1, 2])
    ask = DraftAsk([1, 2, 3, 1, 2, 3, 1], 2, 10, pace.wanted(10))
    assert ask.k == 4 and ask.context == [1, 2, 3, 1, 2, 3, 1, 2]
    assert lookups.propose({0: ask}) == {0: [3, 1, 2]}  # what followed the latest "1 2"
    pace.checked(4, 4)
    assert pace.length == 7  # doubled from 4, held to max_draft
    pace.checked(7, 1)
    pace.checked(2, 2)
    assert pace.length == 4  # from one past the accepted, doubled
    pace.checked(6, 1)
    assert pace.length == 2
    for _ in range(3):
        pace.checked(2, 0)
    assert not pace.active and pace.wanted(5) == 0
    for _ in range(pace.paused):
        pace.added()
    assert pace.active


def test_where_waiting_costs_pipelining_passes_without_a_draft_count_as_misses():
    patient, costly = DraftPace(), DraftPace(costly_wait=True)
    for _ in range(3):
        patient.nothing_drafted()
        costly.nothing_drafted()
    assert patient.active and not costly.active
