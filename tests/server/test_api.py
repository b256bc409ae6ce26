"""The HTTP APIs on fake runners: response shapes, errors as 4xx sentences, streaming
failures, load/unload, tools, images and structured output."""

from __future__ import annotations

import base64
import io
import json
import os
from dataclasses import replace

from PIL import Image

from hearth.server.config import ServerConfig

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


def lines(resp) -> list[dict]:
    return [json.loads(x) for x in resp.text.splitlines() if x.strip()]


def sse_events(resp) -> list:
    out = []
    for block in resp.text.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_generate_streams_ndjson_with_ollama_fields(fake_service):
    resp = fake_service.client.post("/api/generate", json={"model": "tiny", "prompt": "hi"})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-ndjson"
    items = lines(resp)
    assert "".join(i["response"] for i in items) == fake_service.launcher.script
    assert all(not i["done"] for i in items[:-1])
    final = items[-1]
    for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                "eval_count", "eval_duration", "context", "created_at"):  # fmt: skip
        assert key in final, key
    assert final["done_reason"] == "stop" and final["model"] == "tiny:latest"
    num_ctx = fake_service.launcher.started[0].options.num_ctx  # what the runner was given
    assert final["hearth"] == {"prompt_tokens": final["prompt_eval_count"], "prompt_cached": 0,
                               "truncated": False, "shifted": False,
                               "drafted": 0, "accepted": 0, "num_ctx": num_ctx}  # fmt: skip


def test_generate_renders_the_template_and_raw_skips_it(fake_service):
    c = fake_service.client
    c.post("/api/generate", json={"model": "tiny", "prompt": "hi", "system": "S", "stream": False})
    c.post("/api/generate", json={"model": "tiny", "prompt": "hi", "raw": True, "stream": False})
    first, second = fake_service.launcher.started[0].requests
    assert first.prompt == "system: S\nuser: hi\nassistant: "  # the fallback template
    assert second.prompt == "hi"


def test_chat_non_streamed_and_options_reach_the_runner(fake_service):
    body = {**CHAT, "stream": False, "options": {"num_predict": 3, "temperature": 0, "stop": "x"}}
    out = fake_service.client.post("/api/chat", json=body).json()
    assert out["message"] == {"role": "assistant", "content": "Hello from the "}
    assert out["done_reason"] == "length" and out["eval_count"] == 3
    req = fake_service.launcher.started[0].requests[0]
    assert req.options.temperature == 0 and req.options.stop == ["x"]


def test_num_thread_past_the_cpus_is_one_per_cpu(fake_service):
    """num_thread 1000 started 1000 busily waiting threads on 2 CPUs (the live fuzz run)."""
    cpus = os.cpu_count() or 1
    for asked, got in ((1000, cpus), (1, 1)):
        body = {"model": "tiny", "prompt": "hi", "stream": False, "options": {"num_thread": asked}}
        assert fake_service.client.post("/api/generate", json=body).status_code == 200
        assert fake_service.launcher.started[-1].options.threads == got


def test_logprobs_and_structured_output(fake_service):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    body = {**CHAT, "stream": False, "logprobs": True, "top_logprobs": 1, "format": schema}
    out = fake_service.client.post("/api/chat", json=body).json()
    assert json.loads(out["message"]["content"]) == {"answer": 42}
    assert out["logprobs"][0]["token"] and len(out["logprobs"][0]["top_logprobs"]) == 1
    assert fake_service.launcher.started[0].requests[0].format["type"] == "object"


def test_empty_prompt_loads_and_keep_alive_zero_unloads(fake_service):
    c = fake_service.client
    out = c.post("/api/generate", json={"model": "tiny"}).json()
    assert out["done_reason"] == "load" and out["response"] == ""
    ps = c.get("/api/ps").json()["models"]
    assert ps[0]["name"] == "tiny:latest" and ps[0]["context_length"] == 2048  # clamped
    assert {"size", "size_vram", "digest", "details", "expires_at"} <= set(ps[0])
    out = c.post("/api/chat", json={"model": "tiny", "messages": [], "keep_alive": 0}).json()
    assert out["done_reason"] == "unload" and out["message"]["content"] == ""
    assert c.get("/api/ps").json()["models"] == []


def test_malformed_requests_are_4xx_sentences(fake_service):
    c = fake_service.client
    cases = [
        (c.post("/api/generate", json={"model": "nope:1b", "prompt": "x"}), 404, "not found"),
        (c.post("/api/generate", json={"model": "../../etc", "prompt": "x"}), 400, "valid"),
        (c.post("/api/chat", json={**CHAT, "options": {"temperature": -1}}), 400, "temperature"),
        (c.post("/api/chat", json={**CHAT, "keep_alive": "soon"}), 400, "duration"),
        (c.post("/api/chat", content=b"{oops", headers={"content-type": "application/json"}),
         400, "JSON"),
        (c.post("/api/chat", json={**CHAT, "think": True}), 400, "thinking"),
        (c.post("/api/generate", json={"model": "tiny", "prompt": "x", "suffix": "y"}), 400,
         "insert"),
        (c.get("/api/chat"), 405, "not allowed"),
        (c.get("/api/nothing"), 404, "not an endpoint"),
        (c.post("/api/embed", json={"model": "tiny", "input": 5}), 400, "input"),
    ]  # fmt: skip
    for resp, status, words in cases:
        assert resp.status_code == status, resp.text
        assert words in resp.json()["error"], resp.json()


def test_openai_errors_use_openai_shape(fake_service):
    resp = fake_service.client.post("/v1/chat/completions", json={"model": "tiny", "messages": []})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and "messages" in err["message"]
    resp = fake_service.client.get("/v1/models/missing:1b")
    assert resp.status_code == 404 and resp.json()["error"]["type"] == "not_found_error"
    n2 = fake_service.client.post("/v1/chat/completions", json={**CHAT, "n": 2})
    assert n2.status_code == 400 and "n > 1" in n2.json()["error"]["message"]


def test_runner_refusing_before_the_first_token_is_a_400(fake_service):
    fake_service.launcher.refuse = "the prompt is 5000 tokens, more than num_ctx 2048"
    resp = fake_service.client.post("/api/chat", json=CHAT)
    assert resp.status_code == 400 and "5000 tokens" in resp.json()["error"]


def test_runner_dying_mid_stream_ends_with_an_error_line_and_the_next_request_reloads(
    fake_service,
):
    launcher = fake_service.launcher
    launcher.die_after = 2
    items = lines(fake_service.client.post("/api/chat", json=CHAT))
    assert items[0]["message"]["content"] and "runner process stopped" in items[-1]["error"]
    events = sse_events(fake_service.client.post("/v1/chat/completions",
                                                 json={**CHAT, "stream": True}))  # fmt: skip
    assert "stopped" in events[-2]["error"]["message"] and events[-1] == "[DONE]"
    launcher.die_after = None
    out = fake_service.client.post("/api/chat", json={**CHAT, "stream": False}).json()
    assert out["message"]["content"] == launcher.script
    assert len(launcher.started) == 3  # a fresh runner after each death


def test_runner_dying_during_a_whole_answer_is_a_500_naming_the_runner(fake_service, caplog):
    """Not streamed: the model's failure is the answer (500, as Ollama), in the API's shape,
    with the runner's last words; not an 'internal error' with a traceback in the log."""
    fake_service.launcher.die_after = 2
    resp = fake_service.client.post("/api/chat", json={**CHAT, "stream": False})
    assert resp.status_code == 500
    assert resp.json() == {"error": "the model's runner process stopped (status -9)"}
    resp = fake_service.client.post("/v1/chat/completions", json={**CHAT, "stream": False})
    assert resp.status_code == 500
    assert resp.json()["error"]["message"] == "the model's runner process stopped (status -9)"
    assert resp.json()["error"]["type"] == "api_error"
    assert "unexpected error" not in caplog.text


def test_queue_full_is_503(make_fake_service):
    svc = make_fake_service(replace(ServerConfig(), max_queue=0))
    resp = svc.client.post("/api/chat", json=CHAT)
    assert resp.status_code == 503 and "busy" in resp.json()["error"]


def _png(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("1", (width, height)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_images_are_checked_and_refused_without_vision(make_fake_service):
    svc = make_fake_service(replace(ServerConfig(), max_image_pixels=10_000))
    c = svc.client
    msg = {"role": "user", "content": "what is this?"}
    cases = [
        ([_png(8, 8)], 400, "does not support images"),
        (["not base64!"], 400, "base64"),
        ([base64.b64encode(b"plain text").decode()], 400, "not an image"),
        ([_png(200, 200)], 413, "pixel"),
    ]
    for images, status, words in cases:
        resp = c.post("/api/chat", json={"model": "tiny", "messages": [{**msg, "images": images}]})
        assert resp.status_code == status and words in resp.json()["error"], resp.text
    url = "data:image/png;base64," + _png(8, 8)
    parts = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": url}}]
    user = {"role": "user", "content": parts}
    resp = c.post("/v1/chat/completions", json={"model": "tiny", "messages": [user]})
    assert resp.status_code == 400 and "images" in resp.json()["error"]["message"]
    remote = [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
    user = {"role": "user", "content": remote}
    resp = c.post("/v1/chat/completions", json={"model": "tiny", "messages": [user]})
    assert resp.status_code == 400 and "not fetched" in resp.json()["error"]["message"]


TOOLS_TEMPLATE = (
    "{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: "
)
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip


def test_tools_need_a_template_that_supports_them(fake_service):
    c = fake_service.client
    resp = c.post("/api/chat", json={**CHAT, "tools": [WEATHER]})
    assert resp.status_code == 400 and "does not support tools" in resp.json()["error"]
    out = c.post("/api/create", json={"model": "tool-tiny", "from": "tiny",
                                      "template": TOOLS_TEMPLATE, "stream": False})  # fmt: skip
    assert out.json()["status"] == "success"
    assert "tools" in c.post("/api/show", json={"model": "tool-tiny"}).json()["capabilities"]
    fake_service.launcher.script = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    body = {**CHAT, "model": "tool-tiny", "tools": [WEATHER], "stream": False}
    message = c.post("/api/chat", json=body).json()["message"]
    assert message["content"] == ""
    assert message["tool_calls"][0]["function"] == {
        "index": 0, "name": "get_weather", "arguments": {"city": "Paris"},
    }  # fmt: skip
    assert "get_weather" in fake_service.launcher.started[0].requests[-1].prompt
    oa = c.post("/v1/chat/completions", json={**body, "stream": False}).json()["choices"][0]
    assert oa["finish_reason"] == "tool_calls"
    assert json.loads(oa["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    # the tool's answer goes back in and is rendered
    follow = {**body, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]}  # fmt: skip
    fake_service.launcher.script = "It is sunny."
    assert c.post("/api/chat", json=follow).json()["message"]["content"] == "It is sunny."
    assert "tool: sunny" in fake_service.launcher.started[0].requests[-1].prompt


def test_openai_chat_completions_and_embeddings(fake_service):
    c = fake_service.client
    out = c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2, "logprobs": True,
                                               "top_logprobs": 1}).json()  # fmt: skip
    choice = out["choices"][0]
    assert out["object"] == "chat.completion" and choice["finish_reason"] == "length"
    assert choice["message"] == {"role": "assistant", "content": "Hello from "}
    assert choice["logprobs"]["content"][0]["top_logprobs"][0]["token"] == "Hello "
    assert out["usage"]["completion_tokens"] == 2
    req = fake_service.launcher.started[0].requests[-1]
    assert req.options.temperature == 1.0 and req.options.num_predict == 2
    events = sse_events(c.post("/v1/chat/completions", json={
        **CHAT, "stream": True, "stream_options": {"include_usage": True}}))  # fmt: skip
    assert events[-1] == "[DONE]" and events[-2]["usage"]["total_tokens"] > 0
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    text = "".join(e["choices"][0]["delta"]["content"] for e in events[:-2] if e["choices"])
    assert text == fake_service.launcher.script
    emb = c.post("/v1/embeddings", json={"model": "tiny", "input": ["a", "bb"],
                                         "encoding_format": "base64"}).json()  # fmt: skip
    assert len(emb["data"]) == 2 and len(base64.b64decode(emb["data"][0]["embedding"])) == 16
    bad = c.post("/v1/embeddings", json={"model": "tiny", "input": [1, 2, 3]})
    assert bad.status_code == 400 and "token ids" in bad.json()["error"]["message"]


def test_openai_completions_are_raw_text(fake_service):
    c = fake_service.client
    out = c.post("/v1/completions", json={"model": "tiny", "prompt": "Once", "logprobs": 1}).json()
    assert out["object"] == "text_completion"
    assert out["choices"][0]["logprobs"]["tokens"][0] == "Hello "
    assert fake_service.launcher.started[0].requests[-1].prompt == "Once"
    bad = c.post("/v1/completions", json={"model": "tiny", "prompt": [[1, 2]]})
    assert bad.status_code == 400
    models = c.get("/v1/models").json()
    assert models["data"][0] == {**models["data"][0], "id": "tiny:latest", "owned_by": "library"}


def test_embed_normalizes_and_legacy_embeddings_do_not(fake_service):
    c = fake_service.client
    out = c.post("/api/embed", json={"model": "tiny", "input": "abcd", "dimensions": 2}).json()
    assert len(out["embeddings"][0]) == 2
    assert abs(sum(x * x for x in out["embeddings"][0]) - 1) < 1e-9
    legacy = c.post("/api/embeddings", json={"model": "tiny", "prompt": "abcd"}).json()
    assert legacy["embedding"] == [4.0, 1.0, 2.0, 3.0]


def test_generate_context_tokens_go_before_the_prompt(fake_service):
    body = {"model": "tiny", "prompt": "more", "context": [7, 8, 9], "stream": False}
    out = fake_service.client.post("/api/generate", json=body).json()
    req = fake_service.launcher.started[0].requests[-1]
    assert req.prompt is None and req.tokens[:3] == [7, 8, 9] and len(req.tokens) > 3
    assert out["context"]  # and the response carries the new context


def test_show_estimates_each_device_at_the_default_settings(fake_service, tiny_llama_path):
    """/api/show's per-device FIT, against gguf's tensor sizes and the KV formula."""
    from gguf import GGUFReader

    reader = GGUFReader(tiny_llama_path)

    def meta(key: str) -> int:
        field = reader.fields[f"llama.{key}"]
        return int(field.parts[field.data[0]][0])

    blocks, heads = meta("block_count"), meta("attention.head_count")
    kv_heads, embd = meta("attention.head_count_kv"), meta("embedding_length")
    extras = fake_service.client.post("/api/show", json={"model": "tiny"}).json()["hearth"]
    (cpu,) = extras["devices"]
    kv = extras["num_ctx"] * blocks * kv_heads * (embd // heads) * 2 * 2  # K and V, f16
    assert cpu["device"] == "CPU" and cpu["layers"] == blocks + 1
    assert cpu["weights"] == sum(int(t.n_bytes) for t in reader.tensors)
    assert cpu["cache"] == kv and cpu["graph"] == extras["memory"]["graph"] > 0


THINK_TEMPLATE = (
    "{% for m in messages %}{{ m.role }}: {% if m.thinking %}[{{ m.thinking }}]{% endif %}"
    "{{ m.content }}\n{% endfor %}think={{ enable_thinking }}\nassistant: "
)


def test_openai_chat_thinking_as_reasoning_content_and_reasoning(fake_service):
    c = fake_service.client
    made = {"model": "think-tiny", "from": "tiny", "template": THINK_TEMPLATE, "stream": False}
    assert c.post("/api/create", json=made).json()["status"] == "success"
    fake_service.launcher.script = "<think>Let me see. </think>The answer."
    body = {"model": "think-tiny", "reasoning_effort": "low",
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    message = c.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert message["reasoning_content"].strip() == "Let me see."
    assert message["reasoning"] == message["reasoning_content"]
    assert message["content"].strip() == "The answer."
    chunks = [e for e in sse_events(c.post("/v1/chat/completions", json={**body, "stream": True}))
              if e != "[DONE]" and e["choices"]]  # fmt: skip
    deltas = [ch["choices"][0]["delta"] for ch in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    assert all(d.get("reasoning") == d.get("reasoning_content") for d in deltas)
    assert "".join(d["content"] for d in deltas) == message["content"]
    # an assistant's thinking in the history, under either name, reaches the template
    for name in ("reasoning_content", "reasoning"):
        said = {"role": "assistant", "content": "Paris.", name: "It is in France."}
        history = [*body["messages"], said, {"role": "user", "content": "And Italy?"}]
        assert c.post("/v1/chat/completions", json={**body, "messages": history}).is_success
        prompt = fake_service.launcher.started[0].requests[-1].prompt
        assert "assistant: [It is in France.]Paris." in prompt, prompt
