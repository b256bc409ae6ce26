"""The service survives its runner's native abort (issue 33): a runner that aborts (SIGABRT, as
ggml's abort on a CUDA error does) while loading, while its prompt is evaluated or mid-stream,
or that first signals its whole process group, fails only its request, with a sentence, and
the service goes on serving another model. The faults are injected with
HEARTH_TEST_RUNNER_FAULT (runner/faults.py) into the tiny llama's runners only; the default
model serves beside them. The service runs in a session of its own, so that a signal to its
group (the `group` fault before runners had their own) cannot reach the tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from .fakes import start_server, stop_server

pytestmark = pytest.mark.slow

PROMPT = {"prompt": "Once upon a time", "raw": True}
OPTIONS = {"num_predict": 48, "temperature": 0, "num_ctx": 256}


def _generate(url: str, stream: bool) -> tuple[int, list[dict[str, object]]]:
    body = {"model": "tiny", **PROMPT, "options": OPTIONS, "stream": stream}
    with httpx.stream("POST", url + "/api/generate", json=body, timeout=120) as r:
        lines = [json.loads(x) for x in r.iter_lines() if x.strip()]
    return r.status_code, lines


@pytest.mark.parametrize("point", ["load", "prompt", "stream", "group"])
def test_the_service_survives_a_runner_that_aborts(
    tmp_path: Path, gemma3_path: Path, tiny_llama_path: Path, point: str
) -> None:
    digest = hashlib.sha256(tiny_llama_path.read_bytes()).hexdigest()
    env = {
        "HEARTH_CONTEXT_LENGTH": "512",
        "HEARTH_OFFLINE": "1",
        "HEARTH_STREAM_INTERVAL_MS": "0",  # one line per token: a stream reaches its 3rd line
        "HEARTH_TEST_RUNNER_FAULT": f"{point}:{digest}",
    }
    server = start_server(tmp_path / "home", gemma3_path, env, new_session=True)
    try:
        url = server.url
        created = httpx.post(
            url + "/api/create",
            json={"model": "tiny", "from": str(tiny_llama_path), "stream": False},
            timeout=120,
        )
        assert created.json().get("status") == "success", created.text
        for stream in (False, True):
            status, lines = _generate(url, stream)
            if point == "stream" and stream:  # the answer had begun: its last line says why
                assert status == 200 and not lines[0].get("error"), lines
                error = str(lines[-1].get("error"))
            else:
                assert status == 500 and len(lines) == 1, (status, lines)
                error = str(lines[0]["error"])
            where = "load" if point == "group" else point
            assert "SIGABRT" in error and f"aborting at {where}" in error, error
            assert server.proc.poll() is None, "the service stopped"
            # it goes on serving: another model's generation, and the model list
            other = httpx.post(
                url + "/api/generate",
                json={"model": "gemma3:270m", **PROMPT, "options": OPTIONS, "stream": False},
                timeout=120,
            )
            assert other.status_code == 200 and other.json()["done"], other.text
            names = [m["name"] for m in httpx.get(url + "/api/tags").json()["models"]]
            assert "tiny:latest" in names
        assert server.proc.poll() is None, "the service stopped"
        assert "Shutting down" not in server.log.read_text()
    finally:
        stop_server(server)
