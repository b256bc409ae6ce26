"""Model management over HTTP (fake runners): blobs, create, show, copy, delete, pull, and
the service's security (API key, Host header, CORS, body size)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from hearth.server.config import ServerConfig


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_create_from_an_uploaded_blob_as_the_ollama_client_does(fake_service, tiny_llama_path):
    c = fake_service.client
    data = tiny_llama_path.read_bytes()
    digest = _digest(data)
    fake_service.store.delete("tiny")  # the blob is gone from the store now
    assert c.head(f"/api/blobs/{digest}").status_code == 404
    assert c.post(f"/api/blobs/{digest}", content=data).status_code == 201
    assert c.head(f"/api/blobs/{digest}").status_code == 200
    wrong = c.post(f"/api/blobs/{_digest(b'x')}", content=data)
    assert wrong.status_code == 400 and "digest" in wrong.json()["error"]
    assert c.head("/api/blobs/sha256:nothex").status_code == 400
    body = {"model": "me/uploaded:v1", "files": {"tiny.gguf": digest}, "system": "Be brief.",
            "parameters": {"temperature": 0.2, "stop": ["END"]}}  # fmt: skip
    resp = c.post("/api/create", json=body)
    statuses = [json.loads(x)["status"] for x in resp.text.splitlines()]
    assert statuses[0] == "parsing GGUF" and statuses[-2:] == ["writing manifest", "success"]
    show = c.post("/api/show", json={"model": "me/uploaded:v1"}).json()
    assert show["system"] == "Be brief." and "temperature" in show["parameters"]
    assert 'PARAMETER stop "END"' in show["modelfile"]
    assert show["details"]["family"] == "llama" and show["capabilities"] == ["completion"]
    hearth = show["hearth"]
    assert hearth["estimated_memory"] == sum(hearth["memory"][k] for k in ("weights", "kv_cache",
                                                                          "graph"))  # fmt: skip
    assert show["model_info"]["general.architecture"] == "llama"
    assert show["model_info"]["tokenizer.ggml.tokens"] is None  # long arrays: verbose only
    verbose = c.post("/api/show", json={"model": "me/uploaded:v1", "verbose": True}).json()
    assert len(verbose["model_info"]["tokenizer.ggml.tokens"]) > 100
    # parameters from the model reach the runner; the request's options win
    c.post("/api/generate", json={"model": "me/uploaded:v1", "prompt": "x", "stream": False,
                                  "options": {"stop": ["X"]}})  # fmt: skip
    req = fake_service.launcher.started[0].requests[0]
    assert req.options.temperature == 0.2 and req.options.stop == ["X"]
    assert req.prompt.startswith("system: Be brief.")


def test_create_from_a_local_path_links_and_reports_progress(fake_service, tiny_llama_path):
    c = fake_service.client
    body = {"model": "linked", "from": str(tiny_llama_path), "link": True}
    items = [json.loads(x) for x in c.post("/api/create", json=body).text.splitlines()]
    assert any("total" in i and i.get("completed") == i["total"] for i in items)
    assert items[-1] == {"status": "success"}
    assert c.post("/api/show", json={"model": "linked"}).status_code == 200


def test_create_refuses_what_it_cannot_do(fake_service, tiny_llama_path, tmp_path):
    c = fake_service.client
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_llama_path.read_bytes()[:50_000])
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    cases = [
        ({"model": "x", "from": str(cut)}, "truncated"),
        ({"model": "x", "from": str(text)}, "not a .gguf"),
        ({"model": "x", "from": "relative/model.gguf"}, "absolute"),
        ({"model": "x", "from": "/no/such/file.gguf"}, "no model file"),
        ({"model": "x", "from": "tiny", "template": "{{ .Prompt }}"}, "Go template"),
        ({"model": "x", "from": "tiny", "parameters": {"temprature": 1}}, "unknown parameter"),
        ({"model": "x", "from": "tiny", "parameters": {"top_k": "many"}}, "top_k"),
        ({"model": "x", "from": "tiny", "quantize": "q4_K_M"}, "quantiz"),
        ({"model": "x", "files": {"a.gguf": "sha256:" + "0" * 64}}, "not in the store"),
        ({"model": "x"}, "from"),
        ({"model": "../x", "from": "tiny"}, "valid model name"),
    ]
    for body, words in cases:
        resp = c.post("/api/create", json=body)
        assert resp.status_code == 400 and words in resp.json()["error"], (body, resp.text)
    missing = c.post("/api/create", json={"model": "x", "from": "nope"})
    assert missing.status_code == 404


def test_copy_delete_pull_and_tags(fake_service, monkeypatch):
    monkeypatch.setenv("HEARTH_OFFLINE", "1")  # pull: a model here succeeds, others are refused
    c = fake_service.client
    assert (
        c.post("/api/copy", json={"source": "tiny", "destination": "tiny2:v2"}).status_code == 200
    )
    names = [m["name"] for m in c.get("/api/tags").json()["models"]]
    assert sorted(names) == ["tiny2:v2", "tiny:latest"]
    assert c.post("/api/copy", json={"source": "nope", "destination": "y"}).status_code == 404
    c.post("/api/generate", json={"model": "tiny"})  # load it
    assert c.request("DELETE", "/api/delete", json={"model": "tiny2:v2"}).status_code == 200
    assert len(c.get("/api/ps").json()["models"]) == 1  # the file is shared: still loaded
    assert c.request("DELETE", "/api/delete", json={"model": "tiny2:v2"}).status_code == 404
    assert c.post("/api/pull", json={"model": "tiny"}).json() == {"status": "success"}
    pull = c.post("/api/pull", json={"model": "llama3.2"})
    assert pull.status_code == 403 and "offline" in pull.json()["error"]
    assert c.request("DELETE", "/api/delete", json={"model": "tiny"}).status_code == 200
    assert c.get("/api/ps").json()["models"] == []  # its file went away: unloaded
    assert c.get("/api/version").json()["version"]


def test_api_key_is_required_when_set(make_fake_service):
    svc = make_fake_service(replace(ServerConfig(), api_key="s3cret"))
    c = svc.client
    assert c.get("/").text == "Hearth is running"  # the health probe stays open
    resp = c.get("/api/tags")
    assert resp.status_code == 401 and "API key" in resp.json()["error"]
    assert c.get("/v1/models").json()["error"]["type"] == "authentication_error"
    assert c.get("/api/tags", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/api/tags", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_host_header_must_name_this_machine(fake_service):
    c = fake_service.client
    assert c.get("/api/tags", headers={"Host": "localhost:11434"}).status_code == 200
    assert c.get("/api/tags", headers={"Host": "[::1]:11434"}).status_code == 200
    resp = c.get("/api/tags", headers={"Host": "evil.example.com"})
    assert resp.status_code == 403 and "localhost" in resp.json()["error"]


def test_cors_allows_local_pages_and_configured_origins(make_fake_service):
    svc = make_fake_service(replace(ServerConfig(), origins=("https://*.example.org",)))
    c = svc.client
    preflight = {"Access-Control-Request-Method": "POST"}
    for origin, allowed in [
        ("http://localhost:3000", True),
        ("app://hearth", True),
        ("https://chat.example.org", True),
        ("https://evil.com", False),
    ]:
        resp = c.options("/api/chat", headers={"Origin": origin, **preflight})
        assert (resp.headers.get("access-control-allow-origin") == origin) is allowed, origin


def test_a_web_page_not_allowed_is_refused_but_local_pages_and_tools_are_served(
    make_fake_service,
):
    svc = make_fake_service(replace(ServerConfig(), origins=("https://*.example.org",)))
    c = svc.client
    body = json.dumps({"model": "tiny"})
    form = {"Content-Type": "application/x-www-form-urlencoded"}  # what a page's form posts
    resp = c.post("/api/show", content=body, headers={"Origin": "https://evil.com", **form})
    assert resp.status_code == 403 and "HEARTH_ORIGINS" in resp.json()["error"]
    resp = c.get("/api/tags", headers={"Origin": "null"})  # a sandboxed page
    assert resp.status_code == 403
    for origin in ("http://localhost:3000", "https://chat.example.org"):
        resp = c.post("/api/show", content=body, headers={"Origin": origin})
        assert resp.status_code == 200, (origin, resp.text)
        assert resp.headers["access-control-allow-origin"] == origin
    assert c.get("/api/tags").status_code == 200  # tools send no Origin


def test_a_body_is_json_whatever_its_content_type_says(fake_service):
    # `curl -d '{...}'`, as in Ollama's documentation, sends a form content type.
    c = fake_service.client
    body = json.dumps({"model": "tiny"})
    for headers in (
        {"Content-Type": "application/x-www-form-urlencoded"},
        {"Content-Type": "text/plain"},
        {},
    ):
        resp = c.post("/api/show", content=body, headers=headers)
        assert resp.status_code == 200, (headers, resp.text)
        assert "capabilities" in resp.json()
    resp = c.post("/api/show", content=b"model=tiny", headers=form_header())
    assert resp.status_code in (400, 422) and resp.json()["error"]


def form_header() -> dict[str, str]:
    return {"Content-Type": "application/x-www-form-urlencoded"}


def test_body_size_is_limited(make_fake_service):
    svc = make_fake_service(replace(ServerConfig(), max_body_bytes=2048))
    big = {"model": "tiny", "prompt": "x" * 5000}
    resp = svc.client.post("/api/generate", json=big)
    assert resp.status_code == 413 and "limit" in resp.json()["error"]

    def chunks():
        yield json.dumps(big).encode()

    resp = svc.client.post("/api/generate", content=chunks())  # chunked, no length
    assert resp.status_code == 413
