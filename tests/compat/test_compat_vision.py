"""Images on the llama.cpp engine (issue 14): the tiny random Gemma 3 and its projector, both
written by llama.cpp's converter, forced onto the llama.cpp engine (model parameter
`engine llamacpp`) in a live `hearth serve`. An image question's greedy answer equals what
libmtmd gives directly (`hearth.plugins.testing.llamacpp_mtmd`, its own process, the same
prompt), for two images that the model answers differently; a repeated image reuses the
prompt cache."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server.fakes import LiveServer, start_server, stop_server

from compat.mtmd_models import build_or_skip
from hearth.plugins.testing import run_oracle, sample_images
from hearth.plugins.testing.llamacpp_mtmd import LLAMACPP_MTMD
from hearth_gemma3.testing import Gemma3VisionFiles, build_tiny_gemma3_vision

pytestmark = pytest.mark.slow

MODEL = "vision-cpp"
PROMPT = "[img-0]what is this?"
PREDICT = 8
IMAGES = sample_images()
PICTURES = ("normal", "tiny")  # two pictures the tiny model answers differently


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Gemma3VisionFiles:
    return build_or_skip(build_tiny_gemma3_vision, tmp_path_factory.mktemp("gemma3-vision"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, vision: Gemma3VisionFiles
) -> Iterator[LiveServer]:
    import ollama

    home = tmp_path_factory.mktemp("compat-vision-home")
    live = start_server(home, None, {"HEARTH_CONTEXT_LENGTH": "512", "HEARTH_OFFLINE": "1"})
    client = ollama.Client(host=live.url)
    files = {p.name: client.create_blob(p) for p in (vision.text, vision.mmproj)}
    client.create(MODEL, files=files, parameters={"engine": "llamacpp"})
    yield live
    stop_server(live)


def _generate(server: LiveServer, picture: str) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "raw": True,
        "stream": False,
        "logprobs": True,
        "images": [base64.b64encode(IMAGES[picture]).decode()],
        "options": {"temperature": 0, "repeat_penalty": 1.0, "num_predict": PREDICT},
    }
    resp = httpx.post(f"{server.url}/api/generate", json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def _answer(got: dict[str, Any]) -> tuple[bytes, int]:
    """The answer's bytes and token count (from its logprobs: raw bytes, not text that
    replaced a partial UTF-8 character)."""
    return b"".join(bytes(lp["bytes"]) for lp in got["logprobs"]), len(got["logprobs"])


def _libmtmd(
    vision: Gemma3VisionFiles, picture: str, tmp: Path
) -> tuple[str, tuple[bytes, int], int]:
    """libmtmd's greedy answer to PROMPT with `picture` (text; bytes and token count), and
    the prompt's positions."""
    image = tmp / f"{picture}.png"
    image.write_bytes(IMAGES[picture])
    request = {
        "model": str(vision.text),
        "mmproj": str(vision.mmproj),
        "images": [str(image)],
        "prompt": PROMPT,
        "marker": "[img-0]",
        "n_ctx": 512,
        "greedy": PREDICT,
    }
    out = run_oracle(LLAMACPP_MTMD, request, tmp, tiled=True)
    text = bytes(out["greedy_text"]).decode("utf-8", "replace")
    answer = bytes(out["greedy_text"]) if len(out["greedy"]) else b""
    return text, (answer, len(out["greedy"])), len(out["ids"])


def test_show_says_llamacpp_and_vision(server: LiveServer) -> None:
    shown = httpx.post(f"{server.url}/api/show", json={"model": MODEL}).json()
    assert shown["hearth"]["engine"] == "llamacpp"
    assert "vision" in shown["capabilities"]


@pytest.mark.parametrize("picture", PICTURES)
def test_image_answer_equals_libmtmd(
    server: LiveServer, vision: Gemma3VisionFiles, picture: str, tmp_path: Path
) -> None:
    expected, answer, positions = _libmtmd(vision, picture, tmp_path)
    got = _generate(server, picture)
    assert _answer(got) == answer
    assert got["response"] == expected
    assert got["hearth"]["prompt_tokens"] == positions  # mtmd's positions, images included


def test_two_images_answer_differently_and_repeat_from_cache(
    server: LiveServer, vision: Gemma3VisionFiles, tmp_path: Path
) -> None:
    for p in PICTURES:
        (tmp_path / p).mkdir()
    first, other = (_libmtmd(vision, p, tmp_path / p)[1] for p in PICTURES)
    assert first != other  # the answer depends on the picture
    answers = [_generate(server, p) for p in (*PICTURES, PICTURES[0], PICTURES[0])]
    assert [_answer(a) for a in answers] == [first, other, first, first]
    assert answers[-1]["hearth"]["prompt_cached"] > 0  # the same image: the cache reused
