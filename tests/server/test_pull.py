"""`hearth pull` against local fakes of Hugging Face and Ollama's registry (remote_fakes.py):
what is registered, resume after a dropped transfer, digests, 404s, a slow server, a full
disk, cancel, two pulls at once and the offline switch."""

from __future__ import annotations

import errno
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearth.server.store.model_store import ModelNotFound, ModelStore
from hearth.server.store.names import ModelName
from hearth.server.store.pull import DiskFull, Offline, PullCancelled, PullError, prepare
from hearth.server.store.pull import download as dl
from hearth.server.store.pull.registry import base_url

from .remote_fakes import Remote, bytes_blob, pattern_blob, serve

GO_TEMPLATE = "{{ if .System }}{{ .System }}{{ end }}{{ .Prompt }}"


@pytest.fixture
def remote(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Remote, str]]:
    monkeypatch.delenv("HEARTH_OFFLINE", raising=False)
    monkeypatch.setattr(dl, "BACKOFF", 0.01)
    r = Remote()
    with serve(r) as base:
        monkeypatch.setenv("HF_ENDPOINT", base)
        yield r, base


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "models")


def pull(
    store: ModelStore, name: str, insecure: bool = True, cancel: threading.Event | None = None
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    job = prepare(name, insecure)
    job.run(store, events.append, cancel or threading.Event())
    return events


def leftovers(store: ModelStore) -> list[str]:
    """Files in the blob folder that are not whole blobs (partials, temporaries)."""
    return sorted(p.name for p in store.blobs.iterdir() if p.name.count("-") != 1)


def sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_hf_pull_picks_the_quant_and_the_projector(remote, store, tiny_llama_path):
    r, base = remote
    model = tiny_llama_path.read_bytes()
    r.add_hf_repo(
        "me/Tiny-GGUF",
        {
            "README.md": b"# tiny",
            "Tiny-IQ4_K_M.gguf": b"not this one",
            "Tiny-Q4_K_M.gguf": model,
            "Tiny-Q8_0.gguf": model + b"\0" * 64,
            "mmproj-Tiny-f32.gguf": b"projector f32",
            "mmproj-Tiny-f16.gguf": b"projector f16",
        },
    )
    events = pull(store, "hf.co/me/Tiny-GGUF")  # no tag: Q4_K_M
    record = store.resolve("hf.co/me/Tiny-GGUF:latest")
    assert record.layer("model").digest == "sha256:" + hashlib.sha256(model).hexdigest()
    assert store.read_text(record.layer("projector")) == "projector f16"
    assert events[0] == {"status": "pulling manifest"}
    assert [e["status"] for e in events[-2:]] == ["writing manifest", "success"]
    digest = record.layer("model").digest
    mine = [e for e in events if e.get("digest") == digest]
    assert mine[-1] == {"status": f"pulling {digest[7:19]}", "digest": digest,
                        "total": len(model), "completed": len(model)}  # fmt: skip
    assert {"status": "verifying sha256 digest"} in events
    # The quant is matched case-insensitively; huggingface.co/ is the same site.
    pull(store, "huggingface.co/me/Tiny-GGUF:q8_0")
    q8 = store.resolve("huggingface.co/me/Tiny-GGUF:q8_0").layer("model")
    assert q8.size == len(model) + 64
    # The files came through the resolve URL's redirect, pinned to the listing's commit.
    assert f"GET /me/Tiny-GGUF/resolve/{r.commit}/Tiny-Q4_K_M.gguf" in r.requests
    assert leftovers(store) == []


def test_the_fake_speaks_huggingface_hub(remote, tmp_path):
    """huggingface_hub's own download (HEAD for metadata, 302, X-Linked-Etag) works against
    the fake, so the fake is faithful to what Hearth will meet."""
    from huggingface_hub import HfApi, hf_hub_download

    r, base = remote
    r.add_hf_repo("me/Fake-GGUF", {"x-Q4_K_M.gguf": b"gguf bytes"})
    path = hf_hub_download(
        "me/Fake-GGUF", "x-Q4_K_M.gguf", endpoint=base, cache_dir=tmp_path / "hub"
    )
    assert Path(path).read_bytes() == b"gguf bytes"
    info = HfApi(endpoint=base).model_info("me/Fake-GGUF", files_metadata=True)
    assert info.siblings[0].lfs.sha256 == hashlib.sha256(b"gguf bytes").hexdigest()


def test_registry_pull_keeps_ollamas_layers(remote, store, tiny_llama_path):
    r, base = remote
    host = base.removeprefix("http://")
    model = tiny_llama_path.read_bytes()
    r.add_registry_model(
        "library",
        "tiny",
        "1b",
        [
            ("model", model),
            ("template", GO_TEMPLATE.encode()),
            ("system", b"You are terse."),
            ("params", b'{"temperature": 0.25, "stop": ["<end>"]}'),
            ("license", b"MIT"),
        ],
    )
    events = pull(store, f"{host}/library/tiny:1b")
    record = store.resolve(f"{host}/library/tiny:1b")
    assert [x.kind for x in record.layers] == ["model", "system", "params", "license"]
    assert store.read_text(record.layer("system")) == "You are terse."
    assert sha(store.blob_path(record.layer("model").digest)) == record.layer("model").digest
    assert any("Go template" in e["status"] for e in events)  # dropped, as import-ollama does
    assert "GET /v2/library/tiny/manifests/1b" in r.requests
    assert any(x.startswith("GET /v2/library/tiny/blobs/sha256:") for x in r.requests)


def test_registry_names_and_urls_follow_ollama():
    name = ModelName.parse("llama3.2")
    assert base_url(name, False) == "https://registry.ollama.ai/v2/library/llama3.2"
    assert ModelName.parse("registry.ollama.ai/library/llama3.2:latest") == name
    other = ModelName.parse("example.com:5000/team/m:v1")
    assert base_url(other, True) == "http://example.com:5000/v2/team/m"


def test_plain_http_needs_insecure(remote, store):
    r, base = remote
    r.add_registry_model("library", "tiny", "latest", [("model", b"x")])
    with pytest.raises(PullError, match="--insecure"):
        pull(store, base.removeprefix("http://") + "/library/tiny", insecure=False)


def test_missing_models_are_sentences(remote, store, tiny_llama_path):
    r, base = remote
    host = base.removeprefix("http://")
    with pytest.raises(PullError, match="'me/Nope-GGUF' was not found") as e:
        pull(store, "hf.co/me/Nope-GGUF")
    assert e.value.status == 404
    with pytest.raises(PullError, match="was not found in the registry") as e:
        pull(store, f"{host}/library/nope:1b")
    assert e.value.status == 404
    r.add_hf_repo("me/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": tiny_llama_path.read_bytes()})
    with pytest.raises(PullError, match="no GGUF file for 'Q2_K'.*Tiny-Q4_K_M.gguf"):
        pull(store, "hf.co/me/Tiny-GGUF:Q2_K")
    assert store.list() == []


def test_a_tampered_blob_is_rejected_and_nothing_is_registered(remote, store, tiny_llama_path):
    r, base = remote
    r.add_hf_repo("me/Bad-GGUF", {"Bad-Q4_K_M.gguf": tiny_llama_path.read_bytes()})
    digest = r.hf["me/Bad-GGUF"]["Bad-Q4_K_M.gguf"]
    r.blobs[digest].tampered = True
    with pytest.raises(PullError, match="tampered"):
        pull(store, "hf.co/me/Bad-GGUF")
    assert store.list() == [] and not store.has_blob("sha256:" + digest)
    assert leftovers(store) == []


def test_a_200mb_transfer_killed_at_60_percent_resumes(remote, store, monkeypatch):
    r, base = remote
    monkeypatch.setattr(dl, "RETRIES", 2)
    big = pattern_blob(200 << 20, seed=7)
    r.add_registry_model("library", "big", "latest", [("model", big)])
    name = base.removeprefix("http://") + "/library/big"
    r.break_at[big.sha256] = int(0.6 * big.size)
    with pytest.raises(PullError, match="pull again to resume"):
        pull(store, name)
    first = r.served[big.sha256]
    assert 0.55 * big.size <= first <= 0.65 * big.size
    assert store.list() == [] and any(n.endswith("-partial") for n in leftovers(store))
    r.heal()
    pull(store, name)
    # Only what was missing came again (each part restarts at its last saved byte).
    assert r.served[big.sha256] <= big.size - first + 0.05 * big.size
    blob = store.blob_path(store.resolve(name).layer("model").digest)
    h = hashlib.sha256()
    with open(blob, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    assert h.hexdigest() == big.sha256 and leftovers(store) == []


def test_a_slow_server_completes_and_a_stalled_one_is_a_sentence(remote, store, monkeypatch):
    r, base = remote
    blob = bytes_blob(bytes(range(256)) * 8192)  # 2 MiB in 8 chunks
    r.add_registry_model("library", "slow", "latest", [("model", blob)])
    name = base.removeprefix("http://") + "/library/slow"
    r.delay = 0.1
    pull(store, name)
    assert store.resolve(name).layer("model").digest == "sha256:" + blob.sha256
    store.delete(name)
    import httpx

    monkeypatch.setattr(dl, "RETRIES", 2)
    monkeypatch.setattr("hearth.server.store.pull.network.TIMEOUT", httpx.Timeout(5.0, read=0.3))
    r.delay = 1.0
    with pytest.raises(PullError, match="failed after 2 tries.*pull again to resume"):
        pull(store, name)
    assert store.list() == []


def test_a_full_disk_is_a_sentence_and_leaves_no_corrupt_store(remote, store, monkeypatch):
    r, base = remote
    blob = pattern_blob(40 << 20, seed=3)
    r.add_registry_model("library", "full", "latest", [("model", blob)])
    real_write = dl.os.write
    written = [0]

    def write(fd: int, data: Any) -> int:
        if written[0] > 20 << 20:
            raise OSError(errno.ENOSPC, "No space left on device")
        written[0] += len(data)
        return real_write(fd, data)

    monkeypatch.setattr(dl.os, "write", write)
    with pytest.raises(DiskFull, match="is full"):
        pull(store, base.removeprefix("http://") + "/library/full")
    assert store.list() == [] and leftovers(store) == []  # the partial file is gone too


def test_cancel_registers_nothing(remote, store):
    r, base = remote
    blob = pattern_blob(8 << 20, seed=4)
    r.add_registry_model("library", "c", "latest", [("model", blob)])
    r.delay = 0.05
    cancel = threading.Event()
    job = prepare(base.removeprefix("http://") + "/library/c", True)

    def emit(event: dict[str, Any]) -> None:
        if event.get("completed", 0) > 0:
            cancel.set()

    with pytest.raises(PullCancelled):
        job.run(store, emit, cancel)
    assert store.list() == [] and not store.has_blob("sha256:" + blob.sha256)


def test_two_pulls_of_one_model_at_once(remote, store):
    r, base = remote
    blob = pattern_blob(48 << 20, seed=5)
    r.add_registry_model("library", "twice", "latest", [("model", blob), ("system", b"hi")])
    name = base.removeprefix("http://") + "/library/twice"
    r.delay = 0.01
    errors: list[BaseException] = []

    def one() -> None:
        try:
            pull(store, name)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [x.name.display for x in store.list()] == [f"{name}:latest"]
    assert r.served[blob.sha256] == blob.size  # the second pull waited and found it there
    assert sha(store.blob_path("sha256:" + blob.sha256)) == "sha256:" + blob.sha256
    assert leftovers(store) == []


def test_offline_forbids_the_network(remote, store, monkeypatch):
    r, base = remote
    monkeypatch.setenv("HEARTH_OFFLINE", "1")
    with pytest.raises(Offline, match="HEARTH_OFFLINE"):
        prepare("hf.co/me/Tiny-GGUF", False)
    with pytest.raises(ModelNotFound):
        store.resolve("hf.co/me/Tiny-GGUF")
    assert r.requests == []
