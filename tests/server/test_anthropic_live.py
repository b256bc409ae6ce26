"""Anthropic's Messages API on a live `hearth serve` (real runner, the default model), driven
by the real `anthropic` client: greedy replies equal /api/chat's for the same messages,
streams assemble the same text, a forced tool call round trip, token counts and errors."""

from __future__ import annotations

import anthropic
import httpx
import pytest

pytestmark = pytest.mark.slow

MODEL = "gemma3:270m"
GREEDY = {"temperature": 0}
ASK = [{"role": "user", "content": "Name three colors."}]
TOOLS_TEMPLATE = (
    "<start_of_turn>user\n{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}<end_of_turn>\n"
    "<start_of_turn>model\n"
)
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
    },
}

OLLAMA_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": WEATHER["description"],
    "parameters": WEATHER["input_schema"]}}  # fmt: skip


@pytest.fixture(scope="module")
def ac(live_server):
    return anthropic.Anthropic(
        base_url=live_server.url, api_key="unused", timeout=120, max_retries=0
    )


def _ollama_chat(url: str, messages: list[dict], n: int, model: str = MODEL, **extra) -> dict:
    body = {"model": model, "messages": messages, "stream": False,
            "options": {"num_predict": n, **GREEDY}, **extra}  # fmt: skip
    return httpx.post(url + "/api/chat", json=body, timeout=120).json()


def test_text_and_stream_equal_ollama_chat(live_server, ac):
    msg = ac.messages.create(
        model=MODEL, max_tokens=12, messages=ASK, system="Answer briefly.", extra_body=GREEDY
    )
    native = _ollama_chat(
        live_server.url, [{"role": "system", "content": "Answer briefly."}, *ASK], 12
    )
    assert msg.content[0].type == "text" and msg.content[0].text
    assert msg.content[0].text == native["message"]["content"]
    assert msg.stop_reason == ("max_tokens" if native["done_reason"] == "length" else "end_turn")
    assert msg.usage.output_tokens == native["eval_count"]
    with ac.messages.stream(
        model=MODEL, max_tokens=12, messages=ASK, system="Answer briefly.", extra_body=GREEDY
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text == msg.content[0].text
    assert final.stop_reason == msg.stop_reason
    assert final.usage.output_tokens == msg.usage.output_tokens
    # the whole prompt is counted as the runner tokenizes it
    count = ac.messages.count_tokens(model=MODEL, messages=ASK, system="Answer briefly.")
    whole = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert count.input_tokens == whole > 5


def test_forced_tool_call_round_trip(live_server, ac):
    created = httpx.post(
        live_server.url + "/api/create",
        json={"model": "tool-gemma", "from": MODEL, "template": TOOLS_TEMPLATE, "stream": False},
        timeout=120,
    ).json()
    assert created["status"] == "success"
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    msg = ac.messages.create(
        model="tool-gemma", max_tokens=60, messages=ask, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY,
    )  # fmt: skip
    assert msg.stop_reason == "tool_use"
    call = msg.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input["city"] in ("Paris", "Rome") and call.id.startswith("toolu_")
    with ac.messages.stream(
        model="tool-gemma", max_tokens=60, messages=ask, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY,
    ) as stream:  # fmt: skip
        streamed = stream.get_final_message()
    assert [(b.type, b.name, b.input) for b in streamed.content if b.type == "tool_use"] == [
        ("tool_use", "get_weather", call.input)
    ]
    follow = [
        *ask,
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]},
    ]  # fmt: skip
    answer = ac.messages.create(
        model="tool-gemma", max_tokens=10, messages=follow, tools=[WEATHER], extra_body=GREEDY
    )
    native = _ollama_chat(live_server.url, [
        *ask,
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": call.input}}]},
        {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"},
    ], 10, "tool-gemma", tools=[OLLAMA_WEATHER])  # fmt: skip
    assert answer.content[0].type == "text"
    assert answer.content[0].text == native["message"]["content"]


def test_errors_as_the_client_raises_them(ac):
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        ac.post("/v1/messages", body={"model": MODEL, "messages": ASK}, cast_to=object)
    with pytest.raises(anthropic.NotFoundError):
        ac.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "not base64!"}}  # fmt: skip
    with pytest.raises(anthropic.BadRequestError, match="base64"):
        ac.messages.create(model=MODEL, max_tokens=5,
                           messages=[{"role": "user", "content": [image]}])  # fmt: skip
