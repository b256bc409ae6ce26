"""hearth.client, the one client of the service (the CLI's, the desktop app's, the agent's
turns', hearth.documents'), against a live `hearth serve` with an API key and the default
model: JSON calls, NDJSON streams read as the official `ollama` client reads them, the
service's error sentence as its raw HTTP answer has it, cancellation from another thread, and
the context length the service decided (a Modelfile's `num_ctx` honoured when the client sends
none), as /api/show and the final record report it and the CLI takes it."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator

import httpx
import ollama
import pytest

from hearth.cli.attachments import context_length
from hearth.client import Cancel, HearthClient, ServiceError, reported_num_ctx
from hearth.documents.embedding import find_embedding_model
from hearth.launcher import hearth_answers

from .fakes import LiveServer, start_server, stop_server

pytestmark = pytest.mark.slow

MODEL = "gemma3:270m"
DEFAULT_CTX = 1024  # the service's default (HEARTH_CONTEXT_LENGTH below)
CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Count from one to five."}],
    "options": {"num_predict": 12, "temperature": 0, "seed": 1},
}


@pytest.fixture(scope="module")
def keyed(
    tmp_path_factory: pytest.TempPathFactory, gemma3_path
) -> Iterator[tuple[LiveServer, str]]:
    key = "hearth-" + secrets.token_urlsafe(12)
    env = {"HEARTH_CONTEXT_LENGTH": str(DEFAULT_CTX), "HEARTH_OFFLINE": "1", "HEARTH_API_KEY": key}
    server = start_server(tmp_path_factory.mktemp("client-home"), gemma3_path, env)
    yield server, key
    stop_server(server)


@pytest.fixture(scope="module")
def client(keyed) -> HearthClient:
    server, key = keyed
    return HearthClient(server.url, key, timeout=300)


def test_json_calls_and_the_key(keyed, client):
    server, key = keyed
    assert client.is_hearth()
    assert MODEL in [m["name"] for m in client.models()]
    assert "completion" in client.show(MODEL)["capabilities"]
    assert hearth_answers(server.url, key) and hearth_answers(server.url, "wrong")  # 401: Hearth
    with pytest.raises(ServiceError) as refused:
        HearthClient(server.url, "wrong").models()
    raw = httpx.get(server.url + "/api/tags", headers={"Authorization": "Bearer wrong"})
    assert refused.value.status == 401 == raw.status_code
    assert refused.value.message == raw.json()["error"]  # the service's own sentence


def test_the_error_sentence_is_the_services(keyed, client):
    server, key = keyed
    with pytest.raises(ServiceError) as missing:
        client.show("no-such-model")
    raw = httpx.post(server.url + "/api/show", json={"model": "no-such-model"},
                     headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    assert (missing.value.status, missing.value.kind) == (raw.status_code, "http") == (404, "http")
    assert missing.value.message == raw.json()["error"]
    with pytest.raises(ServiceError) as nobody:
        HearthClient("http://127.0.0.1:9", key).models()  # the discard port: nobody listens
    assert nobody.value.kind == "connection"


def test_a_stream_reads_as_the_ollama_client_reads_it(keyed, client):
    server, key = keyed
    items = list(client.stream("/api/chat", {**CHAT, "stream": True}))
    assert items[-1]["done"] and not any(i["done"] for i in items[:-1])
    ours = "".join(i["message"]["content"] for i in items)
    oc = ollama.Client(host=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=300)
    theirs = "".join(p.message.content for p in oc.chat(**CHAT, stream=True))
    assert ours == theirs and ours.strip()
    assert reported_num_ctx(items[-1]) == DEFAULT_CTX  # none asked: the service's default


def test_cancel_from_another_thread_ends_the_stream_at_once(client):
    cancel = Cancel()
    got: list[dict] = []
    caught: list[ServiceError] = []
    body = {**CHAT, "stream": True, "options": {"num_predict": 4000, "temperature": 1.0}}

    def read() -> None:
        try:
            for item in client.stream("/api/chat", body, cancel):
                got.append(item)
        except ServiceError as e:
            caught.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 300
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got, "no piece came"
    cancel.cancel()
    t0 = time.monotonic()
    reader.join(30)
    assert not reader.is_alive() and time.monotonic() - t0 < 10
    assert [e.kind for e in caught] == ["cancelled"]
    assert not any(i.get("done") for i in got)
    with pytest.raises(ServiceError) as later:  # a cancelled Cancel ends any later request
        list(client.stream("/api/chat", body, cancel))
    assert later.value.kind == "cancelled"


def test_a_modelfile_num_ctx_is_honoured_when_the_client_sends_none(client):
    made = list(client.create({"model": "ctx640", "from": MODEL, "parameters": {"num_ctx": 640}}))
    assert made[-1].get("status") == "success", made[-1]
    assert client.num_ctx("ctx640") == 640 and client.num_ctx(MODEL) == DEFAULT_CTX
    assert context_length(client, "ctx640", None) == 640  # what `hearth run` budgets with
    assert context_length(client, "ctx640", 512) == 512  # --num-ctx
    # the file's runner from the earlier tests (1024) would serve it, and the record would say
    # 1024: unload it, so this request's own decision is the one reported
    client.stop(MODEL)
    final = list(client.stream("/api/chat", {**CHAT, "model": "ctx640", "stream": True}))[-1]
    assert reported_num_ctx(final) == 640
    assert not find_embedding_model(client.base_url, client.api_key)  # no embedding model
