"""gpt-oss's harmony format: channels parsed into thinking, content and tool calls, however
the text streams, and through the chat routes. The outputs are the text gpt-oss emits, as
OpenAI's harmony guide and llama.cpp's tests/test-chat.cpp show it."""

from __future__ import annotations

import json

import pytest

from hearth.plugins.testing import write_tiny_model
from hearth.server.prompting.harmony import HarmonyParser, is_harmony
from hearth.server.prompting.templates import render_chat
from hearth.server.prompting.toolformats import marker_tokens
from hearth_gpt_oss.model import CHAT_TEMPLATE

from .fakes import add_model
from tiny_models import tiny_llama

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
THINK_THEN_ANSWER = (
    "<|channel|>analysis<|message|>The user greets me.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there!"
)
THINK_THEN_CALL = (
    "<|channel|>analysis<|message|>Need the weather tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}'
)
RECIPIENT_FIRST = (
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
    '<|message|>{"city": "Oslo"}'
)


def run(parser: HarmonyParser, text: str, step: int) -> tuple[str, str, list]:
    thinking, content = [], []
    for i in range(0, len(text), step):
        t, c = parser.feed(text[i : i + step])
        thinking.append(t)
        content.append(c)
    t, c, calls = parser.finish()
    return "".join(thinking) + t, "".join(content) + c, [(x.name, x.arguments) for x in calls]


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_analysis_is_thinking_and_final_is_content(step):
    got = run(HarmonyParser(), THINK_THEN_ANSWER, step)
    assert got == ("The user greets me.", "Hello there!", [])


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_a_message_to_a_function_is_a_tool_call(step):
    got = run(HarmonyParser(tools={"get_weather"}), THINK_THEN_CALL, step)
    assert got == ("Need the weather tool.", "", [("get_weather", {"city": "Paris"})])


def test_the_recipient_may_follow_the_role_and_preambles_are_content():
    text = "<|channel|>commentary<|message|>Let me check.<|end|>" + RECIPIENT_FIRST
    got = run(HarmonyParser(tools={"get_weather"}), text, 2)
    assert got == ("", "Let me check.", [("get_weather", {"city": "Oslo"})])


def test_arguments_stream_as_they_are_written():
    parser = HarmonyParser(tools={"get_weather"})
    seen = []
    for ch in THINK_THEN_CALL:
        parser.feed(ch)
        seen.extend(c.arguments for c in parser.partial_calls())
    assert seen[-1] == '{"city": "Paris"}' and '{"ci' in seen


def test_a_call_that_is_no_call_comes_back_as_content():
    text = '<|channel|>commentary to=functions.unknown json<|message|>{"a": 1}'
    assert run(HarmonyParser(tools={"get_weather"}), text, 4) == ("", '{"a": 1}', [])
    text = "<|channel|>commentary to=functions.get_weather json<|message|>not json"
    assert run(HarmonyParser(tools={"get_weather"}), text, 4) == ("", "not json", [])


def test_text_off_the_format_is_content_and_thinking_can_be_dropped():
    assert run(HarmonyParser(), "Just words, no channel.", 3) == ("", "Just words, no channel.", [])
    assert run(HarmonyParser(hide_thinking=True), THINK_THEN_ANSWER, 4)[:2] == ("", "Hello there!")


def test_harmony_markers_are_shown_only_in_a_vocabulary_with_channels():
    harmony = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "a"}
    assert marker_tokens(harmony) == harmony - {"<|return|>", "a"}
    assert marker_tokens({"<|end|>", "<|user|>", "<|assistant|>"}) == frozenset()  # Phi-3


def test_harmony_is_recognised_by_its_markers():
    assert is_harmony(CHAT_TEMPLATE)
    assert is_harmony(None, {"<|channel|>", "<|message|>", "<|start|>"})
    assert not is_harmony("<|im_start|>{{ m['content'] }}", {"<|im_start|>"})


def test_the_template_renders_calls_and_results_as_harmony():
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "name": "get_weather", "content": "sunny"},
    ]
    text = render_chat(CHAT_TEMPLATE, messages, tools=[WEATHER], add_generation_prompt=True)
    assert "type get_weather = (_: " in text
    assert (
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
    ) in text
    assert (
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny" in text
    )
    assert text.endswith("<|start|>assistant") and "Reasoning: medium" in text
    high = render_chat(CHAT_TEMPLATE, messages[:1], reasoning_effort="high")  # think: "high"
    assert high.startswith("<|start|>system<|message|>Reasoning: high\n")


# -- through the routes ---------------------------------------------------------------------


@pytest.fixture
def harmony_model(fake_service, tmp_path):
    path = write_tiny_model(
        tmp_path / "harmony.gguf",
        tiny_llama(layers=1, embd=32, ff=64, chat_template=CHAT_TEMPLATE),
    )
    add_model(fake_service.store, "oss", path)
    return fake_service


@pytest.mark.parametrize("stream", [False, True])
def test_the_chat_routes_give_thinking_content_and_calls(harmony_model, stream):
    c = harmony_model.client
    harmony_model.launcher.script = THINK_THEN_CALL
    body = {
        "model": "oss",
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [WEATHER],
        "stream": stream,
    }
    native = c.post("/api/chat", json=body)
    openai = c.post("/v1/chat/completions", json=body)
    assert native.status_code == openai.status_code == 200, native.text + openai.text
    if stream:
        lines = [json.loads(x) for x in native.text.splitlines() if x]
        calls = [tc["function"] for x in lines for tc in x["message"].get("tool_calls", [])]
        thinking = "".join(x["message"].get("thinking", "") for x in lines)
        chunks = [json.loads(x[6:]) for x in openai.text.splitlines() if x.startswith("data: {")]
        deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
        oa_calls = [tc["function"] for d in deltas for tc in d.get("tool_calls") or []]
        oa_args = "".join(f.get("arguments") or "" for f in oa_calls)
        oa_name = next(f["name"] for f in oa_calls if f.get("name"))
        reasoning = "".join(d.get("reasoning") or "" for d in deltas)
    else:
        msg = native.json()["message"]
        calls, thinking = [tc["function"] for tc in msg["tool_calls"]], msg["thinking"]
        oa = openai.json()["choices"][0]["message"]
        oa_name, oa_args = (
            oa["tool_calls"][0]["function"]["name"],
            oa["tool_calls"][0]["function"]["arguments"],
        )
        reasoning = oa["reasoning"]
    assert [(x["name"], x["arguments"]) for x in calls] == [("get_weather", {"city": "Paris"})]
    assert (oa_name, json.loads(oa_args)) == ("get_weather", {"city": "Paris"})
    assert thinking == reasoning == "Need the weather tool."

    harmony_model.launcher.script = THINK_THEN_ANSWER
    msg = c.post("/api/chat", json={**body, "stream": False, "tools": []}).json()["message"]
    assert (msg["thinking"], msg["content"]) == ("The user greets me.", "Hello there!")


def test_the_anthropic_route_gives_thinking_and_tool_use_blocks(harmony_model):
    import anthropic

    harmony_model.launcher.script = THINK_THEN_CALL
    ac = anthropic.Anthropic(
        base_url="http://127.0.0.1", api_key="unused", http_client=harmony_model.client
    )
    tool = {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": WEATHER["function"]["parameters"],
    }
    ask = [{"role": "user", "content": "Weather?"}]
    msg = ac.messages.create(model="oss", max_tokens=50, messages=ask, tools=[tool])
    blocks = [(b.type, getattr(b, "thinking", None) or b.input) for b in msg.content]
    assert blocks == [("thinking", "Need the weather tool."), ("tool_use", {"city": "Paris"})]
    assert msg.stop_reason == "tool_use"
