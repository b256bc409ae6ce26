"""Anthropic's Messages API on fake runners, through the real `anthropic` client (its HTTP
client is the app's TestClient): replies, streams the client's helpers assemble, a tool round
trip, token counts, and errors as the client raises them."""

from __future__ import annotations

import base64
import io
import json

import anthropic
import pytest
from PIL import Image

from hearth.server.config import ServerConfig

TOOLS_TEMPLATE = (
    "{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: "
)
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HI = [{"role": "user", "content": "hi"}]


def client_of(service, key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url="http://127.0.0.1", api_key=key, http_client=service.client, max_retries=0
    )


@pytest.fixture
def ac(fake_service) -> anthropic.Anthropic:
    return client_of(fake_service)


def test_message_text_usage_and_stop_reasons(fake_service, ac):
    msg = ac.messages.create(model="tiny", max_tokens=100, messages=HI, system="Be brief.")
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.model == "tiny:latest"
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == fake_service.launcher.script
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.usage.output_tokens == len(fake_service.launcher.script.split())
    assert msg.usage.input_tokens > 0
    req = fake_service.launcher.started[0].requests[-1]
    assert "Be brief." in req.prompt and req.options.num_predict == 100
    assert req.options.temperature == 1.0  # Anthropic's default
    short = ac.messages.create(model="tiny", max_tokens=2, messages=HI)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_sampling_fields_and_options_from_the_body(fake_service, ac):
    ac.messages.create(
        model="tiny", max_tokens=5, messages=HI, stop_sequences=["END"],
        extra_body={"temperature": 0, "top_k": 3, "top_p": 0.5, "options": {"seed": 7},
                    "metadata": {"user_id": "u"}},
        extra_headers={"anthropic-beta": "some-beta-2025"},
    )  # fmt: skip
    opts = fake_service.launcher.started[0].requests[-1].options
    assert (opts.temperature, opts.top_k, opts.top_p, opts.seed) == (0, 3, 0.5, 7)
    assert list(opts.stop) == ["END"]


def test_the_stop_sequence_that_ended_the_reply(fake_service, ac):
    ask = {"model": "tiny", "max_tokens": 100, "messages": HI, "stop_sequences": ["nice", "runner"]}
    msg = ac.messages.create(**ask)
    assert msg.content[0].text == "Hello from the fake "
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "runner"
    with ac.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "runner")
    # the other APIs say as before that the reply stopped
    chat = {"model": "tiny", "messages": HI, "stream": False, "options": {"stop": ["runner"]}}
    assert fake_service.client.post("/api/chat", json=chat).json()["done_reason"] == "stop"
    oa = {"model": "tiny", "messages": HI, "stop": ["runner"]}
    choice = fake_service.client.post("/v1/chat/completions", json=oa).json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    # a stop string of the model's own parameters is no stop sequence of the request's
    made = {"model": "stops", "from": "tiny", "parameters": {"stop": ["runner"]}, "stream": False}
    assert fake_service.client.post("/api/create", json=made).json()["status"] == "success"
    own = ac.messages.create(model="stops", max_tokens=100, messages=HI)
    assert own.content[0].text == "Hello from the fake "
    assert own.stop_reason == "end_turn" and own.stop_sequence is None


def test_stream_helpers_assemble_the_same_text(fake_service, ac):
    plain = ac.messages.create(model="tiny", max_tokens=100, messages=HI)
    with ac.messages.stream(model="tiny", max_tokens=100, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == plain.content[0].text == final.content[0].text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.usage.input_tokens == plain.usage.input_tokens


def test_stream_event_names_and_order(fake_service):
    body = {"model": "tiny", "max_tokens": 3, "messages": HI, "stream": True}
    resp = fake_service.client.post("/v1/messages", json=body)
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in resp.text.strip().split("\n\n"):
        name, data = block.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    assert all(name == data["type"] for name, data in events)
    names = [n for n, _ in events]
    assert names[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert events[-2][1]["usage"]["output_tokens"] == 3


def _tool_model(fake_service) -> None:
    out = fake_service.client.post(
        "/api/create",
        json={"model": "tool-tiny", "from": "tiny", "template": TOOLS_TEMPLATE, "stream": False},
    )
    assert out.json()["status"] == "success"


def test_tool_input_streams_as_it_is_written(fake_service, ac):
    _tool_model(fake_service)
    args = {"city": "Paris on a long and winding road by the river", "days": [1, 2, 3]}
    fake_service.launcher.script = json.dumps({"name": "get_weather", "arguments": args})
    ask = {"model": "tool-tiny", "max_tokens": 100, "tools": [WEATHER],
           "messages": [{"role": "user", "content": "Weather?"}]}  # fmt: skip
    with ac.messages.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    deltas = [d.partial_json for d in deltas if d.type == "input_json_delta"]
    assert len(deltas) > 3  # the fake runner writes the call word by word
    assert json.loads("".join(deltas)) == args
    [call] = [b for b in final.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("get_weather", args) and final.stop_reason == "tool_use"
    assert call.input == ac.messages.create(**ask).content[-1].input


def test_tool_round_trip(fake_service, ac):
    _tool_model(fake_service)
    fake_service.launcher.script = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    msg = ac.messages.create(model="tool-tiny", max_tokens=50, messages=ask, tools=[WEATHER])
    assert msg.stop_reason == "tool_use"
    (call,) = [b for b in msg.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "Paris"}
    assert call.id.startswith("toolu_")
    assert "get_weather" in fake_service.launcher.started[0].requests[-1].prompt
    with ac.messages.stream(model="tool-tiny", max_tokens=50, messages=ask, tools=[WEATHER]) as s:
        streamed = s.get_final_message()
    assert streamed.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in streamed.content] == [
        ("tool_use", "get_weather", {"city": "Paris"})
    ]
    # the result goes back in as a tool message, and the model answers in text
    fake_service.launcher.script = "It is sunny."
    follow = [
        *ask,
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]  # fmt: skip
    answer = ac.messages.create(model="tool-tiny", max_tokens=50, messages=follow, tools=[WEATHER])
    assert answer.content[0].text == "It is sunny." and answer.stop_reason == "end_turn"
    assert "tool: sunny" in fake_service.launcher.started[0].requests[-1].prompt
    failed = [*follow[:2], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "is_error": True,
         "content": [{"type": "text", "text": "no network"}]}]}]  # fmt: skip
    ac.messages.create(model="tool-tiny", max_tokens=5, messages=failed, tools=[WEATHER])
    assert "tool: Error: no network" in fake_service.launcher.started[0].requests[-1].prompt


def test_tool_choice(fake_service, ac):
    _tool_model(fake_service)
    ac.messages.create(model="tool-tiny", max_tokens=50, messages=HI, tools=[WEATHER],
                       tool_choice={"type": "tool", "name": "get_weather"})  # fmt: skip
    req = fake_service.launcher.started[0].requests[-1]
    assert req.format["properties"]["name"] == {"const": "get_weather"}
    ac.messages.create(model="tool-tiny", max_tokens=50, messages=HI, tools=[WEATHER],
                       tool_choice={"type": "none"})  # fmt: skip
    req = fake_service.launcher.started[0].requests[-1]
    assert req.format is None and "get_weather" not in req.prompt
    with pytest.raises(anthropic.BadRequestError, match="not in tools"):
        ac.messages.create(model="tool-tiny", max_tokens=5, messages=HI, tools=[WEATHER],
                           tool_choice={"type": "tool", "name": "other"})  # fmt: skip


def test_count_tokens(fake_service, ac):
    count = ac.messages.count_tokens(model="tiny", messages=HI, system="Be brief.")
    prompt_words = fake_service.client.post(
        "/v1/messages",
        json={"model": "tiny", "max_tokens": 1, "messages": HI, "system": "Be brief."},
    )
    assert prompt_words.status_code == 200
    req = fake_service.launcher.started[0].requests[-1]
    assert count.input_tokens == len(req.prompt.split())  # the fake tokenizer: one per word


def _png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _image(data: str, media_type: str = "image/png", kind: str = "base64") -> dict:
    return {"type": "image", "source": {"type": kind, "media_type": media_type, "data": data}}


def test_errors_as_the_client_raises_them(fake_service, ac):
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.post("/v1/messages", body={"model": "tiny", "messages": HI}, cast_to=object)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as nf:
        ac.messages.create(model="nope", max_tokens=5, messages=HI)
    assert nf.value.body["error"]["type"] == "not_found_error"
    bad = [{"role": "user", "content": [_image("not base64!"), {"type": "text", "text": "?"}]}]
    with pytest.raises(anthropic.BadRequestError, match="base64"):
        ac.messages.create(model="tiny", max_tokens=5, messages=bad)
    for image, words in ((_image(_png(), kind="url"), "source type"),
                         (_image(_png(), "image/bmp"), "media_type")):  # fmt: skip
        with pytest.raises(anthropic.BadRequestError, match=words):
            msgs = [{"role": "user", "content": [image]}]
            ac.messages.create(model="tiny", max_tokens=5, messages=msgs)
    # a good image on a model without vision: refused with a sentence
    with pytest.raises(anthropic.BadRequestError, match="images"):
        msgs = [{"role": "user", "content": [_image(_png())]}]
        ac.messages.create(model="tiny", max_tokens=5, messages=msgs)
    doc = [{"role": "user", "content": [{"type": "document", "source": {}}]}]
    with pytest.raises(anthropic.BadRequestError, match="'document' is not supported"):
        ac.messages.create(model="tiny", max_tokens=5, messages=doc)
    orphan = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}]
    with pytest.raises(anthropic.BadRequestError, match="toolu_x"):
        ac.messages.create(model="tiny", max_tokens=5, messages=orphan)
    with pytest.raises(anthropic.BadRequestError, match="server tool"):
        search = {"type": "web_search_20250305", "name": "web_search"}
        ac.messages.create(model="tiny", max_tokens=5, messages=HI, tools=[search])
    with pytest.raises(anthropic.BadRequestError, match="does not support thinking"):
        ac.messages.create(model="tiny", max_tokens=50, messages=HI,
                           thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
    # other routes keep their own error shapes
    oa = fake_service.client.post("/v1/chat/completions", json={"model": "nope", "messages": HI})
    assert oa.status_code == 404 and "param" in oa.json()["error"]


def test_error_shape_and_statuses_per_route():
    from hearth.server.api.shared.errors import error_answer

    assert error_answer("/v1/messages", 503, "busy") == (
        529,
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
    )
    assert error_answer("/v1/messages/count_tokens", 413, "big")[1]["error"]["type"] == (
        "request_too_large"
    )
    assert error_answer("/v1/messages", 500, "bug")[1]["error"]["type"] == "api_error"
    assert error_answer("/v1/chat/completions", 503, "busy")[0] == 503
    assert error_answer("/api/chat", 503, "busy") == (503, {"error": "busy"})  # fmt: skip


def test_failure_mid_stream_is_an_error_event(fake_service, ac):
    fake_service.launcher.die_after = 2
    with (
        pytest.raises(anthropic.APIStatusError, match="stopped"),
        ac.messages.stream(model="tiny", max_tokens=50, messages=HI) as s,
    ):
        s.get_final_message()


def test_api_key_as_x_api_key_or_bearer(make_fake_service):
    service = make_fake_service(ServerConfig(api_key="secret"))
    with pytest.raises(anthropic.AuthenticationError) as e:
        client_of(service, "wrong").messages.create(model="tiny", max_tokens=5, messages=HI)
    assert e.value.body["error"]["type"] == "authentication_error"
    msg = client_of(service, "secret").messages.create(model="tiny", max_tokens=5, messages=HI)
    assert msg.content[0].text
    bearer = anthropic.Anthropic(base_url="http://127.0.0.1", auth_token="secret",
                                 http_client=service.client, max_retries=0)  # fmt: skip
    assert bearer.messages.count_tokens(model="tiny", messages=HI).input_tokens > 0
    # the other routes take the key this way too, and keep their error shape
    refused = service.client.get("/api/tags", headers={"x-api-key": "wrong"})
    assert refused.status_code == 401 and isinstance(refused.json()["error"], str)
    assert service.client.get("/api/tags", headers={"x-api-key": "secret"}).status_code == 200


THINK_TEMPLATE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "think={{ enable_thinking }}\nassistant: "
)


def test_thinking_switch_and_blocks(fake_service, ac):
    out = fake_service.client.post(
        "/api/create",
        json={"model": "think-tiny", "from": "tiny", "template": THINK_TEMPLATE, "stream": False},
    )
    assert out.json()["status"] == "success"
    fake_service.launcher.script = "<think>Let me see. </think>The answer."
    on = {"type": "enabled", "budget_tokens": 1024}
    msg = ac.messages.create(model="think-tiny", max_tokens=50, messages=HI, thinking=on)
    assert "think=True" in fake_service.launcher.started[0].requests[-1].prompt
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking.strip() == "Let me see."
    assert msg.content[1].text.strip() == "The answer."
    with ac.messages.stream(model="think-tiny", max_tokens=50, messages=HI, thinking=on) as s:
        final = s.get_final_message()
    assert [
        (b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content
    ] == [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in msg.content]
    # a history holding thinking blocks is accepted; "disabled" turns thinking off
    history = [*HI, {"role": "assistant", "content": [b.model_dump() for b in msg.content]}, *HI]
    ac.messages.create(model="think-tiny", max_tokens=5, messages=history,
                       thinking={"type": "disabled"})  # fmt: skip
    assert "think=False" in fake_service.launcher.started[0].requests[-1].prompt
