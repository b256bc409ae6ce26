"""Speculative decoding's comparison kit (tests/runner/test_speculative*.py): the same requests
run with drafting off and on, the differences between the two results, repeating prompts to
look up, and the small runners the comparisons use."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.protocol import (
    CompletionOptions,
    CompletionRequest,
)

from .runner import read_events

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
        "n": {"type": "integer"},
    },
    "required": ["name", "tags", "n"],
    "additionalProperties": False,
}

# Greedy and sampled settings: penalties, temperatures, top-k/top-p/min-p, seeds.
SETTINGS: dict[str, dict[str, Any]] = {
    "greedy": {"temperature": 0, "repeat_penalty": 1.0},
    "greedy-penalties": {
        "temperature": 0,
        "repeat_penalty": 1.3,
        "presence_penalty": 0.4,
        "frequency_penalty": 0.2,
        "repeat_last_n": 16,
    },
    "warm": {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 1},
    "hot-min-p": {"temperature": 1.3, "top_k": 0, "top_p": 1.0, "min_p": 0.05, "seed": 2},
    "cool-top-p": {"temperature": 0.3, "top_p": 0.5, "repeat_penalty": 1.1, "seed": 3},
    "default-sampler": {"seed": 4},
}


# -- running and comparing ----------------------------------------------------------------------
def _run(runner: Runner, req: CompletionRequest) -> dict[str, Any]:
    seq = runner.completion(req)
    return _result(seq)


def _result(seq: Any) -> dict[str, Any]:
    pieces, done = read_events(seq)
    logprobs = [lp for p in pieces for lp in p.logprobs or []]
    return {"bytes": b"".join(p.content.encode() for p in pieces), "logprobs": logprobs,
            "done": done}  # fmt: skip


def _with(req: CompletionRequest, speculate: bool) -> CompletionRequest:
    return replace(req, options=replace(req.options, speculate=speculate))


def _differences(plain: dict[str, Any], spec: dict[str, Any], name: str) -> list[str]:
    a, b = plain["done"], spec["done"]
    found = []
    if plain["bytes"] != spec["bytes"]:
        found.append(f"{name}: text {plain['bytes'][:80]!r} != {spec['bytes'][:80]!r}")
    if plain["logprobs"] != spec["logprobs"]:
        found.append(f"{name}: logprobs differ")
    for key in ("context", "eval_count", "done_reason", "stop", "shifted"):
        if getattr(a, key) != getattr(b, key):
            found.append(f"{name}: {key} differs")
    return found


def run_both(
    runner: Runner, requests: dict[str, CompletionRequest], together: bool = False
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The results of `requests` with speculation off, one request at a time, and on, one
    at a time or all submitted at once."""
    plain = {name: _run(runner, _with(req, False)) for name, req in requests.items()}
    for result in plain.values():
        assert result["done"].drafted == 0
    if together:
        seqs = {name: runner.completion(_with(req, True)) for name, req in requests.items()}
        spec = {name: _result(seq) for name, seq in seqs.items()}
    else:
        spec = {name: _run(runner, _with(req, True)) for name, req in requests.items()}
    return plain, spec


def compare(
    runner: Runner, requests: dict[str, CompletionRequest], together: bool = False
) -> tuple[list[str], int, int]:
    """(differences between speculation off and on (`run_both`); tokens drafted; tokens
    accepted)."""
    plain, spec = run_both(runner, requests, together)
    found = [d for name in requests for d in _differences(plain[name], spec[name], name)]
    drafted = sum(r["done"].drafted for r in spec.values())
    accepted = sum(r["done"].accepted for r in spec.values())
    return found, drafted, accepted


def _prompt(runner: Runner, seed: int, length: int = 48) -> list[int]:
    """A prompt that repeats itself (as code to edit does): something to look up."""
    rng = np.random.default_rng(seed)
    vocab = runner.tokenizer.vocab_size
    piece = rng.integers(3, min(vocab, 260) - 1, 12).tolist()
    filler = rng.integers(3, min(vocab, 260) - 1, length - 36).tolist()
    bos = runner.tokenizer.bos_id
    return [*([bos] if bos is not None else []), *piece, *filler, *piece, *piece]


def requests_for(runner: Runner, num_predict: int = 40) -> dict[str, CompletionRequest]:
    reqs = {
        name: CompletionRequest(
            tokens=_prompt(runner, i),
            options=CompletionOptions(num_predict=num_predict, **opts),
            logprobs=True,
            top_logprobs=3,
        )
        for i, (name, opts) in enumerate(SETTINGS.items())
    }
    reqs["json-schema"] = CompletionRequest(
        tokens=_prompt(runner, 10),
        options=CompletionOptions(num_predict=num_predict, temperature=0.8, seed=5),
        format=SCHEMA,
        logprobs=True,
    )
    return reqs


def with_stop_strings(runner: Runner, reqs: dict[str, CompletionRequest]) -> None:
    """Add requests whose stop string is a piece of what they generate without one (so the
    stop string does end them, possibly inside drafted tokens)."""
    for name in ("greedy", "warm"):
        base = _with(reqs[name], False)
        text = _run(runner, base)["bytes"].decode("utf-8", "replace")
        pieces = (text[i : i + 2] for i in range(len(text) // 2, len(text) - 1))
        piece = next((p for p in pieces if p.isprintable() and "\ufffd" not in p), None)
        if piece:
            reqs[f"{name}-stop"] = replace(base, options=replace(base.options, stop=[piece]))


# -- models ---------------------------------------------------------------------------------------
def _runner(path: Path, **kw: Any) -> Runner:
    config = {
        "num_ctx": 160,
        "parallel": 4,
        "num_batch": 64,
        "threads": 2,
        "weigh_drafts": False,
        **kw,
    }
    return Runner(RunnerConfig(str(path), **config))
