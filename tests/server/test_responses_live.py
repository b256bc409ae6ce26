"""/v1/responses on a live `hearth serve` (the default model, a real runner), driven by the
real `openai` client. Greedy sampling (temperature 0) makes each answer checkable against
/v1/chat/completions with the same messages: the two routes build the same prompt."""

from __future__ import annotations

import json

import ollama
import openai
import pytest

from .live_models import MODEL, create_tools_model

pytestmark = pytest.mark.slow

EXTRA = {"options": {"num_ctx": 1024}}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string",
                          "maxLength": 20}}, "required": ["city"]}}  # fmt: skip


@pytest.fixture(scope="module")
def oa(live_server):
    return openai.OpenAI(base_url=live_server.url + "/v1", api_key="unused", timeout=120)


def _chat(oa, messages, **kw):
    kw.setdefault("extra_body", EXTRA)
    out = oa.chat.completions.create(model=kw.pop("model", MODEL), messages=messages,
                                     temperature=0, **kw)  # fmt: skip
    return out


ASK = "Say hi."
# The default model rambles on past its turn: a stop string ends the reply, so that it
# completes (rather than being cut at max_output_tokens)
ONE_LINE = {"options": {"num_ctx": 1024, "stop": ["\n"]}}


def test_text_streamed_and_continued_as_chat_completions_answer(oa):
    r = oa.responses.create(model=MODEL, input=ASK, instructions="Answer briefly.",
                            max_output_tokens=24, temperature=0, extra_body=ONE_LINE)  # fmt: skip
    assert r.object == "response" and r.status == "completed" and r.output_text
    msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": ASK}]
    chat = _chat(oa, msgs, max_tokens=24, extra_body=ONE_LINE)
    assert r.output_text == chat.choices[0].message.content
    assert chat.choices[0].finish_reason == "stop"
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.input_tokens == chat.usage.prompt_tokens

    # the stream helper assembles the same response (it needs response.completed: a reply
    # cut at max_output_tokens ends with response.incomplete, which it does not assemble)
    with oa.responses.stream(
        model=MODEL,
        input=ASK,
        instructions="Answer briefly.",
        max_output_tokens=24,
        temperature=0,
        extra_body=ONE_LINE,
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == r.output_text == "".join(deltas)
    assert [o.type for o in final.output] == [o.type for o in r.output]

    # instructions are not carried over; the earlier input and output are
    follow = oa.responses.create(model=MODEL, input="Now say goodbye", previous_response_id=r.id,
                                 max_output_tokens=8, temperature=0, extra_body=EXTRA)  # fmt: skip
    history = [{"role": "user", "content": ASK},
               {"role": "assistant", "content": r.output_text},
               {"role": "user", "content": "Now say goodbye"}]  # fmt: skip
    assert follow.output_text == _chat(oa, history, max_tokens=8).choices[0].message.content
    assert oa.responses.retrieve(follow.id).output_text == follow.output_text


def test_text_format_json_schema(oa):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
              "sunny": {"type": "boolean"}}, "required": ["city", "sunny"],
              "additionalProperties": False}  # fmt: skip
    r = oa.responses.create(
        model=MODEL, input="The weather in Paris as JSON.", max_output_tokens=60, temperature=0,
        text={"format": {"type": "json_schema", "name": "weather", "schema": schema,
                         "strict": True}}, extra_body=EXTRA,
    )  # fmt: skip
    data = json.loads(r.output_text)
    assert set(data) == {"city", "sunny"}
    assert isinstance(data["city"], str) and len(data["city"]) <= 12
    assert isinstance(data["sunny"], bool)


def test_function_call_round_trip(live_server, oa):
    create_tools_model(live_server.url, "gemma-tools")
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = oa.responses.create(model="gemma-tools", input=ask, tools=[WEATHER],
                                tool_choice="required", temperature=0, max_output_tokens=40,
                                extra_body=EXTRA)  # fmt: skip
    [call] = [o for o in first.output if o.type == "function_call"]
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)

    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    final = oa.responses.create(model="gemma-tools", previous_response_id=first.id,
                                input=[answer], tools=[WEATHER], temperature=0,
                                max_output_tokens=12, extra_body=EXTRA)  # fmt: skip
    assert final.output_text
    chat_tool = {"type": "function", "function": {k: WEATHER[k] for k in
                 ("name", "description", "parameters")}}  # fmt: skip
    tool_call = {"id": call.call_id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}  # fmt: skip
    history = [
        *ask,
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 21 C"},
    ]
    chat = _chat(oa, history, model="gemma-tools", tools=[chat_tool], max_tokens=12)
    assert final.output_text == chat.choices[0].message.content
    ollama.Client(host=live_server.url, timeout=120).delete("gemma-tools")


def test_errors_as_the_client_raises_them(oa):
    with pytest.raises(openai.NotFoundError, match="no response with id"):
        oa.responses.create(model=MODEL, input="Hi", previous_response_id="resp_unknown")
    with pytest.raises(openai.BadRequestError, match="not fetched"):
        oa.responses.create(model=MODEL, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/cat.png"}]}])  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="'web_search' tools"):
        oa.responses.create(model=MODEL, input="Hi", tools=[{"type": "web_search"}])
    with pytest.raises(openai.NotFoundError):
        oa.responses.create(model="no-such-model", input="Hi")
