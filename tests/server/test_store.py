"""The model store: names that cannot escape it, blobs, manifests, links, the default model,
and importing an Ollama installation."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from hearth.plugins.registry import default_registry
from hearth.server.store.importer import import_ollama
from hearth.server.store.model_store import BlobError, BlobWriter, ModelNotFound, ModelStore
from hearth.server.store.names import InvalidName, ModelName


@pytest.mark.parametrize(
    "text, display",
    [
        ("gemma3", "gemma3:latest"),
        ("gemma3:270m", "gemma3:270m"),
        ("library/gemma3:270m", "gemma3:270m"),
        ("me/My-Model.v2:Q4_K_M", "me/My-Model.v2:Q4_K_M"),
    ],
)
def test_valid_names(text, display):
    assert ModelName.parse(text).display == display


@pytest.mark.parametrize(
    "text",
    ["", "../x", "a/../b", "/etc/passwd", "a/b/c", "a\\b", "x:", ":tag", "a:..", ".hidden",
     "a b", "a/b:c/d", "x" * 300, "a:b:c", "..", "a/.."],
)  # fmt: skip
def test_names_that_could_escape_are_refused(text):
    with pytest.raises(InvalidName):
        ModelName.parse(text)


def test_create_resolve_copy_delete_and_prune(tmp_path, tiny_llama_path):
    store = ModelStore(tmp_path / "models")
    layer = store.add_file(tiny_llama_path)  # a copy
    assert not os.path.samefile(store.blob_path(layer.digest), tiny_llama_path)
    system = store.put_bytes(b"You are terse.", "system")
    store.write_manifest("tiny:v1", [layer, system])
    assert store.resolve("TINY:V1").name.display == "tiny:v1"  # case-insensitive
    store.copy("tiny:v1", "me/copy")
    assert {r.name.display for r in store.list()} == {"tiny:v1", "me/copy:latest"}
    store.delete("tiny:v1")
    assert store.has_blob(layer.digest)  # still used by the copy
    store.delete("me/copy")
    assert not store.has_blob(layer.digest) and not store.has_blob(system.digest)
    assert list(store.manifests.iterdir()) == []  # empty folders go too
    with pytest.raises(ModelNotFound, match="'tiny:v1' not found"):
        store.resolve("tiny:v1")


def test_link_instead_of_copy_and_digest_cache(tmp_path, tiny_llama_path):
    store = ModelStore(tmp_path / "models")
    layer = store.add_file(tiny_llama_path, link=True)
    assert os.path.samefile(store.blob_path(layer.digest), tiny_llama_path)
    assert layer.digest == "sha256:" + hashlib.sha256(tiny_llama_path.read_bytes()).hexdigest()
    assert store._cached_digest(tiny_llama_path.resolve()) == layer.digest


def test_blob_upload_checks_the_digest(tmp_path):
    store = ModelStore(tmp_path / "models")
    data = b"hello blob"
    good = "sha256:" + hashlib.sha256(data).hexdigest()
    writer = BlobWriter(store, good)
    writer.write(data)
    writer.commit()
    assert store.has_blob(good)
    bad = BlobWriter(store, "sha256:" + "0" * 64)
    bad.write(data)
    with pytest.raises(BlobError, match="digest"):
        bad.commit()
    assert [p.name for p in store.blobs.iterdir()] == [good.replace(":", "-")]
    with pytest.raises(BlobError):
        store.blob_path("sha256:../../etc/passwd")


def test_manifest_with_missing_blob_is_refused(tmp_path):
    store = ModelStore(tmp_path / "models")
    from hearth.server.store.model_store import Layer

    with pytest.raises(BlobError, match="missing"):
        store.write_manifest(
            "x", [Layer("application/vnd.ollama.image.model", "sha256:" + "a" * 64, 1)]
        )


def test_default_model_is_registered_once(tmp_path, tiny_llama_path):
    store = ModelStore(tmp_path / "models")
    sha = hashlib.sha256(tiny_llama_path.read_bytes()).hexdigest()
    assert store.register_default("gemma3:270m", lambda: tiny_llama_path, sha)
    assert store.resolve("gemma3:270m").layer("model").digest == "sha256:" + sha
    store.delete("gemma3:270m")
    assert not store.register_default("gemma3:270m", lambda: tiny_llama_path, sha)  # rm sticks


def _ollama_install(root: Path, gguf: Path) -> None:
    """An Ollama models folder: blobs by digest, manifests under registry/namespace/model/tag."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs / digest.replace(":", "-")).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    model = blob(gguf.read_bytes())
    go_template = blob(b"{{ if .System }}{{ .System }}{{ end }}{{ .Prompt }}")
    params = blob(json.dumps({"stop": ["</s>"], "temperature": 0.3}).encode())
    config = blob(b"{}")
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", **model},
        {"mediaType": "application/vnd.ollama.image.template", **go_template},
        {"mediaType": "application/vnd.ollama.image.params", **params},
    ]
    for path in ("registry.ollama.ai/library/tiny/latest", "hf.co/someone/tiny-gguf/Q8_0"):
        m = root / "manifests" / path
        m.parent.mkdir(parents=True)
        m.write_text(json.dumps({"schemaVersion": 2, "config": config, "layers": layers}))
    bad = root / "manifests" / "registry.ollama.ai/library/broken/latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("not json")


def test_import_ollama_links_models_and_drops_go_templates(tmp_path, tiny_llama_path):
    source = tmp_path / "ollama"
    _ollama_install(source, tiny_llama_path)
    store = ModelStore(tmp_path / "models")
    results = {r.name: r for r in import_ollama(store, default_registry(), source)}
    assert results["tiny:latest"].imported and "Go template" in results["tiny:latest"].note
    assert results["someone/tiny-gguf:Q8_0"].imported
    assert not results["broken:latest"].imported
    record = store.resolve("tiny")
    assert record.layer("template") is None and record.layer("params") is not None
    blob = store.blob_path(record.layer("model").digest)
    assert os.path.samefile(blob, next((source / "blobs").iterdir()).parent / blob.name)
    again = import_ollama(store, default_registry(), source)
    assert not any(r.imported for r in again)  # already there
