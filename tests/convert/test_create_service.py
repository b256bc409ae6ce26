"""`hearth create` from a Hugging Face folder through a real `hearth serve`: the ollama
client's create(files=...) after uploading each file as a blob, the CLI's `-f DIR` with its
progress lines, and refusals as 400 sentences before anything streams."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ollama
import pytest

from tests.server.fakes import LiveServer, start_server, stop_server

from .hf_models import build_tiny_llama

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

GREEDY = {"temperature": 0, "num_predict": 8, "seed": 1}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("user") / "tiny-llama")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    live = start_server(tmp_path_factory.mktemp("home"), None, {"HEARTH_CONTEXT_LENGTH": "256"})
    yield live
    stop_server(live)


@pytest.fixture(scope="module")
def oc(server: LiveServer) -> ollama.Client:
    return ollama.Client(host=server.url, timeout=120)


def cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HEARTH_HOST=server.url)
    return subprocess.run(
        [sys.executable, "-m", "hearth", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_create_from_a_folder_shows_progress(server, oc, folder):
    proc = cli(server, "create", "tiny-hf", "-f", str(folder))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "success"
    assert any(
        line.startswith("converting LlamaForCausalLM to F16") and line.endswith("100%")
        for line in lines
    )
    show = oc.show("tiny-hf")
    assert show.details.family == "llama"
    answer = oc.generate("tiny-hf", "The quick brown fox", options=GREEDY, raw=True)
    assert answer.eval_count == 8


@pytest.mark.slow
def test_ollama_client_create_from_uploaded_files(server, oc, folder):
    files = {p.name: oc.create_blob(p) for p in sorted(folder.iterdir()) if p.is_file()}
    assert "config.json" in files and "model.safetensors" in files
    statuses = [s.status for s in oc.create("tiny-hf-blobs", files=files, stream=True)]
    assert statuses[-1] == "success"
    assert any(s and s.startswith("converting") for s in statuses)
    a = oc.generate("tiny-hf-blobs", "Hello world", options=GREEDY, raw=True).response
    b = oc.generate("tiny-hf", "Hello world", options=GREEDY, raw=True).response
    assert a == b  # the same folder, the same model, however it arrived
    # Refusals: 400 sentences before anything streams.
    no_tokenizer = {k: v for k, v in files.items() if k != "tokenizer.model"}
    with pytest.raises(ollama.ResponseError) as err:
        oc.create("broken", files=no_tokenizer)
    assert err.value.status_code == 400 and "no tokenizer" in err.value.error
    no_config = {k: v for k, v in files.items() if k != "config.json"}
    with pytest.raises(ollama.ResponseError) as err:
        oc.create("broken", files=no_config)
    assert err.value.status_code == 400 and "no config.json" in err.value.error
    with pytest.raises(ollama.ResponseError) as err:
        oc.create("broken", files=files, quantize="q3_k_s")
    assert err.value.status_code == 400 and "cannot convert to 'q3_k_s'" in err.value.error
    assert "broken" not in [m.model for m in oc.list().models]
