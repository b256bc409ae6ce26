"""One question through all four chat endpoints of a live `hearth serve` (a real runner, the
default model): Ollama's /api/chat, OpenAI's /v1/chat/completions and /v1/responses and
Anthropic's /v1/messages, each driven by its own client package. Greedy sampling makes the
answers comparable: the same plain answer, the same forced tool call (name and arguments)
and, with the tool's result sent back, the same final answer."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import ollama
import openai
import pytest

from .live_models import MODEL, create_tools_model

pytestmark = pytest.mark.slow

TOOLS_MODEL = "same-answer-tools"
N = 16
QUESTION = "Name three colors."
ASK = "What is the weather in Paris?"
RESULT = "sunny, 21 C"
PARAMS = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
          "required": ["city"]}  # fmt: skip
DESCRIPTION = "The weather in a city"
# /api/chat has no tool_choice: the JSON schema a forced call is held to, given as `format`
FORCED = {"type": "object", "required": ["name", "arguments"],
          "properties": {"name": {"const": "get_weather"}, "arguments": PARAMS}}  # fmt: skip


@pytest.fixture(scope="module")
def clients(live_server) -> dict[str, Any]:
    create_tools_model(live_server.url, TOOLS_MODEL)
    return {
        "ollama": ollama.Client(host=live_server.url, timeout=120),
        "openai": openai.OpenAI(base_url=live_server.url + "/v1", api_key="-", timeout=120),
        "anthropic": anthropic.Anthropic(
            base_url=live_server.url, api_key="-", timeout=120, max_retries=0
        ),
    }


def _texts(c: dict[str, Any], model: str, n: int, ollama_msgs: list, openai_msgs: list,
           anthropic_msgs: list, responses_input: list, tools: bool) -> dict[str, str]:  # fmt: skip
    """The four endpoints' greedy answers, each given the same conversation in its shape."""
    o_tools = [{"type": "function", "function": {
        "name": "get_weather", "description": DESCRIPTION, "parameters": PARAMS}}]  # fmt: skip
    a_tools = [{"name": "get_weather", "description": DESCRIPTION, "input_schema": PARAMS}]
    r_tools = [{"type": "function", "name": "get_weather", "description": DESCRIPTION,
                "parameters": PARAMS}]  # fmt: skip
    native = c["ollama"].chat(model=model, messages=ollama_msgs,
                              options={"temperature": 0, "num_predict": n},
                              **({"tools": o_tools} if tools else {}))  # fmt: skip
    chat = c["openai"].chat.completions.create(
        model=model, messages=openai_msgs, temperature=0, max_tokens=n,
        **({"tools": o_tools} if tools else {}))  # fmt: skip
    msg = c["anthropic"].messages.create(
        model=model, messages=anthropic_msgs, max_tokens=n, extra_body={"temperature": 0},
        **({"tools": a_tools} if tools else {}))  # fmt: skip
    resp = c["openai"].responses.create(
        model=model, input=responses_input, temperature=0, max_output_tokens=n,
        **({"tools": r_tools} if tools else {}))  # fmt: skip
    return {
        "/api/chat": native.message.content,
        "/v1/chat/completions": chat.choices[0].message.content,
        "/v1/messages": "".join(b.text for b in msg.content if b.type == "text"),
        "/v1/responses": resp.output_text,
    }


def test_plain_question_same_greedy_answer(clients):
    user = [{"role": "user", "content": QUESTION}]
    texts = _texts(clients, MODEL, N, user, user, user, user, tools=False)
    assert texts["/api/chat"], texts
    assert len(set(texts.values())) == 1, texts


def test_same_tool_call_and_same_answer_to_its_result(clients):
    c = clients
    user = [{"role": "user", "content": ASK}]
    o_tools = [{"type": "function", "function": {
        "name": "get_weather", "description": DESCRIPTION, "parameters": PARAMS}}]  # fmt: skip
    native = c["ollama"].chat(model=TOOLS_MODEL, messages=user, tools=o_tools, format=FORCED,
                              options={"temperature": 0, "num_predict": 40})  # fmt: skip
    chat = c["openai"].chat.completions.create(
        model=TOOLS_MODEL, messages=user, tools=o_tools, temperature=0, max_tokens=40,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})  # fmt: skip
    msg = c["anthropic"].messages.create(
        model=TOOLS_MODEL, messages=user, max_tokens=40, extra_body={"temperature": 0},
        tools=[{"name": "get_weather", "description": DESCRIPTION, "input_schema": PARAMS}],
        tool_choice={"type": "tool", "name": "get_weather"})  # fmt: skip
    resp = c["openai"].responses.create(
        model=TOOLS_MODEL, input=user, temperature=0, max_output_tokens=40,
        tools=[{"type": "function", "name": "get_weather", "description": DESCRIPTION,
                "parameters": PARAMS}],
        tool_choice={"type": "function", "name": "get_weather"})  # fmt: skip

    [n_call] = native.message.tool_calls
    [o_call] = chat.choices[0].message.tool_calls
    [a_call] = [b for b in msg.content if b.type == "tool_use"]
    [r_call] = [o for o in resp.output if o.type == "function_call"]
    calls = {
        "/api/chat": (n_call.function.name, dict(n_call.function.arguments)),
        "/v1/chat/completions": (o_call.function.name, json.loads(o_call.function.arguments)),
        "/v1/messages": (a_call.name, a_call.input),
        "/v1/responses": (r_call.name, json.loads(r_call.arguments)),
    }
    assert calls["/api/chat"][0] == "get_weather" and calls["/api/chat"][1]["city"], calls
    assert all(call == calls["/api/chat"] for call in calls.values()), calls

    # the result sent back, each in its endpoint's shape: the same final answer
    args = calls["/api/chat"][1]
    n_msgs = [*user, {"role": "assistant", "content": "", "tool_calls": [
                  {"function": {"name": "get_weather", "arguments": args}}]},
              {"role": "tool", "content": RESULT, "tool_name": "get_weather"}]  # fmt: skip
    o_msgs = [*user, {"role": "assistant", "content": "", "tool_calls": [
                  {"id": o_call.id, "type": "function", "function": {
                      "name": "get_weather", "arguments": o_call.function.arguments}}]},
              {"role": "tool", "tool_call_id": o_call.id, "content": RESULT}]  # fmt: skip
    a_msgs = [*user, {"role": "assistant", "content": [
                  {"type": "tool_use", "id": a_call.id, "name": "get_weather", "input": args}]},
              {"role": "user", "content": [
                  {"type": "tool_result", "tool_use_id": a_call.id, "content": RESULT}]},
              ]  # fmt: skip
    r_input = [*user, {"type": "function_call", "call_id": r_call.call_id, "name": "get_weather",
                       "arguments": r_call.arguments},
               {"type": "function_call_output", "call_id": r_call.call_id, "output": RESULT},
               ]  # fmt: skip
    texts = _texts(c, TOOLS_MODEL, 12, n_msgs, o_msgs, a_msgs, r_input, tools=True)
    assert texts["/api/chat"], texts
    assert len(set(texts.values())) == 1, texts
