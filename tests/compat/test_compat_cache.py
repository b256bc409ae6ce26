"""The llama.cpp engine's prompt cache: a stream per sequence (kv_unified off), so sharing a
prefix between slots copies llama.cpp's cells across streams and must carry the exact keys
and values; reuse across turns evaluates only what is new."""

from __future__ import annotations

from typing import Any

import pytest

from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.protocol import CompletionRequest

PROMPT = "Once upon a time there was a small village by the sea where every morning"
GREEDY = {"temperature": 0, "repeat_penalty": 1.0, "num_predict": 12}


def _complete(runner: Runner, prompt: str, **kw: Any) -> tuple[list[float], dict[str, Any]]:
    """The chosen tokens' logprobs and the final event."""
    seq = runner.completion(CompletionRequest(prompt=prompt, options=GREEDY, logprobs=True, **kw))
    logprobs: list[float] = []
    done: dict[str, Any] = {}
    while (event := seq.events.get(timeout=300)) is not None:
        assert "error" not in event, event
        if event.get("done"):
            done = event
        else:
            logprobs += [lp["logprob"] for lp in event.get("logprobs", [])]
    return logprobs, done


@pytest.fixture(scope="module")
def runners(tiny_llama_path):
    def make(multi_user: bool) -> Runner:
        config = RunnerConfig(
            str(tiny_llama_path),
            num_ctx=256,
            parallel=2,
            engine="llamacpp",
            multi_user_cache=multi_user,
        )
        return Runner(config)

    shared, single = make(True), make(False)
    yield shared, single
    shared.close()
    single.close()


@pytest.mark.slow
def test_a_prefix_shared_across_streams_gives_what_reuse_in_one_stream_gives(runners):
    shared, single = runners
    follow_up = PROMPT + " the fishermen"
    # Multi-user: the follow-up shares only the prompt with slot 0 (which also holds the
    # first answer), so it takes slot 1 and gets the prefix copied from slot 0's stream.
    _, first = _complete(shared, PROMPT)
    copied_lp, copied = _complete(shared, follow_up)
    # Single-user: the follow-up reuses slot 0 itself; the same split of work (the prompt
    # in one pass, the rest in the next), so llama.cpp computes the same numbers.
    _, first_single = _complete(single, PROMPT)
    reused_lp, reused = _complete(single, follow_up)
    assert first["context"] == first_single["context"]
    prefix = copied["prompt_cached"]
    assert prefix > 0 and prefix == reused["prompt_cached"]
    assert copied["context"] == reused["context"]
    assert copied_lp == reused_lp  # bit for bit: the copied cells are the cells
    # Slot 0 kept its own content: the first request again reuses all of its prompt.
    again_lp, again = _complete(shared, PROMPT)
    assert again["context"] == first["context"]
    prompt_len = first["prompt_cached"] + first["prompt_eval_count"]
    # (the loop evaluates prompt rows two or more at a time: the last two are evaluated)
    assert again["prompt_cached"] == prompt_len - 2


@pytest.mark.slow
def test_a_second_turn_evaluates_only_the_new_tokens(runners):
    _, single = runners
    _, first = _complete(single, PROMPT + " a bell")
    turn = PROMPT + " a bell rang twice"
    _, second = _complete(single, turn)
    assert second["prompt_cached"] > 0
    assert second["prompt_eval_count"] < len(second["context"]) - second["eval_count"]
    assert first["done_reason"] == second["done_reason"] == "length"
