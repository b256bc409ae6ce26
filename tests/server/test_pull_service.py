"""/api/pull in a real `hearth serve` against the local Hugging Face and registry fakes: the
real `ollama` client consumes the progress stream, the pulled tiny model answers, errors are
sentences, and a client that goes away registers nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from .fakes import REPO, LiveServer, start_server, stop_server
from .remote_fakes import Remote, pattern_blob, serve


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, gemma3_path: Path, tiny_llama_path: Path
) -> Iterator[tuple[Remote, str, LiveServer]]:
    remote = Remote()
    remote.add_hf_repo(
        "me/Tiny-GGUF",
        {"Tiny-Q4_K_M.gguf": tiny_llama_path.read_bytes(), "Tiny-Q8_0.gguf": b"other"},
    )
    with serve(remote) as base:
        home = tmp_path_factory.mktemp("pull-home")
        server = start_server(home, gemma3_path, {"HF_ENDPOINT": base, "HEARTH_OFFLINE": ""})
        try:
            yield remote, base, server
        finally:
            stop_server(server)


def test_the_ollama_client_pulls_with_progress_and_the_model_answers(world):
    remote, base, server = world
    client = ollama.Client(host=server.url, timeout=120)
    lines = list(client.pull("hf.co/me/Tiny-GGUF:Q4_K_M", stream=True))
    statuses = [x.status for x in lines]
    assert statuses[0] == "pulling manifest" and statuses[-2:] == ["writing manifest", "success"]
    pulling = [x for x in lines if x.digest]
    assert pulling and pulling[-1].completed == pulling[-1].total > 0
    assert pulling[-1].status == f"pulling {pulling[-1].digest[7:19]}"
    assert "verifying sha256 digest" in statuses
    names = [m.model for m in client.list().models]
    assert "hf.co/me/Tiny-GGUF:Q4_K_M" in names
    answer = client.generate(
        model="hf.co/me/Tiny-GGUF:Q4_K_M", prompt="Hello", options={"num_predict": 3}
    )
    assert answer.done and answer.eval_count == 3
    # stream=false: one final object; pulling it again fetches nothing.
    served = sum(remote.served.values())
    assert client.pull("hf.co/me/Tiny-GGUF:Q4_K_M", stream=False).status == "success"
    assert sum(remote.served.values()) == served


def test_errors_are_sentences_with_statuses(world):
    remote, base, server = world
    client = ollama.Client(host=server.url, timeout=60)
    with pytest.raises(ollama.ResponseError) as e:
        list(client.pull("hf.co/me/Nope-GGUF", stream=True))
    assert e.value.status_code == 404 and "not found" in e.value.error
    bad = httpx.post(f"{server.url}/api/pull", json={"model": "a/b/c/d"}, timeout=30)
    assert bad.status_code == 400 and "not a valid model name" in bad.json()["error"]


def test_a_client_that_goes_away_registers_nothing(world):
    remote, base, server = world
    blob = pattern_blob(24 << 20, seed=9)
    remote.add_hf_repo("me/Slow-GGUF", {"Slow-Q4_K_M.gguf": blob})
    remote.delay = 0.02
    try:
        with httpx.stream(
            "POST", f"{server.url}/api/pull", json={"model": "hf.co/me/Slow-GGUF"}, timeout=30
        ) as r:
            for line in r.iter_lines():
                if json.loads(line).get("completed", 0) > 0:
                    break  # closing the stream is the cancel
        time.sleep(1.0)
        seen = remote.served.get(blob.sha256, 0)
        time.sleep(1.0)
        assert remote.served.get(blob.sha256, 0) == seen < blob.size  # the download stopped
    finally:
        remote.delay = 0.0
    tags = httpx.get(f"{server.url}/api/tags", timeout=30).json()["models"]
    assert not any("Slow" in m["name"] for m in tags)


def test_the_cli_pulls(world):
    remote, base, server = world
    host = base.removeprefix("http://")
    remote.add_registry_model("library", "tiny", "v1", [("system", b"Be brief."),
                                                       ("model", remote.blobs[
                                                           remote.hf["me/Tiny-GGUF"][
                                                               "Tiny-Q4_K_M.gguf"]])])  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "hearth", "pull", "--insecure", f"{host}/library/tiny:v1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"HEARTH_HOST": server.url, "PATH": "/usr/bin:/bin", "HOME": str(server.home)},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "pulling manifest" in run.stderr and "success" in run.stderr
    shown = httpx.post(f"{server.url}/api/show", json={"model": f"{host}/library/tiny:v1"})
    assert shown.json()["system"] == "Be brief."
