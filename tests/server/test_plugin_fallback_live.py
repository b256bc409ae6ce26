"""Issue 34's two rules on a live `hearth serve`, with a third-party plugin installed (a
dist-info on PYTHONPATH, as pip leaves one) that registers `qwen2`, a built-in architecture,
and refuses every file (its settings reader raises ValueError, as a plugin's does for a file
it cannot run): it overrides the built-in plugin (a log line naming both), and a qwen2 GGUF
then runs on the llama.cpp engine instead (never a 500), with the reason in the log,
`/api/show` and `/api/ps`; the text is llama.cpp's own greedy text."""

from __future__ import annotations

import json
import os
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

REFUSAL = "this build of the plugin refuses every file"
CRASH = "a plugin's own bug"
PLUGIN = f'''
from pathlib import Path

from hearth.plugins import ArchitectureSpec, hookimpl
from hearth_qwen2 import Config, Model


class Refusing(Config):
    @classmethod
    def from_gguf(cls, meta):
        if (Path(__file__).parent / "crash").exists():  # a bug, not a refusal
            raise AttributeError("{CRASH}")
        raise ValueError("{REFUSAL}")


@hookimpl
def register_architectures(register):
    register(ArchitectureSpec(name="qwen2", config=Refusing, model=Model))
'''
GREEDY = {"temperature": 0, "repeat_penalty": 1.0, "num_predict": 10}
PROMPT = "<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n"


def _site(folder: Path) -> Path:
    folder.mkdir()
    (folder / "refusing_qwen2.py").write_text(PLUGIN)
    info = folder / "refusing_qwen2-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: refusing-qwen2\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hearth.plugins]\nrefusing_qwen2 = refusing_qwen2\n")
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path, Path]]:
    import ollama

    work = tmp_path_factory.mktemp("refusing")
    model = tiny_chat_gguf(work, "qwen2")
    site = _site(work / "site")
    paths = [str(site), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {"HEARTH_CONTEXT_LENGTH": "512", "HEARTH_OFFLINE": "1", "HEARTH_NUM_PARALLEL": "1",
           "PYTHONPATH": os.pathsep.join(paths)}  # fmt: skip
    live = start_server(work / "home", None, env)
    client = ollama.Client(host=live.url)
    client.create("qwen-tiny", files={model.name: client.create_blob(model)})
    yield live, model, site
    stop_server(live)


def _show(server: LiveServer, name: str = "qwen-tiny") -> dict[str, Any]:
    r = httpx.post(f"{server.url}/api/show", json={"model": name})
    assert r.status_code == 200, r.text
    return r.json()["hearth"]  # type: ignore[no-any-return]


def _llama_cpp_greedy(model: Path, tmp: Path) -> str:
    request = tmp / "reference.json"
    greedy = [{"prompt": PROMPT, "n": GREEDY["num_predict"]}]
    request.write_text(json.dumps({"model": str(model), "n_ctx": 512, "greedy": greedy}))
    script = Path(__file__).parents[1] / "compat" / "llamacpp_reference.py"
    proc = subprocess.run([sys.executable, str(script), str(request)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return str(json.loads(proc.stdout)["greedy"][0]["text"])


def test_the_overriding_plugin_refuses_and_llamacpp_runs_the_model(
    setup: tuple[LiveServer, Path, Path], tmp_path: Path
) -> None:
    server, model, _ = setup
    before = _show(server)
    assert (before["engine"], before["engine_reason"]) == (
        "hearth",
        "a Hearth plugin runs architecture 'qwen2'",
    )
    body = {"model": "qwen-tiny", "prompt": PROMPT, "raw": True, "stream": False}
    r = httpx.post(f"{server.url}/api/generate", json={**body, "options": GREEDY}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == _llama_cpp_greedy(model, tmp_path)
    after = _show(server)
    assert after["engine"] == "llamacpp"
    assert after["engine_reason"].startswith("Hearth's plugin for architecture 'qwen2' could ")
    assert REFUSAL in after["engine_reason"]
    assert after["engine_reason"].endswith("; the llama.cpp engine runs it")
    (loaded,) = httpx.get(f"{server.url}/api/ps").json()["models"]
    assert loaded["hearth"]["engine"] == "llamacpp"
    log = server.log.read_text()
    override = "plugin 'refusing_qwen2' overrides the built-in plugin 'hearth_qwen2' for "
    assert override + "architecture 'qwen2'" in log
    assert "Hearth's plugin could not load qwen-tiny:latest (" in log
    assert "running it on the llama.cpp engine" in log


def test_a_plugin_that_crashes_loading_a_file_falls_back_too(
    setup: tuple[LiveServer, Path, Path], tmp_path: Path
) -> None:
    """A plugin's own bug (an AttributeError while it reads the file, not a refusal) is no
    500 either: the file runs on llama.cpp and the reason names the exception."""
    import ollama

    server, _, site = setup
    (site / "crash").write_text("")
    model = tiny_chat_gguf(tmp_path, "qwen2", seed=4)  # another file: nothing known of it yet
    client = ollama.Client(host=server.url)
    client.create("qwen-crash", files={model.name: client.create_blob(model)})
    body = {"model": "qwen-crash", "prompt": PROMPT, "raw": True, "stream": False}
    r = httpx.post(f"{server.url}/api/generate", json={**body, "options": GREEDY}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == _llama_cpp_greedy(model, tmp_path)
    after = _show(server, "qwen-crash")
    assert after["engine"] == "llamacpp"
    assert f"AttributeError: {CRASH}" in after["engine_reason"]
