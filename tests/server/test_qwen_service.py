"""A Qwen2 GGUF on a live `hearth serve` (issue 34): it runs on Hearth's own engine (a
built-in plugin registers qwen2) with speculation on, as `/api/ps` shows, drafting with a
smaller Qwen2 of the same vocabulary when the request names one (`draft_model`), and the
text is the same with and without the draft model (and llama.cpp's greedy text)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from convert.chat_models import tiny_chat_gguf

from .fakes import LiveServer, start_server, stop_server

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0, "repeat_penalty": 1.0, "num_predict": 12}
PROMPT = "<|im_start|>user\nThe quick brown fox<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("qwen2-pair")
    target = tiny_chat_gguf(work, "qwen2", seed=3)
    return target, tiny_chat_gguf(work, "qwen2", seed=11, num_hidden_layers=1)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, files: tuple[Path, Path]
) -> Iterator[LiveServer]:
    import ollama

    home = tmp_path_factory.mktemp("qwen-home")
    env = {"HEARTH_CONTEXT_LENGTH": "512", "HEARTH_OFFLINE": "1", "HEARTH_NUM_PARALLEL": "1"}
    live = start_server(home, None, env)
    client = ollama.Client(host=live.url)
    for name, path in zip(("qwen-tiny", "qwen-draft"), files, strict=True):
        client.create(name, files={path.name: client.create_blob(path)})
    yield live
    stop_server(live)


def _generate(server: LiveServer, **options: Any) -> str:
    body = {"model": "qwen-tiny", "prompt": PROMPT, "raw": True, "stream": False}
    r = httpx.post(f"{server.url}/api/generate", json={**body, "options": {**GREEDY, **options}},
                   timeout=300)  # fmt: skip
    assert r.status_code == 200, r.text
    return str(r.json()["response"])


def _ps(server: LiveServer) -> dict[str, Any]:
    (model,) = httpx.get(f"{server.url}/api/ps").json()["models"]
    return model["hearth"]  # type: ignore[no-any-return]


def _llama_cpp_greedy(model: Path, tmp: Path) -> str:
    request = tmp / "reference.json"
    greedy = [{"prompt": PROMPT, "n": GREEDY["num_predict"]}]
    request.write_text(json.dumps({"model": str(model), "n_ctx": 512, "greedy": greedy}))
    script = Path(__file__).parents[1] / "compat" / "llamacpp_reference.py"
    proc = subprocess.run([sys.executable, str(script), str(request)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return str(json.loads(proc.stdout)["greedy"][0]["text"])


def test_qwen2_runs_on_hearth_with_speculation_and_a_draft_model(
    server: LiveServer, files: tuple[Path, Path], tmp_path: Path
) -> None:
    shown = httpx.post(f"{server.url}/api/show", json={"model": "qwen-tiny"}).json()["hearth"]
    assert shown["engine"] == "hearth"
    assert shown["engine_reason"] == "a Hearth plugin runs architecture 'qwen2'"
    plain = _generate(server)
    ps = _ps(server)
    assert ps["engine"] == "hearth"
    assert ps["speculation"] == {"enabled": True, "drafts": "prompt lookup"}
    drafted = _generate(server, draft_model="qwen-draft")
    ps = _ps(server)
    assert ps["engine"] == "hearth"
    assert ps["speculation"] == {"enabled": True, "drafts": "draft model"}
    assert drafted == plain
    assert plain == _llama_cpp_greedy(files[0], tmp_path)
