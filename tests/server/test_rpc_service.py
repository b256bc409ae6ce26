"""More than one machine, on loopback: a live `hearth serve` with HEARTH_RPC_SERVERS naming two
`hearth worker` processes places a model's layers on them (the layout search sees their memory
through ggml's RPC backend), generates what the same service generates with `num_gpu: 0` (all on
the CPU), reports where the model runs in /api/ps, and survives a worker killed mid-generation:
that request ends with a sentence, the service stays up, and the next request runs on the CPU.
(These tests share one service and run in file order; the last kills the workers.)"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from rpc_workers import start_workers

from hearth.engine.ml import rpc

from .fakes import start_server, stop_server
from tiny_models import tiny_llama, write_tiny_llama

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not rpc.available(), reason="ggml built without GGML_RPC"),
]

MODEL = "tiny-rpc"
PROMPT = {"model": MODEL, "prompt": "hello", "raw": True, "stream": False, "logprobs": True}
GREEDY = {"temperature": 0, "num_predict": 12, "seed": 1}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    home = tmp_path_factory.mktemp("rpc-home")
    model = write_tiny_llama(home / "tiny.gguf", tiny_llama(layers=4))
    with start_workers(2) as endpoints:
        env = {
            "HEARTH_RPC_SERVERS": ",".join(endpoints),
            "HEARTH_OFFLINE": "1",
            # a chunk per token: the killed-worker test stops the workers five tokens in
            "HEARTH_STREAM_INTERVAL_MS": "0",
        }
        server = start_server(home, None, env)
        try:
            r = httpx.post(
                server.url + "/api/create",
                json={"model": MODEL, "from": str(model), "stream": False},
                timeout=60,
            )
            assert r.status_code == 200, r.text
            yield server, endpoints
        finally:
            stop_server(server)


def _generate(url: str, **options) -> dict:
    body = {**PROMPT, "options": {**GREEDY, **options}, "keep_alive": 0}
    r = httpx.post(url + "/api/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_devices_lists_the_workers(cluster) -> None:
    server, endpoints = cluster
    devices = httpx.get(server.url + "/api/hearth/devices", timeout=60).json()["devices"]
    rpc_devices = [d for d in devices if d["library"] == "RPC"]
    assert [d["description"] for d in rpc_devices] == endpoints
    assert all(d["free"] > 0 for d in rpc_devices)
    # /api/show's estimate per device is the layout a load would choose now: on a worker
    show = httpx.post(server.url + "/api/show", json={"model": MODEL}, timeout=60).json()
    planned = {d["device"]: d for d in show["hearth"]["devices"]}
    assert planned["RPC0"]["layers"] == 5 and planned["RPC0"]["weights"] > 0, planned
    assert planned["CPU"]["layers"] == 0


def test_layers_on_workers_generate_the_cpu_text(cluster) -> None:
    server, _ = cluster
    cpu = _generate(server.url, num_gpu=0)
    body = {**PROMPT, "options": GREEDY, "keep_alive": "5m"}
    placed = httpx.post(server.url + "/api/generate", json=body, timeout=120).json()
    ps = httpx.get(server.url + "/api/ps").json()["models"][0]
    print(f"\n/api/ps: {ps['hearth']['layout']}, size_vram {ps['size_vram']}")
    assert ps["hearth"]["layout"].startswith("5/5 layers on RPC"), ps["hearth"]
    # measured by the runner: the workers' bytes are part of the model's size
    assert 0 < ps["size_vram"] < ps["size"]
    devices = {d["device"]: d for d in ps["hearth"]["devices"]}
    total = sum(d["weights"] + d["cache"] + d["graph"] for d in devices.values())
    assert total == ps["hearth"]["memory"]["total"] == ps["size"]
    assert {d["device"] for d in ps["hearth"]["devices"]} & {"RPC0", "RPC1"}
    httpx.post(server.url + "/api/generate", json={"model": MODEL, "keep_alive": 0})
    assert placed["response"] == cpu["response"] and placed["eval_count"] == cpu["eval_count"]
    a = np.array([t["logprob"] for t in placed["logprobs"]])
    b = np.array([t["logprob"] for t in cpu["logprobs"]])
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_killed_worker_fails_the_request_with_a_sentence(cluster, tmp_path) -> None:
    server, endpoints = cluster
    body = {
        "model": MODEL,
        "prompt": "hello",
        "raw": True,
        "options": {"temperature": 0, "num_predict": 100000, "num_ctx": 4096},
        "keep_alive": "5m",
    }
    lines: list[dict] = []
    with httpx.stream("POST", server.url + "/api/generate", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if not line:
                continue
            lines.append(json.loads(line))
            if len(lines) == 5:
                for proc in endpoints.procs:  # whichever holds layers, they all go
                    proc.kill()
    last = lines[-1]
    print(f"\nafter {len(lines) - 1} chunks: {last}")
    assert "error" in last, last
    assert "runner process stopped" in last["error"], last
    assert "RPC" in last["error"], last  # ggml's own words: the remote server is gone
    # the service is up and runs the model again (the workers are gone: on the CPU)
    assert httpx.get(server.url + "/", timeout=10).status_code == 200
    again = httpx.post(
        server.url + "/api/generate",
        json={**PROMPT, "options": GREEDY, "keep_alive": 0},
        timeout=120,
    )
    assert again.status_code == 200, again.text
    assert again.json()["eval_count"] > 0
