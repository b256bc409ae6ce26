"""Llama 3.2 Vision in Ollama's registry layout: `ollama pull llama3.2-vision` stores a text
GGUF (architecture `mllama`, no encoder) and a separate projector GGUF (`application/vnd.ollama
.image.projector`, architecture `mllama` too, `mllama.vision.*` keys, the layer names of
Ollama's former llama.cpp-based runner: `ln1`, `ln2`, `attn_out`, fc1 named `ffn_down`).

A fake Ollama models folder (manifests/registry.ollama.ai/library/NAME/TAG, blobs/sha256-*)
holds the tiny random model in that layout: the text file is the converted one-file model
minus its encoder (`write_text_gguf`), the projector is written from transformers' weights
with Ollama's renames and repacks (`write_vision_gguf(layout="projector")`), plus the Go
template and params layers Ollama ships. `hearth import-ollama` brings it over, and the
imported model must answer image chats exactly as the one-file model (`hearth create` of the
converted file) does: same greedy tokens and the same log-probabilities; the one-file model's
answers are transformers' (tests/server/test_mllama_e2e.py), and they depend on the picture.

The text file's token embedding: Hearth's converter, Ollama's current one and Ollama's former
llama.cpp loader (`tok_embd` of `n_vocab + 8` rows) all have the text vocabulary's 8 extra rows.
A table without them works as long as it has the `<|image|>` row (the tiny model's image id is
inside the vocabulary, so the cut table answers the same); a table without that row is refused
with a sentence.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import httpx
import numpy as np
import pytest

from hearth.convert import convert_checkpoint
from hearth.engine.model import ModelLoadError, load_model
from hearth.plugins.registry import default_converters, default_registry
from hearth_mllama.testing import (
    TinyMllamaVision,
    random_png,
    tiny_mllama,
    vision_keys,
    vision_tensors,
    write_text_gguf,
    write_vision_gguf,
)
from tests.plugins.mllama_checkpoint import LLAMA32_VISION_TEMPLATE, save_tiny

from .fakes import REPO, LiveServer, start_server, stop_server

SPEC = TinyMllamaVision(vocab=300, text_layers=5, cross_attention_layers=(1, 3))
GREEDY = {"temperature": 0, "num_predict": 8, "repeat_penalty": 1.0}
QUESTION = "what is the er on the"
# Ollama's llama3.2-vision template layer (a Go template: Hearth drops it for the file's own)
GO_TEMPLATE = (
    "{{- range $index, $_ := .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
    "{{ .Content }}{{- if .Images }}<|image|>{{ end }}<|eot_id|>{{ end }}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)


WIDE, TALL = random_png(224, 50, 1), random_png(40, 200, 2)  # 1x4 and 4x1 tiles of 56


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model as one converted file, and in Ollama's registry layout: the text file
    (with the converter's vocab + 8 embedding rows, cut to the vocabulary, cut below
    `<|image|>`) and the projector file."""
    root = tmp_path_factory.mktemp("mllama-layouts")
    model = tiny_mllama(SPEC)
    save_tiny(model, root / "hf", LLAMA32_VISION_TEMPLATE)
    one = root / "one.gguf"
    registry, converters = default_registry(), default_converters()
    convert_checkpoint(root / "hf", one, converters=converters, registry=registry, quantize="f32")
    tensors = vision_tensors(model.model.vision_model, model.model.multi_modal_projector)
    keys = vision_keys(model.config.vision_config)
    return {
        "one": one,
        "text": write_text_gguf(one, root / "text.gguf"),
        "text-vocab": write_text_gguf(one, root / "text-vocab.gguf", embedding_rows=SPEC.vocab),
        "text-short": write_text_gguf(one, root / "short.gguf", embedding_rows=SPEC.vocab - 1),
        "projector": write_vision_gguf(root / "proj.gguf", tensors, keys, layout="projector"),
    }


def _blob(source: Path, data: bytes) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (source / "blobs" / digest.replace(":", "-")).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def ollama_models(root: Path, models: dict[str, Path], projector: Path) -> Path:
    """An Ollama models folder with `library/llama3.2-vision:<tag>` for each text file in
    `models`, every one with the same projector, template and params layers."""
    source = root / "ollama-models"
    (source / "blobs").mkdir(parents=True)
    shared = [
        ("projector", projector.read_bytes()),
        ("template", GO_TEMPLATE.encode()),
        ("params", json.dumps({"temperature": 0.6, "top_p": 0.9}).encode()),
    ]
    for tag, text in models.items():
        layers = [
            {"mediaType": f"application/vnd.ollama.image.{kind}", **_blob(source, data)}
            for kind, data in [("model", text.read_bytes()), *shared]
        ]
        config = _blob(source, json.dumps({"model_format": "gguf"}).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
            "layers": layers,
        }
        path = source / "manifests/registry.ollama.ai/library/llama3.2-vision" / tag
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(manifest))
    return source


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    live = start_server(tmp_path_factory.mktemp("mllama-import-home"), None)
    yield live
    stop_server(live)


@pytest.fixture(scope="module")
def api(server: LiveServer) -> Any:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def imported(server: LiveServer, files: dict[str, Path], tmp_path_factory) -> str:
    """`hearth import-ollama --source FOLDER` into the running service's store."""
    source = ollama_models(
        tmp_path_factory.mktemp("ollama"),
        {"tiny": files["text"], "tiny-vocab": files["text-vocab"]},
        files["projector"],
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hearth", "import-ollama", "--source", str(source)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env=dict(os.environ, HEARTH_HOME=str(server.home)),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "imported  llama3.2-vision:tiny " in proc.stdout + " ", proc.stdout
    assert "imported  llama3.2-vision:tiny-vocab" in proc.stdout and "2 of 2" in proc.stdout
    return "llama3.2-vision:tiny"


@pytest.fixture(scope="module")
def one_file(api: httpx.Client, files: dict[str, Path]) -> str:
    reply = api.post(
        "/api/create", json={"model": "one", "from": str(files["one"]), "stream": False}
    )
    assert reply.status_code == 200, reply.text
    return "one"


def chat(api: httpx.Client, model: str, image: bytes | None) -> dict[str, Any]:
    message = {"role": "user", "content": QUESTION, **({"images": [b64(image)]} if image else {})}
    body = {"model": model, "messages": [message], "options": GREEDY, "stream": False}
    reply = api.post("/api/chat", json={**body, "logprobs": True})
    assert reply.status_code == 200, reply.text
    return reply.json()


def _logprobs(reply: dict[str, Any]) -> np.ndarray:
    return np.array([x["logprob"] for x in reply["logprobs"]])


def test_the_imported_model_shows_vision(api, imported):
    show = api.post("/api/show", json={"model": imported}).json()
    assert {"completion", "vision"} <= set(show["capabilities"])
    assert show["details"]["family"] == "mllama"
    assert show["projector_info"]["general.architecture"] == "mllama"
    assert show["projector_info"]["mllama.vision.image_size"] == SPEC.image_size
    assert "mllama.vision.image_size" not in show["model_info"]  # the text file has no encoder
    # The Go template was dropped for the file's own: Meta's, whose system block is dated.
    assert "Cutting Knowledge Date" in show["template"]


@pytest.mark.parametrize("tag", ["tiny", "tiny-vocab"])
def test_the_imported_model_answers_as_the_one_file_model(api, imported, one_file, tag):
    name = f"llama3.2-vision:{tag}"
    answers = {}
    for label, image in (("wide", WIDE), ("tall", TALL), ("none", None)):
        ours, theirs = chat(api, name, image), chat(api, one_file, image)
        assert ours["message"]["content"] == theirs["message"]["content"], label
        assert ours["eval_count"] == theirs["eval_count"] == 8
        np.testing.assert_allclose(_logprobs(ours), _logprobs(theirs), atol=1e-4)
        answers[label] = ours["message"]["content"]
    assert len(set(answers.values())) == 3, answers  # the answers depend on the picture


def test_create_takes_a_text_file_and_an_mllama_projector(api, files, one_file):
    """/api/create with `from` and `projector` (two FROM lines): the projector, whose
    architecture is `mllama` and not `clip`, is recognised as Ollama does (an encoder
    without a text model)."""
    body = {"model": "two", "from": str(files["text"]), "projector": str(files["projector"])}
    reply = api.post("/api/create", json={**body, "stream": False})
    assert reply.status_code == 200, reply.text
    assert "vision" in api.post("/api/show", json={"model": "two"}).json()["capabilities"]
    ours, theirs = chat(api, "two", WIDE), chat(api, one_file, WIDE)
    assert ours["message"]["content"] == theirs["message"]["content"]


def test_a_table_without_the_image_row_and_a_foreign_projector_are_refused(files, tmp_path):
    registry = default_registry()
    with pytest.raises(ModelLoadError, match=r"299 rows, none for <\|image\|> \(id 299\)"):
        load_model(files["text-short"], registry=registry, projector=files["projector"])
    clip = tmp_path / "mmproj.gguf"
    w = gguf.GGUFWriter(str(clip), "clip")
    w.add_uint32("clip.vision.block_count", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match="projector file is for 'clip', not Llama 3.2 Vision"):
        load_model(files["text"], registry=registry, projector=clip)
