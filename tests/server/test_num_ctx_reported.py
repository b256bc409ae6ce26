"""The service says which context length it decided on, so that no client computes it again:
/api/show's `hearth.num_ctx` is what a request that sets none gets, and a reply's final record
carries `hearth.num_ctx`, what its prompt was fitted to. A Modelfile's `num_ctx` is honoured
when the request sends none; a request's own wins; nothing goes past the trained length (read
from the file with the gguf library, not through Hearth)."""

from __future__ import annotations

import gguf

from hearth.server.config import ServerConfig

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": False}


def _trained(path) -> int:
    field = gguf.GGUFReader(path).fields["llama.context_length"]
    return int(field.parts[field.data[0]][0])


def _final_num_ctx(service, body) -> int:
    out = service.client.post("/api/chat", json=body)
    assert out.status_code == 200, out.text
    return int(out.json()["hearth"]["num_ctx"])


def test_a_modelfile_num_ctx_is_used_and_reported_when_the_request_sets_none(fake_service):
    made = fake_service.client.post(
        "/api/create",
        json={"model": "ctx640", "from": "tiny", "parameters": {"num_ctx": 640}, "stream": False},
    )
    assert made.status_code == 200, made.text
    show = fake_service.client.post("/api/show", json={"model": "ctx640"}).json()
    assert show["hearth"]["num_ctx"] == 640
    assert _final_num_ctx(fake_service, {**CHAT, "model": "ctx640"}) == 640
    assert fake_service.launcher.started[-1].options.num_ctx == 640  # what the runner got


def test_the_request_wins_and_the_default_applies_otherwise(make_fake_service, tiny_llama_path):
    service = make_fake_service(ServerConfig(context_length=768))
    show = service.client.post("/api/show", json={"model": "tiny"}).json()
    assert show["hearth"]["num_ctx"] == 768
    assert _final_num_ctx(service, CHAT) == 768
    # a generate reports it too
    gen = {"model": "tiny", "prompt": "hi", "stream": False, "options": {"num_ctx": 1024}}
    out = service.client.post("/api/generate", json=gen).json()
    assert out["hearth"]["num_ctx"] == 1024  # asked for more: a runner with more is loaded


def test_reported_num_ctx_is_capped_at_the_trained_length(fake_service, tiny_llama_path):
    trained = _trained(tiny_llama_path)
    body = {**CHAT, "options": {"num_ctx": trained * 4}}
    assert _final_num_ctx(fake_service, body) == trained


def test_a_runner_already_loaded_with_more_reports_its_own(make_fake_service):
    service = make_fake_service(ServerConfig(context_length=1024))
    assert _final_num_ctx(service, CHAT) == 1024
    # asking for less is served by the loaded runner: the prompt is fitted to its 1024
    assert _final_num_ctx(service, {**CHAT, "options": {"num_ctx": 512}}) == 1024
    assert len(service.launcher.started) == 1
