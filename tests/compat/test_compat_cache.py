"""The llama.cpp engine's prompt cache: a stream per sequence (kv_unified off), so sharing a
prefix between slots copies llama.cpp's cells across streams and must carry the exact keys
and values; reuse across turns evaluates only what is new. Runners in their own processes
(llama.cpp never loads beside Hearth's ggml)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hearth.runner.protocol import (
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
    EngineKind,
    RunnerOptions,
    to_wire,
)
from hearth.server.scheduling.runner_process import RunnerProcess

pytestmark = pytest.mark.slow

PROMPT = "Once upon a time there was a small village by the sea where every morning"
GREEDY = CompletionOptions(temperature=0, repeat_penalty=1.0, num_predict=12)
OPTIONS = RunnerOptions(num_ctx=256, parallel=2, engine=EngineKind.LLAMACPP)


async def _complete(runner: RunnerProcess, prompt: str) -> tuple[list[float], CompletionDone]:
    """The chosen tokens' logprobs and the final line."""
    request = CompletionRequest(prompt=prompt, options=GREEDY, logprobs=True)
    logprobs: list[float] = []
    done = None
    async for event in runner.completion(request):
        if isinstance(event, CompletionDone):
            done = event
        else:
            logprobs += [lp.logprob for lp in event.logprobs or []]
    assert done is not None
    return logprobs, done


def test_a_prefix_shared_across_streams_gives_what_reuse_in_one_stream_gives(
    tiny_llama_path, monkeypatch
):
    follow_up = PROMPT + " the fishermen"

    async def turns(multi_user: bool) -> list[tuple[list[float], CompletionDone]]:
        monkeypatch.setenv("HEARTH_MULTIUSER_CACHE", "1" if multi_user else "0")
        runner = await RunnerProcess.start(str(tiny_llama_path), OPTIONS)
        try:
            return [await _complete(runner, p) for p in (PROMPT, follow_up, PROMPT)]
        finally:
            await runner.stop()

    # Multi-user: the follow-up shares only the prompt with slot 0 (which also holds the
    # first answer), so it takes slot 1 and gets the prefix copied from slot 0's stream.
    (_, first), (copied_lp, copied), (_, again) = asyncio.run(turns(True))
    # Single-user: the follow-up reuses slot 0 itself; the same split of work (the prompt
    # in one pass, the rest in the next), so llama.cpp computes the same numbers.
    (_, first_single), (reused_lp, reused), _ = asyncio.run(turns(False))
    assert first.context == first_single.context
    prefix = copied.prompt_cached
    assert prefix > 0 and prefix == reused.prompt_cached
    assert copied.context == reused.context
    assert copied_lp == reused_lp  # bit for bit: the copied cells are the cells
    # Slot 0 kept its own content: the first prompt again reuses all of it (the loop
    # evaluates prompt rows two or more at a time: the last two are evaluated again).
    assert again.context == first.context
    prompt_len = first.prompt_cached + first.prompt_eval_count
    assert again.prompt_cached == prompt_len - 2


def test_a_second_turn_evaluates_only_the_new_tokens(tiny_llama_path):
    async def run() -> tuple[CompletionDone, CompletionDone]:
        runner = await RunnerProcess.start(str(tiny_llama_path), OPTIONS)
        try:
            _, first = await _complete(runner, PROMPT + " a bell")
            _, second = await _complete(runner, PROMPT + " a bell rang twice")
            return first, second
        finally:
            await runner.stop()

    first, second = asyncio.run(run())
    # The first prompt is a prefix of the second: all of it is reused (but the last two
    # inputs, evaluated again as one run)
    first_len = first.prompt_cached + first.prompt_eval_count
    assert second.prompt_cached >= first_len - 2
    assert first.done_reason == second.done_reason == "length"


def test_memory_is_what_llamacpp_allocated_per_device(tiny_llama_path):
    async def run() -> dict[str, Any]:
        runner = await RunnerProcess.start(str(tiny_llama_path), OPTIONS)
        try:
            return to_wire(runner.info)
        finally:
            await runner.stop()

    info = asyncio.run(run())
    devices = info["devices"]
    assert set(devices) == {"CPU"}  # no GPU here: every buffer is the CPU's
    cpu = devices["CPU"]
    assert cpu["weights"] >= info["memory"]["weights"] > 0
    assert cpu["cache"] > 0 and cpu["graph"] > 0  # the KV and compute buffers llama.cpp logged
    memory = info["memory"]
    assert sum(cpu.values()) == memory["weights"] + memory["cache"] + memory["graph"]
