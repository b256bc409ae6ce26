"""Request fields that Hearth cannot honour are refused with a 400 sentence, not ignored.

The decisions (honoured, refused, ignored) are tabled in ollama/schemas.py and openai/schemas.py;
these tests hold each refusal to its status and to a message that names the problem, and
check that what real clients send by default is still accepted.
"""

from __future__ import annotations

import json

import openai
import pytest

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": False}
OA = "/v1/chat/completions"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
TOOLS_TEMPLATE = (
    "{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% for c in m.tool_calls or [] %}[call {{ c.function.name }}]{% endfor %}\n{% endfor %}"
    "{% if enable_thinking %}(thinking {{ reasoning_effort | default('on') }})\n{% endif %}"
    "assistant: "
)


def error_of(resp) -> str:
    body = resp.json()["error"]
    return body["message"] if isinstance(body, dict) else body


def refused(resp, *words: str) -> None:
    assert resp.status_code == 400, resp.text
    message = error_of(resp)
    for word in words:
        assert word in message, message


@pytest.fixture
def tool_model(fake_service):
    """`tool-tiny`: the tiny model with a template that renders tools, calls and thinking."""
    body = {"model": "tool-tiny", "from": "tiny", "template": TOOLS_TEMPLATE, "stream": False}
    assert fake_service.client.post("/api/create", json=body).json()["status"] == "success"
    return fake_service


def last_request(fake_service):
    return fake_service.launcher.started[-1].requests[-1]


# -- /api/chat ------------------------------------------------------------------------------


def test_native_chat_refuses_an_unknown_role(fake_service):
    body = {**CHAT, "messages": [{"role": "robot", "content": "hi"}]}
    resp = fake_service.client.post("/api/chat", json=body)
    refused(resp, "messages.0.role", "'robot'", "system, user, assistant or tool")
    assert fake_service.launcher.started == []  # refused before any model was loaded


def test_native_chat_accepts_every_ollama_role(tool_model):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]  # fmt: skip
    body = {**CHAT, "model": "tool-tiny", "messages": messages, "tools": [WEATHER]}
    assert tool_model.client.post("/api/chat", json=body).status_code == 200
    assert "tool: sunny" in last_request(tool_model).prompt


def test_create_refuses_preset_messages_with_an_unknown_role(fake_service):
    body = {"model": "x", "from": "tiny", "messages": [{"role": "narrator", "content": "hi"}]}
    refused(fake_service.client.post("/api/create", json=body), "'narrator'", "role")


def test_typical_p_is_refused_unless_it_is_off(fake_service):
    c = fake_service.client
    resp = c.post("/api/chat", json={**CHAT, "options": {"typical_p": 0.7}})
    refused(resp, "typical_p", "not supported")
    resp = c.post(OA, json={**CHAT, "options": {"typical_p": 0.7}})
    refused(resp, "typical_p", "not supported")
    resp = c.post("/api/create", json={"model": "x", "from": "tiny",
                                       "parameters": {"typical_p": 0.5}})  # fmt: skip
    refused(resp, "typical_p")
    assert c.post("/api/chat", json={**CHAT, "options": {"typical_p": 1}}).status_code == 200


def test_a_thinking_level_reaches_the_template(tool_model):
    body = {**CHAT, "model": "tool-tiny", "think": "high"}
    assert tool_model.client.post("/api/chat", json=body).status_code == 200
    assert "(thinking high)" in last_request(tool_model).prompt
    body = {**CHAT, "model": "tool-tiny", "think": True}
    assert tool_model.client.post("/api/chat", json=body).status_code == 200
    assert "(thinking on)" in last_request(tool_model).prompt
    oa = {**CHAT, "model": "tool-tiny", "reasoning_effort": "low"}
    assert tool_model.client.post(OA, json=oa).status_code == 200
    assert "(thinking low)" in last_request(tool_model).prompt


# -- /v1/chat/completions: messages ---------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"role": "user"}, ["messages.0", "user message needs content"]),
        ({"role": "user", "content": None}, ["messages.0", "user message needs content"]),
        ({"role": "system"}, ["system message needs content"]),
        ({"role": "developer", "content": None}, ["developer message needs content"]),
        ({"role": "assistant"}, ["assistant message needs content or tool_calls"]),
        ({"role": "tool", "tool_call_id": "call_1"}, ["tool message needs content"]),
        ({"role": "tool", "content": "sunny"}, ["tool message needs tool_call_id"]),
        ({"role": "function", "content": "sunny"}, ["function message needs", "name"]),
        ({"role": "robot", "content": "hi"}, ["messages.0.role", "'robot'", "developer"]),
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {
            "data": "AAAA", "format": "wav"}}]}, ["audio input is not supported"]),
        ({"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]},
         ["file inputs are not supported"]),
    ],
)  # fmt: skip
def test_openai_messages_are_checked_per_role(fake_service, message, words):
    resp = fake_service.client.post(OA, json={**CHAT, "messages": [message]})
    refused(resp, *words)
    assert resp.json()["error"]["type"] == "invalid_request_error"


def test_the_issue_missing_user_content_is_a_400_not_a_200(fake_service):
    resp = fake_service.client.post(OA, json={"model": "tiny", "messages": [{"role": "user"}]})
    refused(resp, "user message needs content")
    assert fake_service.launcher.started == []


def test_an_assistant_message_with_tool_calls_and_no_content_is_accepted(tool_model):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    body = {**CHAT, "model": "tool-tiny", "messages": messages, "tools": [WEATHER]}
    resp = tool_model.client.post(OA, json=body)
    assert resp.status_code == 200, resp.text
    prompt = last_request(tool_model).prompt
    assert "[call get_weather]" in prompt and "tool: sunny" in prompt


def test_deprecated_function_messages_are_honoured_in_the_history(tool_model):
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"role": "function", "name": "get_weather", "content": "sunny"},
    ]  # fmt: skip
    resp = tool_model.client.post(OA, json={**CHAT, "model": "tool-tiny", "messages": messages})
    assert resp.status_code == 200, resp.text
    prompt = last_request(tool_model).prompt
    assert "[call get_weather]" in prompt and "tool: sunny" in prompt


# -- /v1/chat/completions and /v1/completions: request fields -------------------------------


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"logit_bias": {"50256": -100}}, ["logit_bias", "not supported"]),
        ({"audio": {"voice": "alloy", "format": "wav"}}, ["audio output is not supported"]),
        ({"modalities": ["text", "audio"]}, ["audio output is not supported"]),
        ({"functions": [WEATHER["function"]]}, ["functions", "give the functions as tools"]),
        ({"function_call": "auto"}, ["function_call", "tool_choice"]),
        ({"web_search_options": {}}, ["web_search_options", "does not search"]),
        ({"n": 3}, ["n > 1"]),
        ({"tool_choice": "any"}, ["tool_choice 'any'"]),
        ({"tool_choice": {"type": "custom", "custom": {"name": "x"}}},
         ["tool_choice must be"]),
        ({"tool_choice": "required"}, ["requires a tool call", "no tools"]),
    ],
)  # fmt: skip
def test_chat_fields_hearth_cannot_honour_are_refused(fake_service, extra, words):
    refused(fake_service.client.post(OA, json={**CHAT, **extra}), *words)


def test_completions_refuse_logit_bias(fake_service):
    body = {"model": "tiny", "prompt": "Once", "logit_bias": {"1": 5}}
    refused(fake_service.client.post("/v1/completions", json=body), "logit_bias")


def test_default_values_of_refusable_fields_are_accepted(fake_service):
    extra = {"logit_bias": {}, "modalities": ["text"], "audio": None, "functions": None,
             "function_call": None, "n": 1, "parallel_tool_calls": True, "tool_choice": "auto",
             "user": "u1", "metadata": {"k": "v"}, "store": False, "service_tier": "auto",
             "verbosity": "medium", "prediction": {"type": "content", "content": "x"}}  # fmt: skip
    resp = fake_service.client.post(OA, json={**CHAT, **extra})
    assert resp.status_code == 200, resp.text


def test_a_named_tool_choice_offers_that_tool_and_forces_a_call(tool_model):
    c = tool_model.client
    body = {**CHAT, "model": "tool-tiny", "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}  # fmt: skip
    assert c.post(OA, json=body).status_code == 200
    req = last_request(tool_model)
    assert "get_weather" in req.prompt and "get_time" not in req.prompt
    assert req.format["properties"]["name"] == {"const": "get_weather"}
    assert req.format["properties"]["arguments"] == WEATHER["function"]["parameters"]
    missing = {**body, "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    refused(c.post(OA, json=missing), "'nope'", "not in tools")
    both = {**body, "response_format": {"type": "json_object"}}
    refused(c.post(OA, json=both), "tool_choice", "response_format")


def test_required_tool_choice_forces_a_call_to_any_offered_tool(tool_model):
    body = {**CHAT, "model": "tool-tiny", "tools": [WEATHER, TIME], "tool_choice": "required"}
    assert tool_model.client.post(OA, json=body).status_code == 200
    alternatives = last_request(tool_model).format["anyOf"]
    names = [a["properties"]["name"]["const"] for a in alternatives]
    assert names == ["get_weather", "get_time"]
    assert all(a["required"] == ["name", "arguments"] for a in alternatives)


def test_allowed_tools_narrow_the_offer(tool_model):
    only = [{"type": "function", "function": {"name": "get_time"}}]
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": only}}
    body = {**CHAT, "model": "tool-tiny", "tools": [WEATHER, TIME], "tool_choice": allowed}
    assert tool_model.client.post(OA, json=body).status_code == 200
    req = last_request(tool_model)
    assert "get_time" in req.prompt and "get_weather" not in req.prompt and req.format is None


def test_parallel_tool_calls_false_keeps_one_call(tool_model):
    calls = [{"name": "get_weather", "arguments": {"city": c}} for c in ("Paris", "Rome")]
    tool_model.launcher.script = json.dumps(calls)
    body = {**CHAT, "model": "tool-tiny", "tools": [WEATHER]}
    c = tool_model.client
    both = c.post(OA, json=body).json()["choices"][0]["message"]["tool_calls"]
    assert len(both) == 2
    one = c.post(OA, json={**body, "parallel_tool_calls": False}).json()
    assert len(one["choices"][0]["message"]["tool_calls"]) == 1
    stream = c.post(OA, json={**body, "parallel_tool_calls": False, "stream": True})
    events = [json.loads(b[6:]) for b in stream.text.split("\n\n") if b.startswith("data: {")]
    streamed = [t for e in events for ch in e["choices"] for t in ch["delta"].get("tool_calls", [])]
    assert len(streamed) == 1


def test_the_openai_client_with_tools_still_works(tool_model):
    """The `openai` package's own request bodies (tools, a tool-call history) pass the checks."""
    oa = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="unused",
                       http_client=tool_model.client)  # fmt: skip
    tool_model.launcher.script = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    first = oa.chat.completions.create(
        model="tool-tiny", messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER]
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    tool_model.launcher.script = "It is sunny."
    second = oa.chat.completions.create(
        model="tool-tiny",
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "weather?"},
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ],
    )
    assert second.choices[0].message.content == "It is sunny."
    with pytest.raises(openai.BadRequestError) as err:
        oa.chat.completions.create(model="tool-tiny", messages=[{"role": "user"}])  # type: ignore
    assert "user message needs content" in str(err.value)
