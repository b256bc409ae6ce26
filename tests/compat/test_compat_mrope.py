"""M-RoPE images on the llama.cpp engine: a tiny random Qwen2-VL (an image of 16 embeddings
takes 4 positions) and its projector, both written by llama.cpp's converter, in a runner of
its own. Greedy answers equal libmtmd's own (`mtmd_helper`'s positions, run by the oracle in
its own process) for two images the model answers differently, with text before the image,
and on a second turn that reuses the cached image (its positions then come from the map)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from compat.mtmd_models import build_or_skip
from compat.qwen2vl_gguf import build_tiny_qwen2vl, sample_png
from hearth.plugins.testing import run_oracle
from hearth.plugins.testing.llamacpp_mtmd import LLAMACPP_MTMD
from hearth.runner.protocol import (
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
    EngineKind,
    RunnerOptions,
)
from hearth.server.scheduling.runner_process import RunnerProcess

pytestmark = pytest.mark.slow

PREDICT = 8
PICTURES = ("gradient", "checker")  # two pictures the tiny model answers differently


@pytest.fixture(scope="module")
def qwen2vl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_or_skip(build_tiny_qwen2vl, tmp_path_factory.mktemp("qwen2vl"))


def _libmtmd(files: tuple[Path, Path], picture: str, prompt: str, tmp: Path) -> bytes:
    """libmtmd's greedy answer (bytes) to `prompt` with `picture` as [img-0]."""
    image = tmp / f"{picture}.png"
    image.write_bytes(sample_png(picture))
    request = {
        "model": str(files[0]),
        "mmproj": str(files[1]),
        "images": [str(image)],
        "prompt": prompt,
        "marker": "[img-0]",
        "n_ctx": 512,
        "greedy": PREDICT,
    }
    out = run_oracle(LLAMACPP_MTMD, request, tmp, tiled=True)
    return bytes(out["greedy_text"])


async def _answers(
    files: tuple[Path, Path], turns: list[tuple[str, str]]
) -> list[tuple[bytes, CompletionDone]]:
    """Our greedy answers (bytes, from the logprobs) to each (prompt, picture), in one runner."""
    options = RunnerOptions(
        num_ctx=512, parallel=2, engine=EngineKind.LLAMACPP, projector=str(files[1])
    )
    runner = await RunnerProcess.start(str(files[0]), options)
    out = []
    try:
        for prompt, picture in turns:
            request = CompletionRequest(
                prompt=prompt,
                images=[base64.b64encode(sample_png(picture)).decode()],
                options=CompletionOptions(temperature=0, repeat_penalty=1.0, num_predict=PREDICT),
                logprobs=True,
            )
            answer, done = b"", None
            async for event in runner.completion(request):
                if isinstance(event, CompletionDone):
                    done = event
                else:
                    for lp in event.logprobs or []:
                        answer += bytes(lp.bytes)
            out.append((answer, done))
    finally:
        await runner.stop()
    return out


def test_image_answers_equal_libmtmd(qwen2vl: tuple[Path, Path], tmp_path: Path) -> None:
    prompts = ["[img-0]what is this?", "look: [img-0] what is this?"]
    turns = [(p, picture) for p in prompts for picture in PICTURES]
    got = asyncio.run(_answers(qwen2vl, turns))
    expected = [_libmtmd(qwen2vl, picture, p, tmp_path) for p, picture in turns]
    assert [answer for answer, _ in got] == expected
    assert expected[0] != expected[1]  # the pictures are told apart
    for _, done in got:
        assert done.eval_count == PREDICT


def test_a_second_turn_reuses_the_image_and_equals_libmtmd(
    qwen2vl: tuple[Path, Path], tmp_path: Path
) -> None:
    first = "[img-0]what is this?"
    answer = _libmtmd(qwen2vl, "gradient", first, tmp_path).decode("utf-8", "replace")
    second = f"{first}{answer} and then?"
    (_, done1), (got, done2) = asyncio.run(
        _answers(qwen2vl, [(first, "gradient"), (second, "gradient")])
    )
    assert got == _libmtmd(qwen2vl, "gradient", second, tmp_path)
    # The image and the text around it came from the cache (16 embeddings at least).
    assert done2.prompt_cached >= 16
    assert done2.prompt_cached + done2.prompt_eval_count > done1.prompt_eval_count
